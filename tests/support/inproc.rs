//! `aurad serve` inside the test process: started on a project directory
//! with a chosen clock and environment, its API on a free loopback port,
//! stopped by a oneshot. Plus polling with a deadline, reading the store,
//! and the API calls and file writes the reload tests make.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aurad::daemon::{Clock, ServeOptions, serve};
use aurad::run::Env;
use aurad::store::{RunFilter, RunRecord, Store};

pub struct InProc {
    pub addr: SocketAddr,
    pub root: PathBuf,
    /// The API's token, as the daemon wrote it for the person.
    pub token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
}

/// Options for [`start`].
pub struct Start {
    pub clock: Arc<dyn Clock>,
    pub env: Env,
    pub watch: bool,
}

impl Default for Start {
    fn default() -> Self {
        Start {
            clock: Arc::new(aurad::daemon::SystemClock),
            env: Arc::new(|_: &str| None),
            watch: false,
        }
    }
}

/// Starts the daemon on `root`; returns once its API listens.
pub async fn start(root: &Path, options: Start) -> InProc {
    try_start(root, options).await.expect("aurad serve started")
}

/// Like [`start`], but returns serve's error if it stops before listening.
pub async fn try_start(root: &Path, options: Start) -> Result<InProc, String> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let serve_options = ServeOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        clock: options.clock,
        env: options.env,
        watch: options.watch,
        debounce: Duration::from_millis(50),
        on_listening: Some(ready_tx),
        ..ServeOptions::new(root.to_path_buf())
    };
    let mut task = tokio::spawn(serve(serve_options, async {
        let _ = stop_rx.await;
    }));
    match ready_rx.await {
        Ok(addr) => Ok(InProc {
            addr,
            root: root.to_path_buf(),
            token: api_token(root, addr.port()).expect("the daemon wrote its API credential"),
            stop: Some(stop_tx),
            task: Some(task),
        }),
        // The sender was dropped: serve returned before listening.
        Err(_) => Err(match (&mut task).await {
            Ok(Ok(())) => "serve stopped before listening".to_string(),
            Ok(Err(e)) => e,
            Err(e) => e.to_string(),
        }),
    }
}

/// The token the daemon of `root` listening on `port` wrote for the
/// person's CLI.
pub fn api_token(root: &Path, port: u16) -> Option<String> {
    let path = aurad::config::private::api_file(root, port, &|name| std::env::var(name).ok());
    aurad::config::private::read_api_file(&path)
        .ok()
        .map(|a| a.token)
}

/// A client whose every request carries `token` (an API's bearer token).
pub fn client_with(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

impl InProc {
    /// A client whose every request carries the daemon's token.
    pub fn client(&self) -> reqwest::Client {
        client_with(&self.token)
    }

    /// `request` with the daemon's token.
    pub fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        request.bearer_auth(&self.token)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Signals shutdown and waits for serve to return.
    pub async fn stop(mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().expect("running");
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("serve stopped within 60 s")
            .expect("serve did not panic")
    }
}

impl Drop for InProc {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Polls `check` until it returns `Some`, failing after `timeout` with
/// `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The runs of `agent` stored in the project's database, oldest first.
pub async fn runs(store: &Store, agent: &str) -> Vec<RunRecord> {
    let mut runs = store
        .list_runs(&RunFilter {
            agent: Some(agent.to_string()),
            ..RunFilter::default()
        })
        .await
        .expect("list runs");
    runs.reverse();
    runs
}

/// How long the reload tests wait for a change to show.
pub const WAIT: Duration = Duration::from_secs(20);

/// Starts with the file watcher on.
pub fn watching() -> Start {
    Start {
        watch: true,
        ..Start::default()
    }
}

/// Writes `text` to `file` under the project `root`.
pub fn write(root: &Path, file: &str, text: &str) {
    std::fs::write(root.join(file), text).unwrap();
}

/// `GET path`: the status and the JSON body (`null` when there is none).
pub async fn get(daemon: &InProc, path: &str) -> (u16, serde_json::Value) {
    let response = daemon
        .authorized(reqwest::Client::new().get(daemon.url(path)))
        .send()
        .await
        .expect("API answers");
    let status = response.status().as_u16();
    (
        status,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

/// The daemon's `GET /metrics` text.
pub async fn metrics_text(daemon: &InProc) -> String {
    let response = daemon
        .authorized(reqwest::Client::new().get(daemon.url("/metrics")))
        .send()
        .await
        .expect("API answers");
    response.text().await.expect("a text body")
}

/// The agent's definition hash as the API serves it (`None`: 404).
pub async fn hash(daemon: &InProc, agent: &str) -> Option<String> {
    let (status, body) = get(daemon, &format!("/v1/agents/{agent}")).await;
    (status == 200).then(|| body["definition_hash"].as_str().unwrap().to_string())
}

/// Waits until the agent's hash is other than `not`; the new one.
pub async fn wait_hash(daemon: &InProc, agent: &str, not: Option<&str>) -> Option<String> {
    eventually(&format!("agent {agent} to change"), WAIT, || async {
        let now = hash(daemon, agent).await;
        (now.as_deref() != not).then_some(now)
    })
    .await
}

/// Starts a run of `a` through the API; the run as answered.
pub async fn start_run(
    client: &reqwest::Client,
    daemon: &InProc,
    input: &str,
) -> serde_json::Value {
    daemon
        .authorized(client.post(daemon.url("/v1/agents/a/runs")))
        .json(&serde_json::json!({ "input": input }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
