//! `aurad serve` inside the test process: started on a project directory
//! with a chosen clock and environment, its API on a free loopback port,
//! stopped by a oneshot. Plus polling with a deadline and reading the store.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aurad::daemon::{Clock, Env, ServeOptions, serve};
use aurad::store::{RunFilter, RunRecord, Store};

pub struct InProc {
    pub addr: SocketAddr,
    pub root: PathBuf,
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

impl InProc {
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
