//! `aurad service` and the systemd protocol of `aurad serve`, with the real
//! binary: the printed unit passes `systemd-analyze verify` (Debian's
//! `systemd` package; with CI set a missing tool fails the test), `--install`
//! writes it once and never over a different unit, and a real `aurad serve`
//! child with `NOTIFY_SOCKET` pointing at a datagram socket this test binds
//! sends READY=1 once its API answers, WATCHDOG=1 every half
//! `WATCHDOG_USEC`, RELOADING=1 and READY=1 around a hot reload, and
//! STOPPING=1 at SIGTERM.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use support::serve::{DEADLINE, Serve, http_get, run, show, text};

fn project() -> (tempfile::TempDir, std::net::SocketAddr) {
    support::test_model::project(&[(
        "hello",
        "description: Says hello.\nmodel: test\nprompt: hi\n",
    )])
}

/// `aurad service ARGS` for `root`; its stdout, after asserting success.
fn service(root: &Path, args: &[&str]) -> String {
    let mut all = vec!["service"];
    all.extend_from_slice(args);
    let out = run(root, &all);
    assert!(out.status.success(), "{}", show(&out));
    text(&out.stdout)
}

/// `systemd-analyze verify` of `unit` written as `name` in a temporary
/// directory; `None` (skipped, said why) when the tool is missing outside CI.
fn verify(name: &str, unit: &str) -> Option<std::process::Output> {
    let found = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze is missing: install Debian's systemd package (.ci/run does)"
        );
        eprintln!("skipped: systemd-analyze is missing (apt-get install systemd)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, unit).unwrap();
    Some(
        std::process::Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&path)
            .output()
            .unwrap(),
    )
}

#[test]
fn the_printed_units_pass_systemd_analyze_verify() {
    let (dir, _) = project();
    let dir_name = dir.path().file_name().unwrap().to_string_lossy();
    let name = format!("aurad-{}.service", dir_name.trim_start_matches('.'));
    for args in [&[][..], &["--user"], &["--log-format", "json"]] {
        let unit = service(dir.path(), args);
        for line in [
            "Type=notify",
            "NotifyAccess=main",
            "WatchdogSec=30s",
            "Restart=on-failure",
            "KillMode=mixed",
            // shutdown_grace: 5s in this project's aurad.yaml, plus 30 s.
            "TimeoutStopSec=35s",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "ProtectHome=read-only",
            "RestrictNamespaces=user mnt",
            "Delegate=yes",
        ] {
            assert!(unit.lines().any(|l| l == line), "{line} missing:\n{unit}");
        }
        let root = dir.path().to_str().unwrap();
        let exe = assert_cmd::cargo::cargo_bin!("aurad");
        let json = if args.contains(&"json") {
            " --log-format json"
        } else {
            ""
        };
        let exec = format!("ExecStart={} --dir {root} serve{json}", exe.display());
        assert!(unit.lines().any(|l| l == exec), "{exec} missing:\n{unit}");
        assert!(unit.contains(&format!("ReadWritePaths={root}\n")), "{unit}");
        assert!(
            unit.contains(&format!("EnvironmentFile=-{root}/.env\n")),
            "{unit}"
        );
        // The project is in /tmp: a private /tmp would hide it.
        assert!(!unit.contains("PrivateTmp=yes"), "{unit}");
        assert_eq!(
            unit.contains("CapabilityBoundingSet=\n"),
            !args.contains(&"--user"),
            "{unit}"
        );
        let Some(out) = verify(&name, &unit) else {
            return;
        };
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify refused the unit of `aurad service {args:?}`:\n{}\n{unit}",
            show(&out)
        );
    }
}

#[test]
fn install_writes_once_and_never_over_a_different_unit() {
    let (dir, _) = project();
    let units = tempfile::tempdir().unwrap();
    let unit_dir = units.path().join("system");
    let unit_dir = unit_dir.to_str().unwrap();
    let printed = service(dir.path(), &["--user"]);
    let said = service(dir.path(), &["--user", "--install", "--unit-dir", unit_dir]);
    // The temporary directory's name starts with a dot, which the unit's
    // name leaves out.
    let dir_name = dir.path().file_name().unwrap().to_string_lossy();
    let name = format!("aurad-{}.service", dir_name.trim_start_matches('.'));
    let path = Path::new(unit_dir).join(&name);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), printed);
    assert!(
        said.contains(&format!("wrote {}", path.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "systemctl --user daemon-reload && systemctl --user enable --now {name}"
        )),
        "{said}"
    );
    // The same unit again: nothing to do.
    let again = service(dir.path(), &["--user", "--install", "--unit-dir", unit_dir]);
    assert!(again.contains("unchanged"), "{again}");
    // A unit someone changed is kept, and the command fails saying so.
    let edited = format!("{printed}# edited by hand\n");
    std::fs::write(&path, &edited).unwrap();
    let out = run(
        dir.path(),
        &["service", "--user", "--install", "--unit-dir", unit_dir],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("exists and differs from this unit: not replaced"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited);
}

/// The messages `socket` receives until `until` returns true for one, or
/// the deadline: each datagram's lines.
fn receive_until(
    socket: &UnixDatagram,
    serve: &Serve,
    what: &str,
    mut until: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; received {got:?}\n{}",
            serve.log()
        );
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        got.push(message.clone());
        if until(&message) {
            return got;
        }
    }
}

#[test]
fn serve_tells_systemd_it_is_ready_alive_and_stopping() {
    let (dir, addr) = project();
    let sockets = tempfile::tempdir().unwrap();
    let path = sockets.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let mut serve = Serve::spawn_with_env(
        dir.path(),
        addr,
        &[],
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
    );
    let got = receive_until(&socket, &serve, "READY=1", |m| {
        m.lines().any(|l| l == "READY=1")
    });
    // Ready means serving: the API answers at once, without waiting.
    assert_eq!(
        http_get(addr, "/healthz").map(|(status, _)| status),
        Some(200),
        "READY=1 came before the API answered"
    );
    let ready = got.last().unwrap();
    assert!(
        ready.contains(&format!("STATUS=serving 1 agent(s) on {addr}")),
        "{got:?}"
    );
    // Pings every 200 ms (half of WATCHDOG_USEC): five take about a second.
    let started = Instant::now();
    let mut pings = 0;
    receive_until(&socket, &serve, "five WATCHDOG=1", |m| {
        pings += usize::from(m.lines().any(|l| l == "WATCHDOG=1"));
        pings == 5
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "5 pings took {:?}",
        started.elapsed()
    );
    // A hot reload: RELOADING=1, then READY=1 with the new status.
    std::fs::write(
        dir.path().join("agents/second.yaml"),
        "description: Another.\nmodel: test\nprompt: hi\n",
    )
    .unwrap();
    receive_until(&socket, &serve, "RELOADING=1", |m| {
        m.lines().any(|l| l == "RELOADING=1")
    });
    let got = receive_until(&socket, &serve, "READY=1 after the reload", |m| {
        m.lines().any(|l| l == "READY=1")
    });
    assert!(
        got.last().unwrap().contains("STATUS=serving 2 agent(s)"),
        "{got:?}"
    );
    serve.signal(libc::SIGTERM);
    let got = receive_until(&socket, &serve, "STOPPING=1", |m| {
        m.lines().any(|l| l == "STOPPING=1")
    });
    assert!(
        got.last().unwrap().contains("STATUS=shutting down"),
        "{got:?}"
    );
    assert!(serve.wait_exit().success(), "{}", serve.log());
}

#[test]
fn an_abstract_notify_socket_and_another_pids_watchdog() {
    use std::os::linux::net::SocketAddrExt;
    let (dir, addr) = project();
    let name = format!("aurad-test-notify-{}", std::process::id());
    let socket = UnixDatagram::bind_addr(
        &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
    )
    .unwrap();
    // The watchdog is for pid 1, not aurad: it must not ping.
    let serve = Serve::spawn_with_env(
        dir.path(),
        addr,
        &[],
        &[
            ("NOTIFY_SOCKET", &format!("@{name}")),
            ("WATCHDOG_USEC", "200000"),
            ("WATCHDOG_PID", "1"),
        ],
    );
    receive_until(&socket, &serve, "READY=1 on an abstract socket", |m| {
        m.lines().any(|l| l == "READY=1")
    });
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let until = Instant::now() + Duration::from_millis(1000);
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        if let Ok(n) = socket.recv(&mut buf) {
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            assert!(
                !message.lines().any(|l| l == "WATCHDOG=1"),
                "pinged a watchdog meant for another process: {message}"
            );
        }
    }
}
