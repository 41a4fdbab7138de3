//! `cargo bench --bench soak`: does `aurad serve` keep its memory flat over
//! many runs (issue #17)? The release binary runs as a child process
//! (`aurad --dir TMP serve`); 8 clients at a time start runs of an agent
//! whose model calls `bash` (`echo hi`) three times, each with `POST
//! /v1/agents/a/runs` and `Accept: text/event-stream` read to the end (so
//! the live-event path is used too). Every 1,000 runs the daemon's
//! `/proc/PID/status` is read: VmRSS, its anonymous (heap, stacks) and
//! file-backed (the binary's pages) parts, and VmHWM.
//!
//! `AURAD_SOAK_RUNS` sets the number of runs (default 10,000),
//! `AURAD_SOAK_CLIENTS` how many at a time (default 8). The goal: RSS at
//! the last sample within 10% of RSS at run 1,000.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

#[path = "../tests/support/mod.rs"]
mod support;

mod floor;
mod sizes;
use sizes::env_usize;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use support::mock_llm::{MockLlm, Reply};
use support::serve::{Serve, write_settings};

/// `/proc/PID/status` fields in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

struct Sample {
    runs: usize,
    seconds: f64,
    rss: u64,
    anon: u64,
    file: u64,
    hwm: u64,
}

fn sample(pid: i32, runs: usize, start: Instant) -> Sample {
    Sample {
        runs,
        seconds: start.elapsed().as_secs_f64(),
        rss: status_kib(pid, "VmRSS"),
        anon: status_kib(pid, "RssAnon"),
        file: status_kib(pid, "RssFile"),
        hwm: status_kib(pid, "VmHWM"),
    }
}

fn main() {
    let runs = env_usize("AURAD_SOAK_RUNS", 10_000);
    let clients = env_usize("AURAD_SOAK_CLIENTS", 8);
    let mock = MockLlm::start_in_thread();
    mock.set_responder(|request| {
        let done = floor::tool_results(&request.body);
        if done < 3 {
            Reply::tool_call(&format!("call_{done}"), "bash", r#"{"command":"echo hi"}"#)
        } else {
            Reply::Text("hi hi hi".into())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let addr = write_settings(dir.path(), &mock);
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: mock/m\nsystem: Be brief.\nprompt: Say hi three times.\ntools: [bash]\n",
    )
    .unwrap();
    let serve = Arc::new(Serve::start(dir.path(), addr, &[]));
    let pid = serve.pid();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!("http://{addr}/v1/agents/a/runs");
    let start = Instant::now();
    let mut samples = vec![sample(pid, 0, start)];
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let (client, url, serve) = (client.clone(), url.clone(), serve.clone());
                let (next, done, tx, mock) = (next.clone(), done.clone(), tx.clone(), mock.clone());
                tokio::spawn(async move {
                    while next.fetch_add(1, Ordering::Relaxed) < runs {
                        one_run(&client, &url, &serve).await;
                        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if finished % 1000 == 0 || finished == runs {
                            tx.send(sample(pid, finished, start)).unwrap();
                            mock.forget_requests();
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.await.unwrap();
        }
    });
    drop(tx);
    samples.extend(rx);
    samples.sort_by_key(|s| s.runs);
    println!(
        "{:>7} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "runs", "s", "VmRSS MiB", "anon", "file", "VmHWM"
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    for s in &samples {
        println!(
            "{:>7} {:>8.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            s.runs,
            s.seconds,
            mib(s.rss),
            mib(s.anon),
            mib(s.file),
            mib(s.hwm)
        );
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{runs} runs, {clients} at a time, in {wall:.1} s ({:.0} runs/s)",
        runs as f64 / wall
    );
    if let (Some(at_1000), Some(last)) = (samples.iter().find(|s| s.runs == 1000), samples.last())
        && last.runs > 1000
    {
        println!(
            "VmRSS run 1,000 -> run {}: {:.1} -> {:.1} MiB ({:+.1}%; goal within 10%)",
            last.runs,
            mib(at_1000.rss),
            mib(last.rss),
            (last.rss as f64 / at_1000.rss as f64 - 1.0) * 100.0
        );
    }
}

/// One run through the event stream; panics unless it ends with a
/// successful `finished`.
async fn one_run(client: &reqwest::Client, url: &str, serve: &Serve) {
    let response = client
        .post(url)
        .header("accept", "text/event-stream")
        .json(&serde_json::json!({"input": "hi"}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}\n{}", serve.log()));
    let body = response.text().await.unwrap();
    let last = body
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or("");
    assert!(
        last.starts_with("event: finished\n") && last.contains(r#""state":"succeeded""#),
        "the stream did not end with a successful `finished`: {body}\n{}",
        serve.log()
    );
}
