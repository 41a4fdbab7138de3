//! Prompt caching through the real binary against a mock Anthropic server:
//! the requests carry `cache_control` breakpoints unless the provider says
//! `prompt_caching: false`, and the cached tokens an answer reports are
//! stored with the run and billed at `cached_input_per_mtok`.
//!
//! The ignored `cached_share_of_a_20_turn_chat` is the figure of
//! BENCHMARKS.md ("Prompt caching"): a 20-turn `aurad chat` through a mock
//! whose cache is simulated from Anthropic's documented rules
//! (`prompt_cache/cache_sim.rs`), with caching on and off. Run it with
//! `cargo test --test prompt_cache -- --ignored --nocapture`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a test: a panic is its failure report, and the figure is printed"
)]

mod support;

#[path = "prompt_cache/cache_sim.rs"]
mod cache_sim;

use std::io::Write;
use std::process::Stdio;

use aurad::store::{RunFilter, RunRecord, Store};
use aurad::types::RunState;
use cache_sim::{CacheSim, Totals};
use serde_json::{Value, json};
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::serve::{aurad, run, show, text};

/// A project whose agent `a` talks to the mock through an Anthropic
/// provider `mock`, with `extra` (YAML) on the provider.
fn project(mock: &MockLlm, extra: &str, agent: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  mock: {{ kind: anthropic, base_url: \"{}\"{extra} }}\n\
             prices:\n  \"mock/claude\": {{ input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3 }}\n",
            mock.root_url()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/a.yaml"), agent).unwrap();
    dir
}

/// Every run of the project, newest first.
fn runs(root: &std::path::Path) -> Vec<RunRecord> {
    let store = Store::open(&root.join("aurad.db")).unwrap();
    store
        .list_runs_blocking(&RunFilter {
            parent: None,
            agent: None,
            state: None,
            limit: 1000,
        })
        .unwrap()
}

/// An answer reporting `read` tokens read from the cache, `uncached` not,
/// and `output` out.
fn cached_answer(uncached: u64, read: u64, output: u64) -> Reply {
    Reply::Chunks(vec![
        json!({ "type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": uncached, "cache_read_input_tokens": read,
                       "cache_creation_input_tokens": 0, "output_tokens": 1 },
        } }),
        json!({ "type": "content_block_start", "index": 0,
                "content_block": { "type": "text", "text": "" } }),
        json!({ "type": "content_block_delta", "index": 0,
                "delta": { "type": "text_delta", "text": "Cached answer." } }),
        json!({ "type": "content_block_stop", "index": 0 }),
        json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" },
                "usage": { "output_tokens": output } }),
        json!({ "type": "message_stop" }),
    ])
}

fn marks(request: &Recorded) -> usize {
    request.body.to_string().matches("cache_control").count()
}

#[test]
fn cached_tokens_are_stored_and_billed_at_the_cached_price() {
    let mock = MockLlm::start_in_thread();
    mock.push(cached_answer(100, 900, 50));
    let dir = project(&mock, "", "model: mock/claude\nsystem: You help.\n");
    let out = run(dir.path(), &["run", "a", "--input", "hi"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(text(&out.stdout), "Cached answer.\n");

    // On by default: the system prompt and the conversation are marked.
    let request = &mock.requests()[0];
    assert_eq!(
        request.body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(marks(request), 2, "{}", request.body);

    let run = &runs(dir.path())[0];
    assert_eq!(run.state, RunState::Succeeded);
    assert_eq!(run.usage.input_tokens, Some(1000));
    assert_eq!(run.usage.cached_input_tokens, Some(900));
    assert_eq!(run.usage.output_tokens, Some(50));
    // 100 at $3, 900 at $0.30, 50 out at $15, per million.
    let want = (100.0 * 3.0 + 900.0 * 0.3 + 50.0 * 15.0) / 1e6;
    let cost = run.cost_usd.unwrap();
    assert!((cost - want).abs() < 1e-12, "{cost} != {want}");
}

#[test]
fn prompt_caching_false_sends_no_breakpoints() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("plain".into()));
    let dir = project(
        &mock,
        ", prompt_caching: false",
        "model: mock/claude\nsystem: You help.\ntools: [calculator]\n",
    );
    let out = run(dir.path(), &["run", "a", "--input", "hi"]);
    assert!(out.status.success(), "{}", show(&out));
    let request = &mock.requests()[0];
    assert_eq!(marks(request), 0, "{}", request.body);
    assert_eq!(request.body["system"], Value::String("You help.".into()));
}

/// A system prompt of about 1,600 tokens (chars / 4): an agent's
/// instructions as they tend to grow.
fn long_system_prompt() -> String {
    let rule = "Answer the question asked, cite the file and line you rely on, say plainly \
                when you do not know, and keep every answer under two hundred words. ";
    format!(
        "You are the support agent of a small software team. {}",
        rule.repeat(40)
    )
}

/// A 20-turn piped `aurad chat` against the simulated cache; returns what
/// the simulated API billed and the runs stored.
fn chat_twenty_turns(caching: bool) -> (Totals, Vec<RunRecord>) {
    let mock = MockLlm::start_in_thread();
    let sim = CacheSim::default();
    let responder = sim.clone();
    mock.set_responder(move |request| {
        let turn = request.messages().len().div_ceil(2);
        let answer = format!(
            "Turn {turn}: the retry policy backs off exponentially with full jitter, capped at \
             thirty seconds, and honours Retry-After when it fits in the run's time left. The \
             relevant code is in src/llm/retry.rs, and the tests in tests/provider_faults.rs \
             show each case against a mock server."
        );
        responder.answer(request, &answer)
    });
    let extra = if caching {
        ""
    } else {
        ", prompt_caching: false"
    };
    let agent = format!(
        "model: mock/claude\ntools: [calculator, read_file]\nsystem: |\n  {}\n",
        long_system_prompt()
    );
    let dir = project(&mock, extra, &agent);
    let input: String = (1..=20)
        .map(|i| format!("Question {i}: how does the daemon retry a model call that failed, and where is that written?\n"))
        .collect();
    let mut child = aurad(dir.path())
        .args(["chat", "a"])
        .env("XDG_STATE_HOME", dir.path().join(".state"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    (sim.totals(), runs(dir.path()))
}

#[test]
#[ignore = "a figure for BENCHMARKS.md: cargo test --test prompt_cache -- --ignored --nocapture"]
fn cached_share_of_a_20_turn_chat() {
    for caching in [true, false] {
        let (totals, runs) = chat_twenty_turns(caching);
        assert_eq!(totals.requests, 20);
        assert_eq!(runs.len(), 20);
        // What the store holds is what the API reported.
        let stored_input: u64 = runs.iter().filter_map(|r| r.usage.input_tokens).sum();
        let stored_cached: u64 = runs
            .iter()
            .filter_map(|r| r.usage.cached_input_tokens)
            .sum();
        assert_eq!(
            (stored_input, stored_cached),
            (totals.input, totals.cache_read)
        );
        let cost: f64 = runs.iter().filter_map(|r| r.cost_usd).sum();
        println!(
            "prompt_caching: {caching:5}  requests {}  input tokens {}  read from cache {}  \
             written to cache {}  cached share {:.1}%  cost ${cost:.4}",
            totals.requests,
            totals.input,
            totals.cache_read,
            totals.cache_write,
            100.0 * totals.cached_share()
        );
        if caching {
            assert!(totals.cached_share() > 0.5, "{totals:?}");
        } else {
            assert_eq!(totals.cache_read, 0, "{totals:?}");
        }
    }
}
