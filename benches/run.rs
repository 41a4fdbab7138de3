//! `cargo bench --bench run`: the figures of BENCHMARKS.md.
//!
//! (a) a whole `aurad run` process, start to exit, against a mock that answers
//!     instantly, with an agent whose model calls `bash` (`echo hi`) three
//!     times before answering;
//! (b) process start to the first request reaching the mock;
//! (c) the engine's own time per iteration, in process, with an in-memory
//!     provider and tool (so neither HTTP nor a process is counted);
//! (d) peak RSS of the `aurad run` process (getrusage of the children);
//! (e) the floor of (a): the same four streamed completions and three
//!     `bash -c 'echo hi'` processes from this process, with nothing of
//!     aurad's (`benches/floor/`), alternated with (a) run by run;
//! (f) the floor as a process, as a one-shot run is one: this executable
//!     started again to do (e)'s work and exit, timed from its spawn to its
//!     exit (so its start, the dynamic loader and its exit count, as they
//!     do in (a)); alternated too.
//!
//! `AURAD_BENCH_RUNS` sets the number of processes (default 50).

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

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use aurad::config::Limits;
use aurad::engine::{Parts, RunSpec};
use aurad::llm::retry::RetryPolicy;
use aurad::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use aurad::tools::{Tool, ToolContext, ToolError, ToolRegistry};
use aurad::types::{Message, ToolCall, ToolSpec};
use futures::future::BoxFuture;
use support::mock_llm::{MockLlm, Reply};
use tokio_util::sync::CancellationToken;

/// Set in (f)'s child: the mock's address; the child does the floor's
/// work and exits.
const FLOOR_CHILD: &str = "AURAD_BENCH_FLOOR_MOCK";

fn main() {
    if let Ok(mock) = std::env::var(FLOOR_CHILD) {
        floor::once(mock.parse().expect("the mock's address"), &floor::bodies());
        return;
    }
    let runs = env_usize("AURAD_BENCH_RUNS", 50);
    process_bench(runs);
    engine_bench();
}

#[allow(
    clippy::zombie_processes,
    reason = "children are reaped with `wait4` (for their rusage), which clippy cannot see"
)]
fn process_bench(runs: usize) {
    let exe = env!("CARGO_BIN_EXE_aurad");
    let mock = MockLlm::start_in_thread();
    let dir = support::project::project_with_mock(
        &mock,
        "model: mock/m\nsystem: Be brief.\nprompt: Say hi three times.\ntools: [bash]\n",
    );
    // Answers by the conversation: a `bash` call until three tool results
    // came back, then the text; the floor's requests get the same answers.
    mock.set_responder(|request| {
        let done = floor::tool_results(&request.body);
        if done < 3 {
            Reply::tool_call(&format!("call_{done}"), "bash", r#"{"command":"echo hi"}"#)
        } else {
            Reply::Text("hi hi hi".into())
        }
    });
    let bodies = floor::bodies();
    let mut whole = Vec::new();
    let mut first_request = Vec::new();
    let mut rss = Vec::new();
    let mut floors = Vec::new();
    let mut process_floors = Vec::new();
    let me = std::env::current_exe().unwrap();
    for i in 0..runs + 3 {
        let floor = floor::once(mock.addr(), &bodies);
        mock.forget_requests();
        let start = Instant::now();
        let status = Command::new(&me)
            .env(FLOOR_CHILD, mock.addr().to_string())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        let process_floor = start.elapsed();
        assert!(status.success(), "the floor's process failed");
        assert_eq!(mock.requests().len(), 4);
        mock.forget_requests();
        let start = Instant::now();
        let child = Command::new(exe)
            .args(["run", "a", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (code, rss_kb) = wait_with_rss(child.id());
        let elapsed = start.elapsed();
        assert_eq!(code, 0, "aurad run failed");
        let requests = mock.requests();
        assert_eq!(requests.len(), 4);
        if i >= 3 {
            // The first three runs warm the page cache and the database file.
            whole.push(elapsed.as_secs_f64() * 1000.0);
            rss.push(rss_kb as f64 / 1024.0);
            floors.push(floor.as_secs_f64() * 1000.0);
            process_floors.push(process_floor.as_secs_f64() * 1000.0);
            first_request
                .push(requests[0].received_at.duration_since(start).as_secs_f64() * 1000.0);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    };
    let ratio = median(&whole) / median(&floors);
    let process_ratio = median(&whole) / median(&process_floors);
    summary("(a) aurad run, start to exit", whole, "ms");
    summary(
        "(b) start to first request at the mock",
        first_request,
        "ms",
    );
    summary("(d) peak RSS of aurad run", rss, "MB");
    summary("(e) floor: 4 completions + 3 bash -c", floors, "ms");
    summary(
        "(f) floor as a process (start to exit)",
        process_floors,
        "ms",
    );
    println!("(a) / (e): {ratio:.2}x (goal: 1.6x)");
    println!("(a) / (f): {process_ratio:.2}x");
}

/// Waits for the child `pid`; returns its exit code and its own peak RSS
/// in KiB (`wait4`'s rusage covers that child alone).
fn wait_with_rss(pid: u32) -> (i32, i64) {
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 writes into the two locals we pass.
    let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid as libc::pid_t, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss)
}

/// A provider that answers at once: `tool_turns` turns of one tool call each,
/// then a text answer.
struct InstantProvider {
    tool_turns: usize,
}

impl Provider for InstantProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let done = request
                .messages
                .iter()
                .filter(|m| matches!(m, Message::Tool { .. }))
                .count();
            if done < self.tool_turns {
                Ok(ModelTurn {
                    tool_calls: vec![ToolCall {
                        id: format!("c{done}"),
                        name: "echo".into(),
                        arguments: r#"{"text":"hi"}"#.into(),
                    }],
                    ..ModelTurn::default()
                })
            } else {
                on_delta(Delta::Text("hi hi hi".into()));
                Ok(ModelTurn {
                    text: "hi hi hi".into(),
                    ..ModelTurn::default()
                })
            }
        })
    }
}

struct EchoTool(ToolSpec);

impl Tool for EchoTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move { Ok(args["text"].as_str().unwrap_or_default().to_string()) })
    }
}

fn engine_bench() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let echo = EchoTool(ToolSpec {
        name: "echo".into(),
        description: "Echo".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    });
    let registry = ToolRegistry::new(vec![Arc::new(echo)]);
    let tools = registry.select(&["echo".to_string()]);
    let provider = InstantProvider { tool_turns: 3 };
    let spec = RunSpec {
        run_id: "bench".into(),
        agent: "bench".into(),
        model: "mock/m".into(),
        model_name: "m".into(),
        trigger: aurad::types::Trigger::Cli,
        definition_hash: "h".into(),
        system: Some("Be brief.".into()),
        input: "Say hi three times.".into(),
        limits: Limits::default(),
        temperature: None,
        max_tokens: None,
        output_schema: None,
        price: None,
        root: std::env::temp_dir(),
        skills: None,
        memory: None,
        resume: None,
        history: None,
    };
    let runs = 5000;
    let mut per_iteration = Vec::new();
    runtime.block_on(async {
        for _ in 0..runs {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let parts = Parts {
                models: aurad::engine::Models::single(
                    &spec.model,
                    &spec.model_name,
                    &provider,
                    spec.price,
                ),
                tools: &tools,
                retry: RetryPolicy::default(),
                spending: None,
                redactor: &aurad::redact::Redactor::default(),
                sub_runs: None,
                approvals: None,
            };
            let start = Instant::now();
            let outcome = aurad::engine::run(&spec, parts, CancellationToken::new(), tx).await;
            while rx.try_recv().is_ok() {}
            let elapsed = start.elapsed();
            assert_eq!(outcome.iterations, 4);
            per_iteration.push(elapsed.as_secs_f64() * 1_000_000.0 / 4.0);
        }
    });
    summary("(c) engine time per iteration", per_iteration, "µs");
}
