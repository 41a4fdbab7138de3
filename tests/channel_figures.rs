//! The channels' figures for BENCHMARKS.md, ignored in `cargo test` (they
//! measure, they do not check behaviour):
//!
//! - `message_in_to_answer_out`: a one-line turn through a channel, from
//!   the moment its platform's fake hands the update over to the moment the
//!   fake receives the answer's first piece, beside the same turn over the
//!   HTTP API (a session message with `Accept: text/event-stream`, to its
//!   first text chunk and to its `finished`). The daemon runs in this
//!   process; the model is the mock, answering at once.
//! - `idle_rss_with_channels`: the resident memory of an idle `aurad
//!   serve` (the binary) with no channel, then with channels connected
//!   to their fakes.
//!
//! `cargo test --release --test channel_figures -- --ignored --nocapture
//! --test-threads 1` (`AURAD_FIGURE_TURNS`, default 200).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a measurement: it reports on the console, and a panic is its failure report"
)]

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::channels::{WAIT, project_with_channel, start, wait_status};
use support::daemon::SseReader;
use support::fake_telegram::{FakeTelegram, TOKEN};
use support::mock_llm::{MockLlm, Reply};

const AGENT: &str = "model: mock/m\nprompt: You help.\n";

fn turns() -> usize {
    std::env::var("AURAD_FIGURE_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// p50 and p99 of `samples`, in milliseconds.
fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    (at(0.5), at(0.99))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md"]
async fn message_in_to_answer_out() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("pong".into()));
    let fake = FakeTelegram::start().await;
    let channel = format!(
        "agent: a\nallow: {{ anyone: true }}\ntelegram:\n  token: ${{TG_TOKEN}}\n  api_url: {}\n",
        fake.url()
    );
    let dir = project_with_channel(&mock, AGENT, "tg", &channel);
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;
    wait_status(&daemon, "tg", "connected", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;
    let client = daemon.client();
    let new_session = || async {
        let created: serde_json::Value = client
            .post(daemon.url("/v1/agents/a/sessions"))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        created["id"].as_str().unwrap().to_string()
    };
    let mut session = new_session().await;

    let n = turns();
    let (mut channel_first, mut http_first, mut http_end) = (Vec::new(), Vec::new(), Vec::new());
    // Alternated turn by turn so the machine's load falls on both alike;
    // the first five of each are warm-up.
    for i in 0..n + 5 {
        // Over the channel: a new chat each turn; over HTTP a session
        // started again every 20 turns, so neither history grows long.
        let sent_before = fake.calls("sendMessage").len();
        let chat = 10_000 + i as i64;
        let started = Instant::now();
        fake.push_message(chat, chat, "ping");
        fake.wait_calls("sendMessage", sent_before + 1, WAIT).await;
        let channel_took = started.elapsed();

        if i % 20 == 19 {
            session = new_session().await;
        }
        let started = Instant::now();
        let response = client
            .post(daemon.url(&format!("/v1/sessions/{session}/messages")))
            .header("accept", "text/event-stream")
            .json(&json!({"input": "ping"}))
            .send()
            .await
            .unwrap();
        let mut events = SseReader::new(response);
        let mut first = None;
        while let Some(event) = events.next(WAIT).await {
            if event.event == "text_delta" && first.is_none() {
                first = Some(started.elapsed());
            }
            if event.event == "finished" {
                break;
            }
        }
        let end = started.elapsed();
        if i >= 5 {
            channel_first.push(channel_took);
            http_first.push(first.unwrap_or(end));
            http_end.push(end);
        }
    }
    let (c50, c99) = percentiles(&mut channel_first);
    let (f50, f99) = percentiles(&mut http_first);
    let (e50, e99) = percentiles(&mut http_end);
    println!("turns: {n} each, alternated");
    println!("telegram: message in -> first answer piece out: p50 {c50:.2} ms, p99 {c99:.2} ms");
    println!("HTTP API: message -> first text chunk:          p50 {f50:.2} ms, p99 {f99:.2} ms");
    println!("HTTP API: message -> finished:                  p50 {e50:.2} ms, p99 {e99:.2} ms");
    daemon.stop().await.unwrap();
}
