#!/usr/bin/env python3
"""Writes link/aurad.order: the functions of the release `aurad` that a
one-shot `aurad run` and a warm run through `aurad serve` execute, for
lld's `--symbol-ordering-file` (see build.rs and BENCHMARKS.md, "Where a
one-shot run's memory and instructions go").

Usage: python3 link/order.py [BINARY...]   (default target/release/aurad)

Each BINARY must be a release build with its symbol table (the release
profile keeps it: `strip = false`). Give both the binary of `cargo build
--release` and the one `cargo bench` builds (dev-dependencies unify other
features into some crates, which changes their symbol names): the list is
their union, the first binary's functions first. The script starts link/mock_llm.py (an
OpenAI-compatible mock whose model calls `bash` three times, then answers),
runs the binary under `valgrind --tool=callgrind` for `aurad run` and for
`aurad serve` serving one streamed run, and keeps every executed function
of the binary, in the binary's own address order. Symbol names carry a hash
of the crate and of the profile's settings, so the list is redone after a
dependency or profile change (stale names are ignored by the linker, and
functions not listed are placed after the listed ones).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, deadline=60):
    end = time.time() + deadline
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"order.py: {what} did not listen on port {port} within {deadline} s")


def executed(callgrind_out):
    """Mangled names of every function callgrind saw executing."""
    names = set()
    pattern = re.compile(r"^c?fn=(?:\(\d+\))? ?(\S+)")
    with open(callgrind_out) as f:
        for line in f:
            m = pattern.match(line)
            if m:
                names.add(m.group(1))
    return names


def trace(binary):
    """The functions of `binary` that a one-shot run and a served run
    execute, in the binary's address order."""
    symbols = {}
    nm = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True)
    for line in nm.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            symbols.setdefault(parts[2], int(parts[0], 16))
    if not symbols:
        sys.exit(f"order.py: {binary} has no symbol table; build it with the release profile (strip = false)")
    work = tempfile.mkdtemp(prefix="aurad-order-")
    mock_port, serve_port = free_port(), free_port()
    mock = subprocess.Popen([sys.executable, os.path.join(HERE, "mock_llm.py"), str(mock_port)])
    try:
        wait_port(mock_port, "the mock")
        os.makedirs(os.path.join(work, "agents"))
        with open(os.path.join(work, "aurad.yaml"), "w") as f:
            f.write(f'providers:\n  mock: {{ kind: openai, base_url: "http://127.0.0.1:{mock_port}/v1" }}\n'
                    f"listen: 127.0.0.1:{serve_port}\n")
        with open(os.path.join(work, "agents/a.yaml"), "w") as f:
            f.write("model: mock/m\nsystem: Be brief.\nprompt: Say hi three times.\ntools: [bash]\n")
        grind = ["valgrind", "--tool=callgrind", "--demangle=no", "--trace-children=no"]
        names = set()
        # Twice: the first run creates the database, the second finds it.
        for i in range(2):
            out = os.path.join(work, f"run{i}.callgrind")
            subprocess.run(grind + [f"--callgrind-out-file={out}", binary, "run", "a", "--dir", work],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            names |= executed(out)
        serve_out = os.path.join(work, "serve.callgrind")
        serve = subprocess.Popen(grind + [f"--callgrind-out-file={serve_out}", binary, "--dir", work, "serve"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(serve_port, "aurad serve", deadline=120)
        for _ in range(2):
            request = urllib.request.Request(
                f"http://127.0.0.1:{serve_port}/v1/agents/a/runs", data=b'{"input":"hi"}',
                headers={"content-type": "application/json", "accept": "text/event-stream"})
            body = urllib.request.urlopen(request, timeout=120).read().decode()
            if '"state":"succeeded"' not in body:
                sys.exit(f"order.py: the served run did not succeed:\n{body}")
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=120)
        names |= executed(serve_out)
    finally:
        mock.terminate()
    ordered = sorted((symbols[n], n) for n in names if n in symbols)
    print(f"{binary}: {len(ordered)} functions executed of {len(symbols)}")
    return [name for _, name in ordered]


def main():
    default = [os.path.join(ROOT, "target/release/aurad")]
    listed, seen = [], set()
    for binary in sys.argv[1:] or default:
        for name in trace(os.path.abspath(binary)):
            if name not in seen:
                seen.add(name)
                listed.append(name)
    out = os.path.join(HERE, "aurad.order")
    with open(out, "w") as f:
        for name in listed:
            f.write(name + "\n")
    print(f"{out}: {len(listed)} functions")


if __name__ == "__main__":
    main()
