//! The daemon under measurement and its project: a temporary project
//! ([`Project`], [`agent_yaml`]), `aurad serve` started on it as a child
//! process ([`Daemon`]), and what `/proc` says about either process.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::DEADLINE;
use crate::support::mock_llm::MockLlm;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (N concurrent runs
/// hold about 2N sockets in this process and 2N in the daemon, which
/// inherits the limit). Returns the soft limit now in force.
pub(crate) fn raise_nofile() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let wanted = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
                limit = wanted;
            }
        }
    }
    limit.rlim_cur
}

/// A loopback address nothing listens on right now.
pub(crate) fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A temporary project: `aurad.yaml` (listen address, providers `mock0`..
/// pointing at `mocks`, `extra` settings) and `agents/NAME.yaml` files.
pub(crate) struct Project {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) addr: SocketAddr,
}

impl Project {
    pub(crate) fn new(mocks: &[MockLlm], extra: &str, agents: &[(String, String)]) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let mut settings = format!("listen: {addr}\n{extra}providers:\n");
        if mocks.is_empty() {
            settings.push_str("  mock0: { kind: openai, base_url: \"http://127.0.0.1:9/v1\" }\n");
        }
        for (i, mock) in mocks.iter().enumerate() {
            let _ = writeln!(
                settings,
                "  mock{i}: {{ kind: openai, base_url: \"{}\" }}",
                mock.base_url()
            );
        }
        std::fs::write(dir.path().join("aurad.yaml"), settings).unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        for (name, yaml) in agents {
            std::fs::write(dir.path().join(format!("agents/{name}.yaml")), yaml).unwrap();
        }
        Project { dir, addr }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A running `aurad --dir ROOT serve`: killed and reaped when dropped; its
/// log is printed when the benchmark fails while it runs.
pub(crate) struct Daemon {
    pub(crate) child: Option<Child>,
    pub(crate) pid: i32,
    pub(crate) addr: SocketAddr,
    pub(crate) log: tempfile::NamedTempFile,
    pub(crate) client: reqwest::Client,
}

impl Daemon {
    /// Starts the daemon on `project` and waits until `/healthz` answers.
    pub(crate) async fn start(project: &Project) -> Daemon {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_aurad"))
            .arg("--dir")
            .arg(project.path())
            .arg("serve")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("spawn aurad serve");
        let daemon = Daemon {
            pid: child.id() as i32,
            child: Some(child),
            addr: project.addr,
            log,
            client: reqwest::Client::builder()
                .timeout(DEADLINE)
                .build()
                .unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = daemon.client.get(daemon.url("/healthz")).send().await
                && r.status() == 200
            {
                break;
            }
            if Instant::now() > deadline {
                daemon.fail("GET /healthz did not answer 200 within 30 s");
            }
            if let Some(status) = daemon.exited() {
                daemon.fail(&format!("aurad serve exited at start-up: {status}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        daemon
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn exited(&self) -> Option<std::process::ExitStatus> {
        // try_wait needs &mut; waitpid with WNOHANG on our own child.
        let mut status = 0;
        // SAFETY: waitpid on our own child, writing a local.
        let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        (rc == self.pid).then(|| std::os::unix::process::ExitStatusExt::from_raw(status))
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    pub(crate) fn print_log(&self) {
        let log = self.log_text();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        eprintln!("---- aurad serve log (last {} lines) ----", tail.len());
        for line in tail.into_iter().rev() {
            eprintln!("{line}");
        }
        eprintln!("---- end of log ----");
    }

    pub(crate) fn fail(&self, message: &str) -> ! {
        self.print_log();
        panic!("{message}");
    }

    pub(crate) async fn get_json(&self, path: &str) -> Value {
        match self.client.get(self.url(path)).send().await {
            Ok(r) if r.status().is_success() => match r.json().await {
                Ok(v) => v,
                Err(e) => self.fail(&format!("GET {path}: {e}")),
            },
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                self.fail(&format!("GET {path}: {status} {body}"))
            }
            Err(e) => self.fail(&format!("GET {path}: {e}")),
        }
    }

    /// (`aurad_runs_running`, `aurad_runs_queued`) from `/metrics`.
    pub(crate) async fn gauges(&self) -> (u64, u64) {
        let text = match self.client.get(self.url("/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => self.fail(&format!("GET /metrics: {e}")),
        };
        let gauge = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| self.fail(&format!("no {name} in /metrics:\n{text}")))
                as u64
        };
        (gauge("aurad_runs_running"), gauge("aurad_runs_queued"))
    }

    /// `/proc/PID/status` fields in KiB (`VmRSS`, `VmHWM`) or counts.
    pub(crate) fn proc_status(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{}/status", self.pid))
    }

    /// A field of `/proc/PID/smaps_rollup` in KiB.
    pub(crate) fn smaps(&self, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", self.pid)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    }

    /// Each thread's voluntary context switches (its wake-ups), by thread
    /// id: (name, count).
    pub(crate) fn wakeups(&self) -> std::collections::BTreeMap<String, (String, u64)> {
        let mut threads = std::collections::BTreeMap::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return threads;
        };
        for task in tasks.flatten() {
            let read =
                |file: &str| std::fs::read_to_string(task.path().join(file)).unwrap_or_default();
            let switches = read("status")
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            threads.insert(
                task.file_name().to_string_lossy().into_owned(),
                (read("comm").trim().to_string(), switches),
            );
        }
        threads
    }

    /// User + system CPU time the daemon used so far.
    pub(crate) fn cpu_time(&self) -> Duration {
        cpu_of(&format!("/proc/{}/stat", self.pid))
    }
}

/// utime + stime of a `/proc/.../stat` file.
pub(crate) fn cpu_of(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces) end with ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // state is field 3 of stat, i.e. index 0 here; utime 14, stime 15.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(ticks as f64 / hz)
}

/// CPU time of this (the benchmark's) process: the mock servers and the
/// HTTP client.
pub(crate) fn own_cpu_time() -> Duration {
    cpu_of("/proc/self/stat")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn agent_yaml(model: &str, prompt: &str, schedule: Option<&str>) -> String {
    let mut yaml = format!("model: {model}\nprompt: {prompt:?}\n");
    if let Some(cron) = schedule {
        let _ = writeln!(yaml, "schedule: \"{cron}\"");
    }
    yaml
}
