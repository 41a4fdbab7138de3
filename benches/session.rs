//! `cargo bench --bench session`: what a conversation costs (issue #33).
//!
//! Part `turn` (in process, like `tests/sessions.rs`): a turn at message
//! 100 of a session against the same agent's plain run, both through the
//! run door (`Job::prepare` + `execute`) with the built-in `test` model
//! (offline, answers at once, no tools), alternated run by run (which goes
//! first alternating too) so the machine's load falls on both alike. Each
//! timed turn has a session of its own holding 100 stored messages (45
//! turns: 40 of a user message and an answer, 5 where the assistant calls
//! `bash` and answers after the result; every text 200-600 characters),
//! written beforehand with `Store::append_turn`, so every turn is the 101st
//! message. The turn's time includes `turn_request` (the session's
//! checks). Printed: plain run, turn, and the paired difference (turn -
//! plain of the same round), median and p95; then the parts timed alone on
//! the same sessions: `store.session` (turn_request's look-up),
//! `take_session_turn`, `session_history` (read and parse 100 messages),
//! trimming the 102-message context (`context::trim_keeping`, under the
//! default 32,000-token budget: nothing dropped; and under 2,000: most
//! dropped), and `append_turn` of a turn's 2 messages (its own commit: an
//! upper bound of what `finish_turn` adds to `finish_run_as`, which does
//! it in the run's end transaction). Agent `a` keeps the default budget,
//! agent `t` has `limits.max_context_tokens: 2000`, so its turns trim.
//! On SQLite, then on PostgreSQL when a server answers at
//! `AURAD_TEST_POSTGRES` (as the tests; default
//! `postgres://postgres@127.0.0.1:5432/postgres`; a database
//! `aurad_it_*` is created there and dropped).
//!
//! Part `rss`: the release `aurad serve` (child process) on a project
//! whose agent uses the `test` model: VmRSS / VmHWM / anonymous RSS
//! (`/proc/PID/status`, `smaps_rollup`) 2 s after `/healthz` with no
//! session, after one session of 3 turns (the session code paths paged
//! in), then after 1,000 sessions created with `POST
//! /v1/agents/a/sessions`, each sent 3 messages with `POST
//! /v1/sessions/{id}/messages` (`Accept: text/event-stream`, read to the
//! stream's end: the turn has ended), then idle 5 s. A control daemon
//! does the same number of plain runs (`POST /v1/agents/a/runs`, streamed)
//! instead, so what sessions add is told from what any 3,000 runs leave.
//!
//! `AURAD_BENCH_PART=turn|rss` runs one part (default both);
//! `AURAD_BENCH_RUNS` sets the timed rounds of `turn` (default 200, after
//! 10 warm-up rounds); `AURAD_BENCH_SESSIONS` the sessions of `rss`
//! (default 1,000). Build and run as the daemon figures are:
//! `cargo build --release --bin aurad --bench session &&
//! target/release/deps/session-*`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

#[path = "../tests/support/mod.rs"]
mod support;

mod sizes;
mod stats;
use sizes::env_usize;
use stats::percentile;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aurad::engine::context::trim_keeping;
use aurad::registry::Snapshot;
use aurad::run::{Env, Job, RunRequest, execute, new_session, turn_request};
use aurad::store::{SessionTurn, Store};
use aurad::types::{Message, RunState, ToolCall, Trigger, Usage};
use tokio_util::sync::CancellationToken;

const WARMUP: usize = 10;
/// Turns stored before the timed one: 40 plain, 5 with a tool call.
const STORED_TURNS: usize = 45;
const STORED_MESSAGES: u64 = 100;

fn main() {
    let part = std::env::var("AURAD_BENCH_PART").unwrap_or_default();
    if part.is_empty() || part == "turn" {
        turn_part();
    }
    if part.is_empty() || part == "rss" {
        rss_part();
    }
}

// ---------------------------------------------------------------- turn

fn turn_part() {
    let rounds = env_usize("AURAD_BENCH_RUNS", 200);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: test\nsystem: Be brief.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agents/t.yaml"),
        "model: test\nsystem: Be brief.\nlimits: { max_context_tokens: 2000 }\n",
    )
    .unwrap();
    let snapshot = snapshot(dir.path());

    println!("## SQLite (a file in a temporary directory)");
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    runtime.block_on(turn_bench(&snapshot, &store, rounds));
    drop(store);

    // The support code creates the database on the server this names.
    let admin = std::env::var("AURAD_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    match support::postgres::TestDatabase::create("session bench") {
        Some(db) => {
            println!("\n## PostgreSQL ({admin}, a database of its own)");
            let database =
                aurad::types::Database::Postgres(aurad::types::DatabaseUrl::new(&db.url));
            let store = Store::connect(&database).unwrap();
            runtime.block_on(turn_bench(&snapshot, &store, rounds));
            drop(store);
            drop(db);
        }
        None => println!("\nno PostgreSQL at {admin}: its figures are left out"),
    }
}

fn snapshot(root: &Path) -> Arc<Snapshot> {
    let loaded = aurad::config::load(root, &|_| None);
    let (snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    Arc::new(snapshot)
}

async fn turn_bench(snapshot: &Arc<Snapshot>, store: &Store, rounds: usize) {
    for agent in ["a", "t"] {
        let budget = if agent == "a" { 32_000 } else { 2_000 };
        println!(
            "\n### agent `{agent}` (limits.max_context_tokens {budget}), {rounds} rounds after {WARMUP}"
        );
        let mut text = Text::new(if agent == "a" { 1 } else { 2 });
        let started = Instant::now();
        let mut sessions = Vec::new();
        for _ in 0..rounds + WARMUP {
            let session = new_session(store, snapshot, agent).await.unwrap();
            for turn in 0..STORED_TURNS {
                let messages = text.turn(turn);
                store
                    .append_turn(
                        &session.id,
                        SessionTurn {
                            run_id: aurad::store::new_run_id(),
                            messages,
                            usage: Usage::default(),
                            cost_usd: None,
                            summary: None,
                        },
                        chrono::Utc::now(),
                    )
                    .await
                    .unwrap();
            }
            let stored = store.session(&session.id).await.unwrap().unwrap();
            assert_eq!(stored.messages, STORED_MESSAGES);
            sessions.push(session.id);
        }
        println!(
            "({} sessions of {STORED_MESSAGES} messages written in {:.1} s)",
            sessions.len(),
            started.elapsed().as_secs_f64()
        );

        // The parts alone, read-only first (the sessions stay at 100).
        let (mut looks, mut histories, mut trims, mut takes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut dropped = 0;
        for (i, id) in sessions.iter().enumerate() {
            let start = Instant::now();
            let found = store.session(id).await.unwrap();
            let look = start.elapsed();
            assert!(found.is_some());
            let start = Instant::now();
            let history = store.session_history(id).await.unwrap();
            let read = start.elapsed();
            assert_eq!(history.messages.len(), 100);
            // The context as the engine builds it: system, history, the
            // turn's message.
            let start = Instant::now();
            let mut context = vec![Message::system("Be brief.")];
            context.extend(history.messages.into_iter().map(|m| m.message));
            let turn_start = context.len();
            context.push(Message::user(text.sized(400)));
            let trimmed = trim_keeping(&context, budget, turn_start);
            let trim = start.elapsed();
            dropped = trimmed.dropped;
            if i >= WARMUP {
                looks.push(ms(look));
                histories.push(ms(read));
                trims.push(ms(trim));
            }
        }
        // take_session_turn with a run id no run has: the turn is free for
        // the timed turn after it (a holder that is no open run holds
        // nothing).
        for (i, id) in sessions.iter().enumerate() {
            let run = aurad::store::new_run_id();
            let start = Instant::now();
            assert!(store.take_session_turn(id, &run).await.unwrap());
            if i >= WARMUP {
                takes.push(ms(start.elapsed()));
            }
        }

        // The timed rounds: plain run and turn, alternated.
        let env: Env = Arc::new(|_: &str| None);
        let (mut plains, mut turns, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
        for (i, id) in sessions.iter().enumerate() {
            let input = text.sized(400);
            let (plain, turn) = if i % 2 == 0 {
                let p = plain_run(snapshot, store, &env, agent, &input).await;
                let t = session_turn(snapshot, store, &env, id, &input).await;
                (p, t)
            } else {
                let t = session_turn(snapshot, store, &env, id, &input).await;
                let p = plain_run(snapshot, store, &env, agent, &input).await;
                (p, t)
            };
            if i >= WARMUP {
                plains.push(ms(plain));
                turns.push(ms(turn));
                diffs.push(ms(turn) - ms(plain));
            }
        }
        let after = store.session(&sessions[0]).await.unwrap().unwrap();
        assert_eq!(after.messages, STORED_MESSAGES + 2, "a turn adds 2");

        // append_turn of 2 messages, on the same sessions (now at 102).
        let mut appends = Vec::new();
        for (i, id) in sessions.iter().enumerate() {
            let messages = vec![
                Message::user(text.sized(400)),
                Message::assistant(text.sized(400), Vec::new()),
            ];
            let start = Instant::now();
            store
                .append_turn(
                    id,
                    SessionTurn {
                        run_id: aurad::store::new_run_id(),
                        messages,
                        usage: Usage::default(),
                        cost_usd: None,
                        summary: None,
                    },
                    chrono::Utc::now(),
                )
                .await
                .unwrap();
            if i >= WARMUP {
                appends.push(ms(start.elapsed()));
            }
        }

        line("plain run (same agent, no session)", plains);
        line("turn at message 100 (turn_request + run)", turns);
        line("difference, turn - plain, same round", diffs);
        println!("parts timed alone:");
        line("  store.session (turn_request's look-up)", looks);
        line("  take_session_turn", takes);
        line("  session_history (100 messages read)", histories);
        line(
            &format!("  context built + trim_keeping ({dropped} dropped)"),
            trims,
        );
        line("  append_turn, 2 messages, own commit", appends);
    }
}

async fn plain_run(
    snapshot: &Arc<Snapshot>,
    store: &Store,
    env: &Env,
    agent: &str,
    input: &str,
) -> Duration {
    let start = Instant::now();
    let request = RunRequest {
        input: Some(input.to_string()),
        ..RunRequest::new(agent, Trigger::Cli)
    };
    let job = Job::prepare(snapshot, request, env).unwrap();
    let outcome = execute(job, store, CancellationToken::new(), |_| {})
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    elapsed
}

async fn session_turn(
    snapshot: &Arc<Snapshot>,
    store: &Store,
    env: &Env,
    session: &str,
    input: &str,
) -> Duration {
    let start = Instant::now();
    let request = turn_request(store, snapshot, session, input.to_string(), Trigger::Cli)
        .await
        .unwrap();
    let job = Job::prepare(snapshot, request, env).unwrap();
    let outcome = execute(job, store, CancellationToken::new(), |_| {})
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    elapsed
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One line: median and p95 (and min, max) in ms.
fn line(name: &str, mut values: Vec<f64>) {
    values.sort_by(f64::total_cmp);
    println!(
        "{name:<48} median {:>7.3} ms  p95 {:>7.3} ms  min {:>7.3} ms  max {:>7.3} ms  (n={})",
        percentile(&values, 0.5),
        percentile(&values, 0.95),
        values.first().copied().unwrap_or(f64::NAN),
        values.last().copied().unwrap_or(f64::NAN),
        values.len()
    );
}

/// Texts of realistic sizes, the same for a seed on every run.
struct Text(u64);

const WORDS: &[&str] = &[
    "the",
    "report",
    "for",
    "last",
    "week",
    "shows",
    "that",
    "orders",
    "from",
    "new",
    "customers",
    "rose",
    "while",
    "returns",
    "fell",
    "please",
    "check",
    "whether",
    "invoice",
    "numbers",
    "match",
    "and",
    "summarise",
    "what",
    "changed",
    "in",
    "deployment",
    "config",
    "file",
    "server",
    "logs",
    "error",
    "rate",
    "was",
    "about",
    "two",
    "percent",
    "before",
    "release",
    "after",
    "migration",
    "database",
    "query",
    "slow",
    "index",
    "missing",
    "on",
    "table",
    "users",
    "email",
    "column",
];

impl Text {
    fn new(seed: u64) -> Text {
        Text(seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1))
    }

    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// About `len` characters of words.
    fn sized(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len + 12);
        while s.len() < len {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(WORDS[self.next() as usize % WORDS.len()]);
        }
        s
    }

    /// 200-600 characters.
    fn any(&mut self) -> String {
        let len = 200 + self.next() as usize % 401;
        self.sized(len)
    }

    /// The messages of stored turn `n`: every ninth (from the fifth) calls
    /// `bash` and answers after its result (4 messages), the others are a
    /// user message and an answer (2).
    fn turn(&mut self, n: usize) -> Vec<Message> {
        let user = Message::user(self.any());
        if n % 9 != 4 {
            return vec![user, Message::assistant(self.any(), Vec::new())];
        }
        let id = format!("call_{n}");
        let command = format!("grep -rn '{}' logs/ | tail -20", self.sized(20));
        vec![
            user,
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    name: "bash".into(),
                    arguments: serde_json::json!({ "command": command }).to_string(),
                }],
                provider_items: None,
            },
            Message::Tool {
                tool_call_id: id,
                name: "bash".into(),
                content: self.any(),
                is_error: false,
            },
            Message::assistant(self.any(), Vec::new()),
        ]
    }
}

// ----------------------------------------------------------------- rss

fn rss_part() {
    let count = env_usize("AURAD_BENCH_SESSIONS", 1_000);
    println!("\n## `aurad serve` RSS, {count} sessions of 3 turns (agent on the `test` model)");
    let mut text = Text::new(3);
    for sessions in [true, false] {
        let (dir, addr) =
            support::test_model::project(&[("a", "model: test\nsystem: Be brief.\n")]);
        let serve = support::serve::Serve::start(dir.path(), addr, &[]);
        let pid = serve.pid();
        std::thread::sleep(Duration::from_secs(2));
        let label = if sessions {
            "sessions"
        } else {
            "control: plain runs"
        };
        println!("\n### {label}");
        mem_line("no session, 2 s after /healthz", pid);
        let started = Instant::now();
        let one = |text: &mut Text| {
            if sessions {
                let id = create_session(addr, &serve);
                for _ in 0..3 {
                    send_streamed(addr, &format!("/v1/sessions/{id}/messages"), text, &serve);
                }
            } else {
                for _ in 0..3 {
                    send_streamed(addr, "/v1/agents/a/runs", text, &serve);
                }
            }
        };
        one(&mut text);
        std::thread::sleep(Duration::from_secs(2));
        mem_line(
            if sessions {
                "1 session, 3 turns, 2 s idle"
            } else {
                "3 runs, 2 s idle"
            },
            pid,
        );
        for _ in 1..count {
            one(&mut text);
        }
        let took = started.elapsed();
        mem_line(
            &if sessions {
                format!("{count} sessions, 3 turns each, just ended")
            } else {
                format!("{} runs, just ended", 3 * count)
            },
            pid,
        );
        std::thread::sleep(Duration::from_secs(5));
        mem_line("the same, 5 s idle", pid);
        if sessions {
            let (status, body) = support::serve::http_get(addr, "/v1/sessions?limit=1").unwrap();
            assert_eq!(status, 200, "{body}");
            let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
            let last = &listed["sessions"][0];
            assert_eq!(last["turns"], 3, "{last}");
            assert_eq!(last["messages"], 6, "{last}");
        }
        println!(
            "({} turns in {:.1} s, one at a time)",
            3 * count,
            took.as_secs_f64()
        );
        drop(serve);
        drop(dir);
    }
}

fn create_session(addr: std::net::SocketAddr, serve: &support::serve::Serve) -> String {
    let (status, body) = support::serve::http_post_json(addr, "/v1/agents/a/sessions", "{}")
        .unwrap_or_else(|| panic!("no answer\n{}", serve.log()));
    assert_eq!(status, 201, "{body}\n{}", serve.log());
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    value["id"].as_str().unwrap().to_string()
}

/// POSTs a 200-600-character input to `path` with `Accept:
/// text/event-stream` and reads the stream to its end (the run ended);
/// panics unless its last event is a successful `finished`.
fn send_streamed(
    addr: std::net::SocketAddr,
    path: &str,
    text: &mut Text,
    serve: &support::serve::Serve,
) {
    let body = serde_json::json!({ "input": text.any() }).to_string();
    let (status, answer) = support::serve::http_post(
        addr,
        path,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "text/event-stream"),
        ],
        &body,
    )
    .unwrap_or_else(|| panic!("no answer to POST {path}\n{}", serve.log()));
    assert_eq!(status, 200, "{answer}\n{}", serve.log());
    assert!(
        answer.contains("event: finished") && answer.contains(r#""state":"succeeded""#),
        "POST {path}: the stream did not end with a successful run: {answer}\n{}",
        serve.log()
    );
}

/// Prints VmRSS, VmHWM and the anonymous part of RSS of `pid`, in MiB.
fn mem_line(what: &str, pid: i32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let anon = rollup
        .lines()
        .find_map(|l| l.strip_prefix("Anonymous:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    let rss = field("VmRSS");
    println!(
        "{what:<44} VmRSS {:>6.2} MiB  VmHWM {:>6.2} MiB  anonymous {:>6.2} MiB  file-backed {:>6.2} MiB",
        rss / 1024.0,
        field("VmHWM") / 1024.0,
        anon / 1024.0,
        (rss - anon) / 1024.0
    );
}
