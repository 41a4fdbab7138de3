//! `cargo bench --bench warm`: the warm path through `aurad serve` (issue
//! #17), against its floor, measured in the same process and alternated
//! run by run so the machine's load falls on all three alike:
//!
//! - floor: what a 3-tool-round run needs without aurad, from a client
//!   already running (`benches/floor/`): four streamed completions from the
//!   mock and three `bash -c 'echo hi'` processes;
//! - stream: `POST /v1/agents/a/runs` with `Accept: text/event-stream`, read
//!   to the end of the stream (what curl and SSE libraries wait for);
//! - polled: the same POST answered 202, then `GET /v1/runs/{id}` every
//!   millisecond until the run is final.
//!
//! The daemon is the release binary as a child process (`aurad --dir TMP
//! serve`), its agent's model calls `bash` (`echo hi`) three times, then
//! answers. `AURAD_BENCH_RUNS` sets the number of measured rounds (default
//! 100, after 5 warm-up rounds).

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
mod stats;
use sizes::env_usize;
use stats::{percentile, summary};

use std::time::{Duration, Instant};

use serde_json::Value;
use support::mock_llm::{MockLlm, Reply};
use support::serve::{Serve, write_settings};

fn main() {
    let rounds = env_usize("AURAD_BENCH_RUNS", 100);
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
    let serve = Serve::start(dir.path(), addr, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/agents/a/runs");
    let bodies = floor::bodies();

    let (mut floors, mut streams, mut polls) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds + 5 {
        let floor = floor::once(mock.addr(), &bodies);
        let stream = runtime.block_on(stream_run(&client, &url, &serve));
        let polled = runtime.block_on(polled_run(&client, &url, addr, &serve));
        if i >= 5 {
            floors.push(ms(floor));
            streams.push(ms(stream));
            polls.push(ms(polled));
        }
        mock.forget_requests();
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    };
    let (f, s, p) = (median(&floors), median(&streams), median(&polls));
    summary("floor: 4 completions + 3 bash -c", floors, "ms");
    summary("POST, event stream read to its end", streams, "ms");
    summary("POST 202, GET polled until final", polls, "ms");
    println!(
        "stream / floor {:.2}x (aurad's share {:.2} ms); polled / floor {:.2}x (aurad's share {:.2} ms)",
        s / f,
        s - f,
        p / f,
        p - f
    );
    drop(serve);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// POST with `Accept: text/event-stream`, read to the end; panics unless
/// the last event is a `finished` that succeeded.
async fn stream_run(client: &reqwest::Client, url: &str, serve: &Serve) -> Duration {
    let start = Instant::now();
    let response = client
        .post(url)
        .header("accept", "text/event-stream")
        .json(&serde_json::json!({"input": "hi"}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}\n{}", serve.log()));
    let body = response.text().await.unwrap();
    let elapsed = start.elapsed();
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
    elapsed
}

/// POST (202), then `GET /v1/runs/{id}` every millisecond until final.
async fn polled_run(
    client: &reqwest::Client,
    url: &str,
    addr: std::net::SocketAddr,
    serve: &Serve,
) -> Duration {
    let start = Instant::now();
    let response = client
        .post(url)
        .json(&serde_json::json!({"input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", serve.log());
    let run: Value = response.json().await.unwrap();
    let run_url = format!("http://{addr}/v1/runs/{}", run["id"].as_str().unwrap());
    let deadline = start + support::serve::DEADLINE;
    loop {
        let run: Value = client
            .get(&run_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if run["finished_at"].is_string() {
            assert_eq!(run["state"], "succeeded", "{run}\n{}", serve.log());
            return start.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "run not final: {run}\n{}",
            serve.log()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
