//! Idle RSS and wake-ups (figure 2): 100 agents, 20 with a schedule
//! that cannot fire during the measurement.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use crate::Table;
use crate::process::{Daemon, Project, agent_yaml};

/// A month other than this one (and the next): a daily schedule limited to
/// it cannot fire during the benchmark.
pub(crate) fn quiet_month() -> u32 {
    use chrono::Datelike;
    (Utc::now().month() + 5) % 12 + 1
}

pub(crate) async fn idle_rss_bench(table: &mut Table) {
    let month = quiet_month();
    let cron = format!("0 9 * {month} *");
    let agents: Vec<(String, String)> = (0..100)
        .map(|i| {
            let schedule = (i % 5 == 0).then_some(cron.as_str());
            (
                format!("agent{i:03}"),
                agent_yaml(
                    "mock0/m",
                    &format!("Agent {i}: summarise the news."),
                    schedule,
                ),
            )
        })
        .collect();
    let project = Project::new(&[], "", &agents);
    let daemon = Daemon::start(&project).await;
    let health = daemon.get_json("/healthz").await;
    if health["agents"] != json!(100) {
        daemon.fail(&format!("expected 100 agents, /healthz says {health}"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss = daemon.proc_status("VmRSS");
    let hwm = daemon.proc_status("VmHWM");
    let threads = daemon.proc_status("Threads");
    let anon = daemon.smaps("Anonymous");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", daemon.pid))
        .map(|d| d.count())
        .unwrap_or(0);
    let anon_text = anon.map_or("?".to_string(), |a| format!("{:.1}", a as f64 / 1024.0));
    let file_text = anon.map_or("?".to_string(), |a| {
        format!("{:.1}", rss.saturating_sub(a) as f64 / 1024.0)
    });
    // Wake-ups while idle: a measurement window, nothing waited for.
    let before = daemon.wakeups();
    tokio::time::sleep(IDLE_WINDOW).await;
    let mut woken: Vec<(String, u64)> = daemon
        .wakeups()
        .into_iter()
        .filter_map(|(tid, (name, n))| Some((name, n - before.get(&tid)?.1)))
        .filter(|(_, n)| *n > 0)
        .collect();
    woken.sort_by_key(|w| std::cmp::Reverse(w.1));
    let per_second = |n: u64| n as f64 / IDLE_WINDOW.as_secs_f64();
    let total: u64 = woken.iter().map(|(_, n)| n).sum();
    let runs = daemon.get_json("/v1/runs?limit=10").await;
    let fired = runs["runs"].as_array().map_or(0, Vec::len);
    if fired > 0 {
        daemon.fail(&format!("{fired} run(s) started while idle: {runs}"));
    }
    table.row(
        "idle RSS: 100 agents, 20 scheduled, 2 s after /healthz",
        "20 MB",
        format!("**{:.1} MB** VmRSS", rss as f64 / 1024.0),
        format!(
            "VmHWM {:.1} MB; {anon_text} MB anonymous + {file_text} MB file-backed; {threads} threads, {fds} fds; schedule `{cron}`",
            hwm as f64 / 1024.0
        ),
    );
    let by_thread: Vec<String> = woken
        .iter()
        .map(|(name, n)| format!("{name} {:.1}", per_second(*n)))
        .collect();
    table.row(
        &format!(
            "idle wake-ups: the same daemon, {} s",
            IDLE_WINDOW.as_secs()
        ),
        "",
        format!("**{:.1} /s**", per_second(total)),
        format!("by thread: {}", by_thread.join(", ")),
    );
}

/// How long the idle daemon's wake-ups are counted.
pub(crate) const IDLE_WINDOW: Duration = Duration::from_secs(5);
