//! The MCP test server of `examples/mcp_test_server.rs` serving streamable
//! HTTP on loopback, as a child process killed when dropped.

use std::time::Duration;

use tokio::io::AsyncBufReadExt;

/// The test server in HTTP mode.
pub struct HttpServer {
    child: tokio::process::Child,
    pub addr: String,
}

impl HttpServer {
    /// Starts it on `addr` (`127.0.0.1:0` for any port); `required` is a
    /// `Name: value` header it answers 401 without.
    pub async fn start(addr: &str, required: &str) -> HttpServer {
        let mut child = tokio::process::Command::new(super::mcp_test_server())
            .args(["--http", addr, "--require-header", required])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the HTTP test server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(stdout);
        tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line))
            .await
            .expect("the server prints its address")
            .expect("read the address");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        HttpServer { child, addr }
    }

    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill the HTTP server");
    }
}
