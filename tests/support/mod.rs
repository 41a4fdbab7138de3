//! Helpers shared by the integration tests (`mod support;` in each test
//! file). Each test crate compiles this separately and uses only a part.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test support: a panic or a line on the console is how a test reports"
)]
#![allow(dead_code, reason = "each test crate uses a part of the support")]

pub mod channels;
pub mod cluster;
pub mod daemon;
pub mod fake_discord;
pub mod fake_slack;
pub mod fake_telegram;
pub mod inproc;
pub mod mail_server;
pub mod mcp_agents;
pub mod mcp_server;
pub mod mock_llm;
pub mod postgres;
pub mod project;
pub mod serve;
pub mod test_model;

/// The MCP test server of `examples/mcp_test_server.rs`, next to the running
/// test or benchmark binary (`target/<profile>/examples/`). `cargo test`
/// builds it; `cargo bench` does not, hence the message.
pub fn mcp_test_server() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test");
    let profile_dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps/<test>");
    let server = profile_dir.join("examples").join("mcp_test_server");
    assert!(
        server.exists(),
        "{} is missing: build it with `cargo build --example mcp_test_server` (add --release for benchmarks)",
        server.display()
    );
    server
}

/// A tool context for calling tools directly: the temporary directory as
/// root, no cancellation, the default output cap, no sandbox.
pub fn tool_ctx() -> aurad::tools::ToolContext {
    aurad::tools::ToolContext {
        root: std::env::temp_dir(),
        cancel: tokio_util::sync::CancellationToken::new(),
        output_cap: aurad::tools::DEFAULT_OUTPUT_CAP,
        sandbox: Default::default(),
    }
}
