//! A small MCP server for aurad's tests (`tests/mcp.rs`), built with rmcp;
//! also the server of the example project's `mcp.json` (`demo`), built with
//! `cargo build --example mcp_test_server`.
//! Serves stdio by default, or streamable HTTP with `--http ADDR` (then the
//! first line on stdout is `listening on ADDR`). Logs go to stderr only.
//!
//! Tools: `echo {text}`, `add {a, b}`, `fail {message}` (an is_error
//! result), `sleep {seconds}`, `image` (a 1x1 PNG), `crash` (exits with
//! code 3 at once), `pid` (the server's process id), `hide {name}` (stops
//! offering tool `name` and sends `notifications/tools/list_changed`).
//!
//! Flags: `--http ADDR`, `--require-header "Name: value"` (HTTP: answer 401
//! without it), `--grandchild PIDFILE` (spawn `sleep 1000` and write its pid),
//! `--startup-delay SECS` (sleep before serving), `--exit CODE` (print a
//! message on stderr and exit before serving), `--hide-tools-file PATH`
//! (if PATH exists at startup, the tools it names, one a line, are not
//! offered: lets a test see a tool vanish across a restart).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example program for the tests: a panic is its failure report"
)]

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{
    ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt, schemars, tool,
    tool_handler,
};
use rmcp::{tool_router, transport::stdio};

/// A 1x1 PNG (70 bytes).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// Left operand.
    a: i64,
    /// Right operand.
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FailArgs {
    /// The error text.
    message: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SleepArgs {
    /// How long to sleep.
    seconds: f64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct HideArgs {
    /// The tool to stop offering.
    name: String,
}

#[derive(Clone)]
struct TestServer {
    tool_router: ToolRouter<Self>,
    /// Tools hidden at run time by `hide`.
    hidden: Arc<Mutex<HashSet<String>>>,
    /// Set by `hang_listing`: `tools/list` never answers.
    hang: Arc<std::sync::atomic::AtomicBool>,
}

#[tool_router]
impl TestServer {
    fn new(hidden: &[String]) -> Self {
        let mut tool_router = Self::tool_router();
        for name in hidden {
            tool_router.remove_route(name);
        }
        TestServer {
            tool_router,
            hidden: Arc::default(),
            hang: Arc::default(),
        }
    }

    #[tool(description = "Send the text back")]
    fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.text
    }

    #[tool(description = "Add two integers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        a.saturating_add(b).to_string()
    }

    #[tool(description = "Fail with the given message")]
    fn fail(&self, Parameters(args): Parameters<FailArgs>) -> Result<CallToolResult, McpError> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            args.message,
        )]))
    }

    #[tool(description = "Sleep, then answer")]
    async fn sleep(&self, Parameters(args): Parameters<SleepArgs>) -> String {
        let seconds = args.seconds.clamp(0.0, 3600.0);
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        format!("slept {seconds}s")
    }

    #[tool(description = "Return a small PNG image")]
    fn image(&self) -> Result<CallToolResult, McpError> {
        Ok(CallToolResult::success(vec![ContentBlock::image(
            PNG,
            "image/png",
        )]))
    }

    #[tool(description = "Exit the server process with code 3 at once")]
    fn crash(&self) -> String {
        eprintln!("mcp_test_server: crashing on request");
        std::process::exit(3)
    }

    #[tool(description = "The server's process id")]
    fn pid(&self) -> String {
        std::process::id().to_string()
    }

    #[tool(description = "Say the tool list changed, then never answer a listing again")]
    async fn hang_listing(&self, peer: Peer<RoleServer>) -> String {
        self.hang.store(true, std::sync::atomic::Ordering::SeqCst);
        match peer.notify_tool_list_changed().await {
            Ok(()) => "listing hangs".into(),
            Err(e) => format!("listing hangs, but the notification failed: {e}"),
        }
    }

    #[tool(description = "Stop offering a tool, and tell the client its tool list changed")]
    async fn hide(&self, Parameters(args): Parameters<HideArgs>, peer: Peer<RoleServer>) -> String {
        self.hidden
            .lock()
            .expect("hidden tools")
            .insert(args.name.clone());
        match peer.notify_tool_list_changed().await {
            Ok(()) => format!("hid {}", args.name),
            Err(e) => format!("hid {}, but the notification failed: {e}", args.name),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if self.hang.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let hidden = self.hidden.lock().expect("hidden tools").clone();
        let tools = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|t| !hidden.contains(t.name.as_ref()))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }
}

#[derive(Default)]
struct Options {
    http: Option<String>,
    require_header: Option<(String, String)>,
    grandchild: Option<String>,
    startup_delay: f64,
    exit: Option<i32>,
    hide_tools_file: Option<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--http" => options.http = Some(value()?),
            "--require-header" => {
                let v = value()?;
                let (name, val) = v
                    .split_once(':')
                    .ok_or("--require-header wants NAME: VALUE")?;
                options.require_header = Some((name.trim().to_string(), val.trim().to_string()));
            }
            "--grandchild" => options.grandchild = Some(value()?),
            "--startup-delay" => {
                options.startup_delay = value()?.parse().map_err(|e| format!("{e}"))?;
            }
            "--hide-tools-file" => options.hide_tools_file = Some(value()?),
            "--exit" => options.exit = Some(value()?.parse().map_err(|e| format!("{e}"))?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() {
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mcp_test_server: {e}");
            std::process::exit(2);
        }
    };
    if let Some(code) = options.exit {
        eprintln!("mcp_test_server: refusing to start: TEST_API_KEY is not set");
        std::process::exit(code);
    }
    // Keeps the grandchild handle alive; it is never waited for on purpose.
    let _grandchild = options.grandchild.as_ref().map(|pidfile| {
        let child = std::process::Command::new("sleep")
            .arg("1000")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sleep");
        std::fs::write(pidfile, child.id().to_string()).expect("write the pid file");
        child
    });
    if options.startup_delay > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(options.startup_delay)).await;
    }
    let hidden: Vec<String> = options
        .hide_tools_file
        .as_ref()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|text| text.lines().map(|l| l.trim().to_string()).collect())
        .unwrap_or_default();
    let result = match options.http.clone() {
        Some(addr) => serve_http(&addr, options.require_header, hidden).await,
        None => serve_stdio(hidden).await,
    };
    if let Err(e) = result {
        eprintln!("mcp_test_server: {e}");
        std::process::exit(1);
    }
}

async fn serve_stdio(hidden: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    eprintln!(
        "mcp_test_server: serving stdio (pid {})",
        std::process::id()
    );
    TestServer::new(&hidden)
        .serve(stdio())
        .await?
        .waiting()
        .await?;
    Ok(())
}

async fn serve_http(
    addr: &str,
    require: Option<(String, String)>,
    hidden: Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let service: StreamableHttpService<TestServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(TestServer::new(&hidden)),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let mut app = axum::Router::new().nest_service("/mcp", service);
    if let Some((name, value)) = require {
        app = app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let ok = req
                    .headers()
                    .get(name.as_str())
                    .is_some_and(|v| v.as_bytes() == value.as_bytes());
                async move {
                    if ok {
                        next.run(req).await
                    } else {
                        axum::response::IntoResponse::into_response((
                            axum::http::StatusCode::UNAUTHORIZED,
                            "missing or wrong test header",
                        ))
                    }
                }
            },
        ));
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {local}")?;
        out.flush()?;
    }
    eprintln!("mcp_test_server: serving http on {local}/mcp");
    axum::serve(listener, app).await?;
    Ok(())
}
