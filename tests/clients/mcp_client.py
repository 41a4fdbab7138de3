"""An MCP client built on the official MCP Python SDK (`pip install mcp`),
driven by tests/mcp_serve_python.rs against aurad's agents as MCP tools.

Usage:
  mcp_client.py stdio AURAD PROJECT SCENARIO   (starts `AURAD mcp serve --dir PROJECT`)
  mcp_client.py http URL TOKEN SCENARIO        (the `/mcp` endpoint of `aurad serve`)

Scenarios:
  call    lists the tools, calls `writer` with a progress callback and
          `summary` (an agent with an output_schema); prints one JSON
          object: {"tools": ..., "answer": ..., "structured": ..., "progress": [...]}
  cancel  calls `slow` (whose model never answers), waits for its run to
          start (a progress notification names it), cancels the call, and
          prints `cancelled RUN_ID`; then waits for a line on stdin (the
          test checks the store meanwhile, with the session still open),
          calls `writer` once more and prints its answer as `after ANSWER`.

Everything goes to stdout as whole lines, flushed; errors end the process
with a traceback on stderr and a non-zero exit.
"""

import json
import re
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def say(line):
    print(line, flush=True)


def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


async def call_scenario(session):
    listed = await session.list_tools()
    tools = [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "output_schema": tool.output_schema,
        }
        for tool in listed.tools
    ]
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    answer = await session.call_tool("writer", {"input": "write it"}, progress_callback=on_progress)
    structured = await session.call_tool("summary", {"input": "sum it up"})
    say(
        json.dumps(
            {
                "tools": tools,
                "answer": {"text": text_of(answer), "is_error": answer.is_error},
                "structured": {
                    "content": structured.structured_content,
                    "is_error": structured.is_error,
                },
                "progress": progress,
            }
        )
    )


async def cancel_scenario(session):
    started = anyio.Event()
    run = {}

    async def on_progress(value, total, message):
        found = re.match(r"run (\S+) of", message or "")
        if found and not started.is_set():
            run["id"] = found.group(1)
            started.set()

    async with anyio.create_task_group() as group:

        async def call_slow():
            await session.call_tool("slow", {"input": "take your time"}, progress_callback=on_progress)
            raise AssertionError("the call to `slow` answered; it should have been cancelled")

        group.start_soon(call_slow)
        with anyio.fail_after(30):
            await started.wait()
        # Cancelling the task abandons the request: the SDK sends
        # `notifications/cancelled` (stdio) or closes the request's stream (HTTP).
        group.cancel_scope.cancel()
    say(f"cancelled {run['id']}")
    await anyio.to_thread.run_sync(sys.stdin.readline)
    after = await session.call_tool("writer", {"input": "again"})
    say(f"after {text_of(after)}")


async def run(session, scenario):
    await session.initialize()
    if scenario == "call":
        await call_scenario(session)
    elif scenario == "cancel":
        await cancel_scenario(session)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


async def main(argv):
    mode = argv[1]
    if mode == "stdio":
        aurad, project, scenario = argv[2], argv[3], argv[4]
        params = StdioServerParameters(command=aurad, args=["mcp", "serve", "--dir", project])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await run(session, scenario)
    elif mode == "http":
        url, token, scenario = argv[2], argv[3], argv[4]
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with client, streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await run(session, scenario)
    else:
        raise SystemExit(f"unknown mode {mode!r}: stdio or http")


if __name__ == "__main__":
    anyio.run(main, sys.argv)
