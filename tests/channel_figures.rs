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
    use support::fake_discord::{FakeDiscord, message_create};
    use support::fake_slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("pong".into()));
    let telegram = FakeTelegram::start().await;
    let slack = FakeSlack::start().await;
    let discord = FakeDiscord::start("bot-token-1").await;
    let dir = project_with_channel(
        &mock,
        AGENT,
        "tg",
        &format!(
            "agent: a\nallow: {{ anyone: true }}\ntelegram:\n  token: ${{TG_TOKEN}}\n  api_url: {}\n",
            telegram.url()
        ),
    );
    std::fs::write(
        dir.path().join("channels/sl.yaml"),
        format!("agent: a\nallow: {{ anyone: true }}\nslack:\n  bot_token: ${{SLACK_BOT}}\n  app_token: ${{SLACK_APP}}\n  api_url: {}\n", slack.api_url),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("channels/dc.yaml"),
        format!("agent: a\nallow: {{ anyone: true }}\ndiscord:\n  token: ${{DC_TOKEN}}\n  api_url: {}\n", discord.api_url),
    )
    .unwrap();
    let daemon = start(
        dir.path(),
        &[
            ("TG_TOKEN", TOKEN),
            ("SLACK_BOT", BOT_TOKEN),
            ("SLACK_APP", APP_TOKEN),
            ("DC_TOKEN", "bot-token-1"),
        ],
    )
    .await;
    for name in ["tg", "sl", "dc"] {
        wait_status(&daemon, name, "connected", |s| {
            s["connection"]["state"] == "connected"
        })
        .await;
    }
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
    let mut took: [Vec<Duration>; 5] = Default::default();
    // Alternated turn by turn so the machine's load falls on all alike;
    // the first five rounds are warm-up. Each channel turn is in a new
    // chat, and the HTTP session starts again every 20 turns, so no
    // history grows long.
    for i in 0..n + 5 {
        let started = Instant::now();
        let before = telegram.calls("sendMessage").len();
        let chat = 10_000 + i as i64;
        telegram.push_message(chat, chat, "ping");
        telegram.wait_calls("sendMessage", before + 1, WAIT).await;
        let tg = started.elapsed();

        let started = Instant::now();
        let before = slack.calls("chat.postMessage").len();
        let ts = format!("1700000000.{i:06}");
        slack.push_event(
            &format!("Ev{i:08}"),
            json!({"type": "message", "channel_type": "im", "user": "U1", "channel": format!("D{i}"),
                   "text": "ping", "ts": ts, "event_ts": ts}),
        );
        slack.wait_calls("chat.postMessage", before + 1).await;
        let sl = started.elapsed();

        let started = Instant::now();
        let before = discord.state().messages.len();
        discord.dispatch(
            "MESSAGE_CREATE",
            message_create(
                &format!("{}", 700_000_000_000_000_000u64 + i as u64),
                &format!("{}", 400_000_000_000_000_000u64 + i as u64),
                None,
                "500000000000000042",
                "ping",
            ),
        );
        discord.wait_messages(before + 1).await;
        let dc = started.elapsed();

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
            for (k, d) in [tg, sl, dc, first.unwrap_or(end), end]
                .into_iter()
                .enumerate()
            {
                took[k].push(d);
            }
        }
    }
    println!("turns: {n} each, alternated");
    let names = [
        "telegram: update in -> first answer piece out",
        "slack:    event in -> first answer piece out",
        "discord:  message in -> first answer piece out",
        "HTTP API: message -> first text chunk",
        "HTTP API: message -> finished",
    ];
    for (name, samples) in names.iter().zip(took.iter_mut()) {
        let (p50, p99) = percentiles(samples);
        println!("{name:<48} p50 {p50:.2} ms, p99 {p99:.2} ms");
    }
    daemon.stop().await.unwrap();
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The median of a few readings a second apart, once the daemon is idle.
fn idle_rss(pid: i32) -> u64 {
    let mut readings: Vec<u64> = (0..5)
        .map(|_| {
            // A measurement's spacing, not a synchronisation.
            std::thread::sleep(Duration::from_secs(1));
            rss_kib(pid)
        })
        .collect();
    readings.sort_unstable();
    readings[2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md"]
async fn idle_rss_with_channels() {
    use support::fake_discord::FakeDiscord;
    use support::fake_slack::{APP_TOKEN, BOT_TOKEN, FakeSlack};
    use support::mail_server::{ALICE, BOT, MailServer, password};
    use support::serve::{Serve, http_get, poll, write_settings};

    let mock = MockLlm::start().await;
    let telegram = FakeTelegram::start().await;
    let slack = FakeSlack::start().await;
    let discord = FakeDiscord::start("bot-token-1").await;
    let mail = MailServer::start("channel-figures")
        .expect("the mail server (run as root with dovecot and exim installed)");
    let files = [
        (
            "tg",
            format!(
                "agent: a\nallow: {{ anyone: true }}\ntelegram:\n  token: ${{TG_TOKEN}}\n  api_url: {}\n",
                telegram.url()
            ),
        ),
        (
            "sl",
            format!(
                "agent: a\nallow: {{ anyone: true }}\nslack:\n  bot_token: ${{SLACK_BOT}}\n  app_token: ${{SLACK_APP}}\n  api_url: {}\n",
                slack.api_url
            ),
        ),
        (
            "dc",
            format!(
                "agent: a\nallow: {{ anyone: true }}\ndiscord:\n  token: ${{DC_TOKEN}}\n  api_url: {}\n",
                discord.api_url
            ),
        ),
        (
            "mail",
            format!(
                "agent: a\nallow: {{ users: [\"{ALICE}\"] }}\nemail:\n  address: {BOT}\n  imap:\n    host: 127.0.0.1\n    port: {}\n    tls: none\n    password: ${{MAIL_PASSWORD}}\n  smtp:\n    host: 127.0.0.1\n    port: {}\n    tls: none\n    password: ${{MAIL_PASSWORD}}\n",
                mail.imap_port, mail.smtp_port
            ),
        ),
    ];
    let mail_password = password(BOT);
    let env: Vec<(String, String)> = [
        ("TG_TOKEN", TOKEN),
        ("SLACK_BOT", BOT_TOKEN),
        ("SLACK_APP", APP_TOKEN),
        ("DC_TOKEN", "bot-token-1"),
        ("MAIL_PASSWORD", mail_password.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let files = std::sync::Arc::new(files);
    let measure = |with_channels: bool| {
        let files = files.clone();
        let dir = support::project::project_with_mock(&mock, AGENT);
        let addr = write_settings(dir.path(), &mock);
        if with_channels {
            std::fs::create_dir(dir.path().join("channels")).unwrap();
            for (name, text) in files.iter() {
                std::fs::write(dir.path().join(format!("channels/{name}.yaml")), text).unwrap();
            }
        }
        let env = env.clone();
        move || {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let serve = Serve::start_with_env(dir.path(), addr, &[], &env);
            if with_channels {
                poll(
                    "every channel connected",
                    || serve.log(),
                    || {
                        let (_, body) = http_get(addr, "/v1/status")?;
                        let status: serde_json::Value = serde_json::from_str(&body).ok()?;
                        let channels = status["channels"].as_array()?;
                        (channels.len() == 4
                            && channels
                                .iter()
                                .all(|c| c["connection"]["state"] == "connected"))
                        .then_some(())
                    },
                );
            }
            let rss = idle_rss(serve.pid());
            drop(serve);
            drop(dir);
            rss
        }
    };
    let without = tokio::task::spawn_blocking(measure(false)).await.unwrap();
    let with = tokio::task::spawn_blocking(measure(true)).await.unwrap();
    println!(
        "idle aurad serve, no channel:             {:.1} MB",
        without as f64 / 1024.0
    );
    println!(
        "idle aurad serve, 4 channels connected:   {:.1} MB",
        with as f64 / 1024.0
    );
    println!(
        "the channels' share:                       {:.1} MB",
        (with as f64 - without as f64) / 1024.0
    );
}
