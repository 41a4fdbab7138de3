//! `cargo bench --bench tools`: tool-call overhead through the registry
//! (validation included) for a `tools.d` plugin (a process per call) and for
//! an MCP stdio tool (a round trip to a running server), median and p99 over
//! 1,000 calls each; MCP start-up time for one server and for five started
//! concurrently. Uses `examples/mcp_test_server`: build it first with
//! `cargo build --release --example mcp_test_server`.
//! `AURAD_BENCH_CALLS` changes the number of calls.
//!
//! Like `aurad`'s `main`, the bench first drops the capabilities that read
//! other processes' memory (a no-op unless run as root), so its tools start
//! the way the daemon's do: with `posix_spawn`, no hook between fork and
//! exec.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

use std::path::PathBuf;

mod sizes;
#[path = "../tests/support/mod.rs"]
mod support;
use std::time::Instant;

use aurad::tools::{DEFAULT_OUTPUT_CAP, ToolContext, ToolRegistry};
use aurad::types::ToolCall;
use tokio_util::sync::CancellationToken;

fn main() {
    // Before any thread exists, so every thread is born without them.
    aurad::tools::sandbox::drop_memory_reading_caps();
    let calls = sizes::env_usize("AURAD_BENCH_CALLS", 1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        plugin_bench(calls).await;
        mcp_call_bench(calls).await;
        mcp_startup_bench().await;
    });
}

fn report(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<48} median {:>8.3} ms  p99 {:>8.3} ms  (n={})",
        at(0.5),
        at(0.99),
        ms.len()
    );
}

fn ctx(root: PathBuf) -> ToolContext {
    ToolContext {
        root,
        cancel: CancellationToken::new(),
        output_cap: DEFAULT_OUTPUT_CAP,
        sandbox: Default::default(),
    }
}

async fn time_calls(
    registry: &ToolRegistry,
    name: &str,
    args: &str,
    root: PathBuf,
    calls: usize,
) -> Vec<f64> {
    let set = registry.select(&[name.to_string()]);
    let ctx = ctx(root);
    let call = ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: args.into(),
    };
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls + 10 {
        let start = Instant::now();
        let outcome = set.execute(&call, &ctx).await;
        let elapsed = start.elapsed().as_secs_f64() * 1000.0;
        assert!(!outcome.is_error, "{}", outcome.output);
        if i >= 10 {
            out.push(elapsed);
        }
    }
    out
}

async fn plugin_bench(calls: usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools.d")).unwrap();
    std::fs::write(
        dir.path().join("tools.d/echo.yaml"),
        "description: Echo the arguments.\nparameters: { type: object, properties: { text: { type: string } }, required: [text] }\ncommand: [cat]\n",
    )
    .unwrap();
    let (plugins, diags) = aurad::config::plugins::load_plugins(dir.path(), &|_| None);
    assert!(diags.is_empty(), "{diags:?}");
    let mut registry = ToolRegistry::default();
    for p in plugins {
        registry
            .add(std::sync::Arc::new(aurad::tools::plugin::PluginTool::new(
                p,
                dir.path(),
            )))
            .unwrap();
    }
    let ms = time_calls(
        &registry,
        "echo",
        r#"{"text":"hi"}"#,
        dir.path().to_path_buf(),
        calls,
    )
    .await;
    report("plugin call (`cat`, a process per call)", ms);
}

/// `n` servers of a project in a temporary folder, which the caller keeps
/// while they run: it is their working directory (a stdio server runs in
/// the project root).
fn server_configs(n: usize) -> (tempfile::TempDir, Vec<aurad::config::mcp::McpServerConfig>) {
    let dir = tempfile::tempdir().unwrap();
    let servers: serde_json::Map<String, serde_json::Value> = (0..n)
        .map(|i| {
            (
                format!("s{i}"),
                serde_json::json!({"command": support::mcp_test_server()}),
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("mcp.json"),
        serde_json::json!({"mcpServers": servers}).to_string(),
    )
    .unwrap();
    let (configs, diags) = aurad::config::mcp::load_mcp(dir.path(), &|_| None);
    assert!(diags.is_empty(), "{diags:?}");
    (dir, configs)
}

async fn mcp_call_bench(calls: usize) {
    let (_project, configs) = server_configs(1);
    let manager = aurad::mcp::McpManager::start(configs).await;
    let mut registry = ToolRegistry::default();
    for tool in manager.tools() {
        registry.add(tool).unwrap();
    }
    let ms = time_calls(
        &registry,
        "s0_echo",
        r#"{"text":"hi"}"#,
        std::env::temp_dir(),
        calls,
    )
    .await;
    report("MCP stdio call (round trip to a running server)", ms);
    manager.shutdown().await;
}

async fn mcp_startup_bench() {
    for n in [1, 5] {
        let mut ms = Vec::new();
        for _ in 0..20 {
            let (_project, configs) = server_configs(n);
            let start = Instant::now();
            let manager = aurad::mcp::McpManager::start(configs).await;
            ms.push(start.elapsed().as_secs_f64() * 1000.0);
            let up = manager
                .status()
                .iter()
                .filter(|s| matches!(s.state, aurad::mcp::ServerState::Connected))
                .count();
            assert_eq!(up, n, "not every server connected");
            manager.shutdown().await;
        }
        report(&format!("MCP start-up, {n} server(s) concurrently"), ms);
    }
}
