//! A template cannot freeze the daemon (issue "Hardening II", item 9): a
//! `{% for %}` of 10^5 x 10^5 in an agent's `system` used to pass
//! `aurad validate` and hold a thread of `aurad serve` for hours (SIGTERM
//! ignored, `limits.timeout` not applied, since no run had started).
//! Rendering now stops after a bounded number of steps and runs off the
//! async workers: `validate` warns where the loop is written, the run of a
//! real `aurad serve` fails at once saying why, `/healthz` answers all the
//! while, and SIGTERM stops the daemon.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::serve::{Serve, aurad, free_port, http_get, http_post_json, poll, run_of, text};

const BOMB: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";

fn project(root: &Path) {
    std::fs::create_dir_all(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/bomb.yaml"),
        format!("model: test\nsystem: \"{BOMB}\"\nprompt: hi\n"),
    )
    .unwrap();
    std::fs::write(
        root.join("agents/fine.yaml"),
        "model: test\nsystem: \"{% for i in range(3) %}{{ i }}{% endfor %}\"\nprompt: hi\n",
    )
    .unwrap();
}

#[test]
fn validate_warns_where_a_loop_too_long_to_render_is_written() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let out = aurad(dir.path()).arg("validate").output().unwrap();
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "a warning keeps the exit code: {stderr}"
    );
    assert!(
        stderr.contains(
            "agents/bomb.yaml:2:10: warning: `system` takes more than 1000000 steps to render even with empty inputs"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("agents/fine.yaml"), "{stderr}");
}

#[test]
fn a_template_bomb_fails_its_run_and_the_daemon_stays_responsive() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = addr.to_string();
    let mut serve = Serve::start(dir.path(), addr, &["--listen", &listen]);
    let (status, body) = http_post_json(addr, "/v1/agents/bomb/runs", "{}").unwrap();
    // Either the request is refused at once (the run cannot be prepared)
    // or the run is recorded failed: both name the template and the bound.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    if status == 202 {
        let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let run = poll(
            "the bomb's run to end",
            || serve.log(),
            || {
                let asked = Instant::now();
                let health = http_get(addr, "/healthz");
                slowest = slowest.max(asked.elapsed());
                assert!(matches!(health, Some((200, _))), "{health:?}");
                run_of(&serve, &id).filter(|r| r["state"] != "queued" && r["state"] != "running")
            },
        );
        assert_eq!(run["state"], "failed", "{run}");
        assert!(
            run["error"].as_str().unwrap().contains("steps to render"),
            "{run}"
        );
    } else {
        assert_eq!(status, 422, "{body}");
        assert!(
            body.contains("took more than 1000000 steps to render"),
            "{body}"
        );
    }
    // The daemon answered all the while, and still does.
    let asked = Instant::now();
    assert!(matches!(http_get(addr, "/healthz"), Some((200, _))));
    slowest = slowest.max(asked.elapsed());
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?} while the bomb was handled ({:?} in all)",
        started.elapsed()
    );
    serve.signal(libc::SIGTERM);
    assert!(serve.wait_exit().success(), "{}", serve.log());
}

/// The daemon raises its soft open-file limit to the hard one at start: a
/// soft limit of 256 (as a shell's `ulimit -Sn` leaves it) would let a few
/// hundred idle connections take every descriptor.
#[test]
fn serve_raises_its_open_file_limit_to_the_hard_one() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let listen = format!("127.0.0.1:{}", free_port());
    let child = std::process::Command::new("bash")
        .args([
            "-c",
            "ulimit -Sn 256 && exec \"$0\" --dir \"$1\" serve --listen \"$2\"",
            env!("CARGO_BIN_EXE_aurad"),
        ])
        .arg(dir.path())
        .arg(&listen)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = support::serve::KillOnDrop(child);
    let pid = child.0.id();
    let addr = listen.parse().unwrap();
    poll("aurad serve to answer", String::new, || {
        http_get(addr, "/healthz").filter(|(status, _)| *status == 200)
    });
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers[0], numbers[1], "soft and hard differ: {line}");
    assert_ne!(numbers[0], "256", "{line}");
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert!(child.0.wait().unwrap().success());
}

/// Raises this process's soft open-file limit to its hard one (the test
/// opens 1,100 sockets).
fn raise_own_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// 1,100 connections that send nothing once took the API down. Now
/// `/healthz` answers while they are open, and the server closes an idle
/// connection (and one trickling its headers) after its header timeout
/// instead of holding it forever.
#[test]
fn idle_and_trickling_connections_neither_take_the_api_down_nor_stay_open() {
    use std::io::{Read, Write};
    raise_own_file_limit();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = addr.to_string();
    let serve = Serve::start(dir.path(), addr, &["--listen", &listen]);
    let idle: Vec<std::net::TcpStream> = (0..1100)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let mut trickle = std::net::TcpStream::connect(addr).unwrap();
    trickle.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    let asked = Instant::now();
    let answer = http_get(addr, "/healthz");
    let took = asked.elapsed();
    assert!(
        matches!(answer, Some((200, _))),
        "{answer:?} with 1,100 idle connections open\n{}",
        serve.log()
    );
    assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
    // The server closes them: a read sees the end (or a reset) before the
    // deadline, and never a response for the trickled request.
    let started = Instant::now();
    for mut stream in idle.into_iter().take(5).chain([trickle]) {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut buf = [0u8; 64];
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => {}
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]).to_string();
                // hyper answers a header timeout with 408 before closing.
                assert!(text.starts_with("HTTP/1.1 408"), "{text}");
            }
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the idle connections stayed open"
    );
}
