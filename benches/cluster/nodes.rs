//! The cluster bench's nodes: a project directory per node whose
//! `aurad.yaml` (port, slots, the mock LLM as provider `mock0`, the
//! lease on PostgreSQL) and agent files are rewritten for each start, the
//! running `aurad serve` processes of a setup, and waiting on the
//! database with a deadline. Depends on the test support's `Serve` and
//! the mock LLM.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::mock_llm::MockLlm;
use crate::support::postgres::TestDatabase;
use crate::support::serve::{Serve, free_port};

/// The lease of the PostgreSQL nodes (the default).
pub const LEASE: &str = "15s";

/// One node's project directory; its `aurad.yaml` is rewritten for each
/// start (a fresh port, its slots, the agents of the phase).
pub struct NodeDir {
    pub dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl NodeDir {
    pub fn new() -> NodeDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        NodeDir {
            dir,
            addr: "127.0.0.1:9".parse().unwrap(),
        }
    }

    /// Writes `aurad.yaml` (a free port, `max_concurrent_runs: slots`, the
    /// mock as provider `mock0`) and replaces the agent files with
    /// `agents`.
    pub fn configure(
        &mut self,
        mock: &MockLlm,
        postgres: bool,
        slots: usize,
        agents: &[(String, String)],
    ) {
        let root = self.dir.path();
        self.addr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut settings = format!(
            "listen: {}\nshutdown_grace: 10s\nmax_concurrent_runs: {slots}\nproviders:\n  mock0: {{ kind: openai, base_url: \"{}\" }}\n",
            self.addr,
            mock.base_url()
        );
        if postgres {
            let _ = writeln!(settings, "cluster:\n  lease: {LEASE}");
        }
        std::fs::write(root.join("aurad.yaml"), settings).unwrap();
        for entry in std::fs::read_dir(root.join("agents")).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        for (name, yaml) in agents {
            std::fs::write(root.join(format!("agents/{name}.yaml")), yaml).unwrap();
        }
    }
}

/// The nodes of one setup, running.
pub struct Cluster {
    pub serves: Vec<Serve>,
}

impl Cluster {
    pub fn start(dirs: &[NodeDir], database: Option<&TestDatabase>) -> Cluster {
        let env: Vec<(&str, &str)> = database
            .map(|db| vec![("AURAD_DATABASE_URL", db.url.as_str())])
            .unwrap_or_default();
        let serves = dirs
            .iter()
            .map(|d| Serve::start_with_env(d.dir.path(), d.addr, &[], &env))
            .collect();
        Cluster { serves }
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.serves.iter().map(|s| s.addr).collect()
    }

    /// The node whose process a stored `owner` names (`pid:N ...`).
    pub fn node_of(&self, owner: &str) -> Option<usize> {
        let pid: i32 = owner
            .strip_prefix("pid:")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        self.serves.iter().position(|s| s.pid() == pid)
    }

    pub fn logs(&self) -> String {
        self.serves
            .iter()
            .enumerate()
            .map(|(i, s)| format!("--- node {i}\n{}", tail(&s.log(), 40)))
            .collect()
    }

    /// SIGTERM to every node, then waits for each to exit.
    pub fn stop(mut self) {
        for serve in &self.serves {
            serve.signal(libc::SIGTERM);
        }
        for serve in &mut self.serves {
            serve.wait_exit();
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("? ({e})"))
}

/// Waits until `count()` reaches `n`; panics with the nodes' logs after
/// `deadline`.
pub fn wait_for(
    what: &str,
    cluster: &Cluster,
    n: i64,
    deadline: Duration,
    count: impl Fn() -> i64,
) {
    let until = Instant::now() + deadline;
    loop {
        let now = count();
        if now >= n {
            return;
        }
        if Instant::now() > until {
            panic!(
                "{what}: {now} of {n} after {deadline:?}\n{}",
                cluster.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
