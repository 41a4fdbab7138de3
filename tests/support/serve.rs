//! The real `aurad serve` binary as a child process: a project whose
//! `aurad.yaml` names a free loopback port, start-up awaited by polling
//! `GET /healthz`, and a guard that kills the process when the test ends.
//! Plus polling with a deadline and a tiny HTTP GET.

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::mock_llm::MockLlm;

/// How long start-up, a run or a shutdown may take before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The `aurad` binary with `--dir root`, logging kept quiet unless asked.
pub fn aurad(root: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("aurad"));
    cmd.arg("--dir").arg(root).env_remove("RUST_LOG");
    cmd
}

/// Output bytes as text (lossy).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `aurad --dir root ARGS` to the end (stdin closed).
pub fn run(root: &Path, args: &[&str]) -> std::process::Output {
    aurad(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run aurad")
}

/// A finished command's exit code, stdout and stderr, for failure messages.
pub fn show(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// Writes the project's `aurad.yaml`: the `mock` provider and a free
/// `listen` port, which it returns.
pub fn write_settings(root: &Path, mock: &MockLlm) -> SocketAddr {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        root.join("aurad.yaml"),
        format!(
            "providers:\n  mock: {{ kind: openai, base_url: \"{}\" }}\nlisten: {addr}\nshutdown_grace: 20s\n",
            mock.base_url()
        ),
    )
    .unwrap();
    addr
}

/// Calls `f` until it returns `Some`, every 20 ms; panics with `what` (and
/// `context()`) when `DEADLINE` passes first.
pub fn poll<T>(what: &str, context: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The project a test's `aurad serve` listening on each address runs, so
/// the requests below carry its token (the one it wrote for the person).
static PROJECTS: std::sync::Mutex<Vec<(SocketAddr, PathBuf)>> = std::sync::Mutex::new(Vec::new());

/// Remembers that the daemon of `root` listens on `addr`.
pub fn remember(addr: SocketAddr, root: &Path) {
    let mut projects = PROJECTS.lock().unwrap();
    projects.retain(|(a, _)| *a != addr);
    projects.push((addr, root.to_path_buf()));
}

/// The token of the daemon listening on `addr`, read now (a restarted
/// daemon has a new one): an `Authorization` header line, or nothing.
pub fn authorization(addr: SocketAddr) -> String {
    let root = PROJECTS
        .lock()
        .unwrap()
        .iter()
        .find(|(a, _)| *a == addr)
        .map(|(_, root)| root.clone());
    root.and_then(|root| super::inproc::api_token(&root, addr.port()))
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default()
}

/// `GET path` on `addr` (with its daemon's token): the status and body, or
/// `None` when nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let authorization = authorization(addr);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Starts a run of `agent` with `input` through the API (with the
/// daemon's token); its id. Panics unless the answer is 202.
pub fn start_run(addr: SocketAddr, agent: &str, input: &str) -> String {
    let body = serde_json::json!({ "input": input }).to_string();
    let (status, answer) = http_post_json(addr, &format!("/v1/agents/{agent}/runs"), &body)
        .unwrap_or_else(|| panic!("no answer from {addr}"));
    assert_eq!(status, 202, "{answer}");
    let value: serde_json::Value = serde_json::from_str(&answer).unwrap();
    value["id"].as_str().unwrap().to_string()
}

/// `POST path` with a JSON body: the status and body.
pub fn http_post_json(addr: SocketAddr, path: &str, body: &str) -> Option<(u16, String)> {
    http_post(addr, path, &[("Content-Type", "application/json")], body)
}

/// `POST path` with `headers` and `body`: the status and body.
pub fn http_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    if !headers.to_ascii_lowercase().contains("authorization:") {
        headers.push_str(&authorization(addr));
    }
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// A running `aurad serve`; killed (and reaped) when dropped.
pub struct Serve {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub root: PathBuf,
    /// Where its stderr (the log) goes.
    log: tempfile::NamedTempFile,
    status: Option<ExitStatus>,
}

impl Serve {
    /// Starts `aurad serve` on `root` (listening on `addr`, as written in
    /// its aurad.yaml) with `extra` arguments, and waits until `/healthz`
    /// answers.
    pub fn start(root: &Path, addr: SocketAddr, extra: &[&str]) -> Serve {
        let serve = Serve::spawn(root, addr, extra);
        serve.wait_healthy();
        serve
    }

    /// Starts `aurad serve` without waiting for it.
    pub fn spawn(root: &Path, addr: SocketAddr, extra: &[&str]) -> Serve {
        Serve::spawn_with_env(root, addr, extra, &[])
    }

    /// [`Serve::start`] with `env` variables set for the daemon.
    pub fn start_with_env(
        root: &Path,
        addr: SocketAddr,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let serve = Serve::spawn_with_env(root, addr, extra, env);
        serve.wait_healthy();
        serve
    }

    /// [`Serve::spawn`] with `env` variables set for the daemon.
    pub fn spawn_with_env(
        root: &Path,
        addr: SocketAddr,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let log = tempfile::NamedTempFile::new().unwrap();
        remember(addr, root);
        let child = aurad(root)
            .envs(env.iter().copied())
            .arg("serve")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("spawn aurad serve");
        Serve {
            child: Some(child),
            addr,
            root: root.to_path_buf(),
            log,
            status: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Polls `/healthz` until it answers 200; panics with the log if the
    /// process exits or the deadline passes first.
    pub fn wait_healthy(&self) {
        poll(
            "GET /healthz to answer 200",
            || self.log(),
            || match http_get(self.addr, "/healthz") {
                Some((200, _)) => Some(()),
                _ => None,
            },
        );
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill sends a signal to our own child process.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.pid());
    }

    /// Waits for the process to exit; panics with the log after `DEADLINE`.
    pub fn wait_exit(&mut self) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let log = self.log.path().to_path_buf();
        let child = self.child.as_mut().expect("running");
        let context = || std::fs::read_to_string(&log).unwrap_or_default();
        let status = poll("aurad serve to exit", context, || {
            child.try_wait().expect("try_wait")
        });
        self.status = Some(status);
        status
    }

    /// `kill -9`, then reaps it.
    pub fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Any other child process of a test; killed (and reaped) when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `id` as `GET /v1/runs/{id}` answers it.
pub fn run_of(serve: &Serve, id: &str) -> Option<serde_json::Value> {
    match http_get(serve.addr, &format!("/v1/runs/{id}")) {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Waits until run `id` is in `state`; returns it.
pub fn wait_state(serve: &Serve, id: &str, state: &str) -> serde_json::Value {
    poll(
        &format!("run {id} to be {state}"),
        || format!("{:?}\n{}", run_of(serve, id), serve.log()),
        || run_of(serve, id).filter(|run| run["state"] == state),
    )
}

/// The stored events of run `id`, as `aurad logs --json` prints them.
pub fn events(root: &Path, id: &str) -> Vec<serde_json::Value> {
    let out = aurad(root).args(["logs", id, "--json"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The events of type `kind`.
pub fn of_type<'a>(events: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// A one-route HTTP server on 127.0.0.1 that answers 200 and hands each
/// request body over.
pub fn webhook_server() -> (String, std::sync::mpsc::Receiver<serde_json::Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if let Ok(json) = serde_json::from_slice(&body)
                && tx.send(json).is_err()
            {
                return;
            }
        }
    });
    (url, rx)
}
