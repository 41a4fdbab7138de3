//! `aurad serve` from start to stop: take the project lock, open the store,
//! turn runs a dead process left `running` into `interrupted` (retrying
//! those whose agent says `on_interrupt: retry`) and start again the runs
//! it left `queued` (accepted, never started), load the snapshot (the good
//! part of the project: what a file with errors defines is left out and
//! logged, one located line per item; only an error in `aurad.yaml` or an
//! unreadable directory refuses to start), start
//! the scheduler, the `watch:` file triggers, the watcher, the API and the sweep that interrupts runs
//! of other processes (`aurad run`) that died, the retention pruner, and on the shutdown signal
//! stop accepting, let runs finish for the grace period, cancel the rest
//! and flush the store. Under systemd (`NOTIFY_SOCKET`) it says when it is
//! ready, reloading and stopping, and pings the watchdog while its parts
//! answer (`notify.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Daemon;
use super::cluster::takeover::{Liveness, sweep_dead_owners, take_over};
use super::lock::ProjectLock;
use super::notify::Notifier;
use super::reload::{Reloader, describe_changes};
use super::scheduler::Scheduler;
use super::supervisor::{Env, Health, Supervisor};
use crate::config::Diagnostic;
use crate::scheduler::clock::Clock;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;
use crate::types::RunState;
use crate::watcher::Watcher;

/// How `aurad serve` runs.
pub struct ServeOptions {
    pub root: PathBuf,
    /// Overrides `listen` of aurad.yaml.
    pub listen: Option<SocketAddr>,
    pub clock: Arc<dyn Clock>,
    pub env: Env,
    /// Watch the project for changes (hot reload).
    pub watch: bool,
    /// How long the watcher waits for a burst of changes to settle.
    pub debounce: Duration,
    /// Told the address the API listens on once it does (tests bind port 0).
    pub on_listening: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
}

impl ServeOptions {
    /// The production setup for `root`.
    pub fn new(root: PathBuf) -> ServeOptions {
        ServeOptions {
            root,
            listen: None,
            clock: Arc::new(crate::scheduler::clock::SystemClock),
            env: Arc::new(crate::config::process_env),
            watch: true,
            debounce: Duration::from_millis(150),
            on_listening: None,
        }
    }
}

/// Runs the daemon until `shutdown` resolves, then shuts down gracefully.
/// Errors that stop it from starting say what to do.
pub async fn serve(
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let root = options.root.clone();
    let notifier = Notifier::from_env(&*options.env);
    // SQLite: one daemon per project; PostgreSQL: the nodes coordinate
    // through the database, and the project may be shared or read-only.
    let (early, _) = crate::config::load_settings(&root, &*options.env);
    let lock = ProjectLock::for_store(&root, &early.database)?;
    let mut reloader = Reloader::new(root.clone(), options.env.clone());
    let loaded = reloader.load(None).await;
    let (snapshot, warnings) = match loaded {
        Ok(loaded) => (loaded.snapshot, loaded.warnings),
        Err(diagnostics) => {
            log_diagnostics(&diagnostics);
            reloader.shutdown().await;
            let atomic = crate::registry::skipped::atomic_errors(&diagnostics);
            let first = atomic
                .first()
                .map(|d| d.to_string())
                .unwrap_or_else(|| "the project could not be loaded".into());
            return Err(format!(
                "{first}; this concerns every agent, so nothing starts: fix it and start again ({} such error(s), listed above; `aurad validate` lists every problem)",
                atomic.len()
            ));
        }
    };
    log_diagnostics(&warnings);
    log_skipped(&snapshot);
    // Read at start: a change of `otel:` takes a restart.
    match crate::telemetry::install(snapshot.project.settings.otel.as_ref(), &*options.env) {
        Ok(true) => tracing::info!("exporting traces over OTLP/HTTP"),
        Ok(false) => {}
        Err(e) => tracing::warn!("{e}; traces are not exported"),
    }
    let settings = snapshot.project.settings.clone();
    let database = settings.database.clone();
    let store = tokio::task::spawn_blocking(move || Store::connect(&database))
        .await
        .map_err(|e| format!("opening the database failed: {e}"))?
        .map_err(|e| format!("database {}: {e}", settings.database))?;
    let lease = settings.cluster_lease;
    let node = super::cluster::this_node(&snapshot);
    if store.is_shared() {
        // Seen alive by the other nodes before it looks at their runs.
        store.heartbeat(&node).await.map_err(|e| {
            format!(
                "database {}: cannot join the cluster: {e}",
                settings.database
            )
        })?;
    }
    let metrics = Arc::new(Metrics::default());
    let supervisor = Arc::new(Supervisor::new(
        store.clone(),
        metrics.clone(),
        options.clock.clone(),
        options.env.clone(),
        settings.max_concurrent_runs,
    ));
    for name in snapshot.project.agents.keys() {
        let failures = store.consecutive_failures(name).await.unwrap_or(0);
        if failures > 0 {
            let last_failure = last_failure(&store, name).await;
            supervisor.set_health(
                name,
                Health {
                    consecutive_failures: failures,
                    last_failure,
                },
            );
        }
    }
    let listen = options.listen.unwrap_or(settings.listen);
    let given = (options.env)("AURAD_TOKEN").filter(|t| !t.is_empty());
    if let Some(short) = given
        .as_ref()
        .filter(|t| t.chars().count() < MIN_TOKEN_CHARS)
    {
        reloader.shutdown().await;
        return Err(format!(
            "AURAD_TOKEN is {} character(s) long, which can be guessed: use at least {MIN_TOKEN_CHARS} random characters (e.g. the output of `openssl rand -hex 16`), or unset it and aurad makes one",
            short.chars().count()
        ));
    }
    if !listen.ip().is_loopback() && given.is_none() {
        reloader.shutdown().await;
        return Err(format!(
            "listening on {listen} (not loopback) needs a bearer token its clients know: set AURAD_TOKEN, or listen on 127.0.0.1"
        ));
    }
    let token = given.clone().unwrap_or_else(new_token);
    crate::redact::add_to_logs(&crate::redact::Redactor::new([(
        "AURAD_TOKEN".to_string(),
        token.clone(),
    )]));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}; choose another address with --listen or `listen:` in aurad.yaml"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    // Where the person's CLI and dashboard find the API and its token; no
    // tool can read it (config::private).
    // The process's own environment, as the CLI reading it uses.
    let api_file =
        crate::config::private::api_file(&root, bound.port(), &crate::config::process_env);
    let access = crate::config::private::ApiAccess {
        listen: bound,
        token: token.clone(),
        pid: std::process::id(),
    };
    // Held open: the lock on it says this daemon runs (`config::private`).
    let record = crate::config::private::write_api_file(&api_file, &access);
    if let Err(e) = &record {
        let message = format!(
            "cannot write the API's credential to {}: {e}",
            api_file.display()
        );
        if given.is_none() {
            reloader.shutdown().await;
            return Err(format!(
                "{message}; the CLI and the dashboard would have no way in: fix the folder's permissions, or set AURAD_TOKEN"
            ));
        }
        tracing::warn!("{message}; clients must be given AURAD_TOKEN");
    }
    let (snapshot_tx, snapshot_rx) = watch::channel(snapshot.clone());
    supervisor.follow(Box::new(super::follow_ups::FollowUps {
        snapshots: snapshot_rx.clone(),
    }));
    let daemon = Arc::new(Daemon {
        root: root.clone(),
        store: store.clone(),
        supervisor: supervisor.clone(),
        metrics: metrics.clone(),
        clock: options.clock.clone(),
        env: options.env.clone(),
        snapshot: snapshot_tx,
        listen: bound,
        token,
        mcp_states: Mutex::new(Vec::new()),
        nodes: Mutex::new(Vec::new()),
        started_at: options.clock.now(),
        channels: Default::default(),
    });
    daemon.set_mcp_states(reloader.server_states());
    metrics.set_config_skipped(&skipped_counts(&snapshot));
    // Runs a dead process or node left are taken over before anything
    // new starts (pipelines are resumed, not interrupted).
    let liveness = Liveness::read(&store, lease)
        .await
        .map_err(|e| format!("cannot read which nodes are alive: {e}"))?;
    take_over(&daemon, &liveness)
        .await
        .map_err(|e| format!("cannot take over runs of a previous process: {e}"))?;

    let stop = CancellationToken::new();
    let scheduler = Scheduler::new(
        store.clone(),
        supervisor.clone(),
        options.clock.clone(),
        metrics.clone(),
    );
    let files_task = tokio::spawn(super::watch::run(
        supervisor.clone(),
        snapshot_rx.clone(),
        stop.child_token(),
    ));
    let retention_task = tokio::spawn(super::retention::run(
        store.clone(),
        snapshot_rx.clone(),
        options.clock.clone(),
        stop.child_token(),
    ));
    let channels_task = tokio::spawn(super::channels::run(
        daemon.clone(),
        snapshot_rx.clone(),
        stop.child_token(),
    ));
    let scheduler_task = tokio::spawn(scheduler.run(snapshot_rx, stop.child_token()));
    let sweep_task = if store.is_shared() {
        tokio::spawn(super::cluster::run(
            daemon.clone(),
            lease,
            stop.child_token(),
        ))
    } else {
        tokio::spawn(sweep_dead_owners(store.clone(), stop.child_token()))
    };
    let api_stop = CancellationToken::new();
    let api_task = tokio::spawn(crate::api::serve(
        listener,
        daemon.clone(),
        api_stop.clone(),
    ));
    tracing::info!(
        dir = %root.display(),
        listen = %bound,
        agents = snapshot.project.agents.len(),
        skipped = snapshot.skipped.len(),
        "aurad serve is ready"
    );
    if let Some(tx) = options.on_listening {
        let _ = tx.send(bound);
    }
    notifier.ready(&serving_status(&daemon));
    let watcher = if options.watch {
        match Watcher::start(&root, options.debounce) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!("hot reload is off: {e}");
                None
            }
        }
    } else {
        None
    };
    let reload_loop = reload_loop(
        daemon.clone(),
        reloader,
        watcher,
        notifier.clone(),
        stop.child_token(),
    );
    let reload_task = tokio::spawn(reload_loop);

    // The watchdog's pings come from here, the loop that owns the daemon's
    // parts: one goes out only when the API and scheduler tasks still run,
    // the store answers a read and the supervisor's lock is free.
    let alive = || {
        let tasks = [
            ("the HTTP API", api_task.is_finished()),
            ("the scheduler", scheduler_task.is_finished()),
            ("the reload loop", reload_task.is_finished()),
        ];
        let (store, supervisor) = (&store, &supervisor);
        async move {
            if let Some((part, _)) = tasks.iter().find(|(_, ended)| *ended) {
                return Err(format!("{part} stopped"));
            }
            let probe = crate::store::RunFilter {
                parent: None,
                agent: None,
                state: None,
                limit: 1,
            };
            store
                .list_runs(&probe)
                .await
                .map_err(|e| format!("the store does not answer: {e}"))?;
            supervisor.counts();
            Ok(())
        }
    };
    notifier
        .until_shutdown(shutdown, alive, || serving_status(&daemon))
        .await;
    tracing::info!("shutting down: no new runs are accepted");
    let (running, queued) = supervisor.counts();
    notifier.stopping(&format!(
        "shutting down: {running} run(s) running, {queued} queued; waiting up to {}s for them",
        daemon.snapshot().project.settings.shutdown_grace.as_secs()
    ));
    stop.cancel();
    supervisor.close();
    let _ = scheduler_task.await;
    let _ = channels_task.await;
    let _ = files_task.await;
    let _ = sweep_task.await;
    let _ = retention_task.await;
    let mut reloader = reload_task.await.ok();
    let grace = daemon.snapshot().project.settings.shutdown_grace;
    let (running, queued) = supervisor.counts();
    if running + queued > 0 {
        tracing::info!(
            running,
            queued,
            "waiting up to {}s for runs to finish",
            grace.as_secs()
        );
    }
    if tokio::time::timeout(grace, supervisor.wait())
        .await
        .is_err()
    {
        tracing::warn!("grace period over: cancelling the runs still in flight");
        supervisor.cancel_all();
        supervisor.wait().await;
    }
    api_stop.cancel();
    match api_task.await {
        Ok(Err(e)) => tracing::error!("the HTTP API stopped with an error: {e}"),
        Err(e) => tracing::error!("the HTTP API task failed: {e}"),
        Ok(Ok(())) => {}
    }
    if let Some(reloader) = reloader.as_mut() {
        reloader.shutdown().await;
    }
    drop(daemon);
    // The credential of this process only: a newer daemon's stays.
    if crate::config::private::read_api_file(&api_file).is_ok_and(|a| a.pid == std::process::id()) {
        let _ = std::fs::remove_file(&api_file);
    }
    drop(record);
    if store.is_shared()
        && let Err(e) = store.node_stopped(&node.id).await
    {
        tracing::warn!(
            "cannot record this node's stop (the others will see its lease run out): {e}"
        );
    }
    // The last spans go before the process does.
    let _ = tokio::task::spawn_blocking(|| {
        crate::telemetry::shutdown(std::time::Duration::from_secs(5))
    })
    .await;
    let closed = tokio::task::spawn_blocking(move || store.close()).await;
    drop(lock);
    match closed {
        Ok(Ok(())) => {
            tracing::info!("stopped");
            Ok(())
        }
        Ok(Err(e)) => Err(format!("closing the database: {e}")),
        Err(e) => Err(format!("closing the database: {e}")),
    }
}

/// Follows file changes and MCP servers: loads a new snapshot on each file
/// change and, while hot reload is on, whenever a server's tools differ
/// from what the last load saw, and swaps it in if it has no errors; keeps
/// the servers' states (health, metrics) current. Returns the reloader
/// (for shutdown) when stopped.
async fn reload_loop(
    daemon: Arc<Daemon>,
    mut reloader: Reloader,
    mut watcher: Option<Watcher>,
    notifier: Notifier,
    stop: CancellationToken,
) -> Reloader {
    let mcp_changes = reloader.changes();
    loop {
        let files = async {
            match watcher.as_mut() {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = files => match changed {
                Some(paths) => {
                    let shown: Vec<String> =
                        paths.iter().map(|p| p.display().to_string()).collect();
                    tracing::info!(changed = %shown.join(", "), "project changed; reloading");
                }
                None => {
                    tracing::error!("the file watcher stopped; hot reload is off until restart");
                    watcher = None;
                    continue;
                }
            },
            () = mcp_changes.notified() => {
                daemon.set_mcp_states(reloader.server_states());
                if !reloader.mcp_tools_changed() {
                    continue;
                }
                if watcher.is_none() {
                    // A load reads every file: not while hot reload is off.
                    reloader.mark_tools_seen();
                    tracing::warn!(
                        "an MCP server's tools changed, but hot reload is off: runs keep the tools they had until aurad serve restarts"
                    );
                    continue;
                }
                tracing::info!("an MCP server's tools changed; reloading");
            }
            () = stop.cancelled() => return reloader,
        }
        notifier.reloading();
        reload(&daemon, &mut reloader).await;
        notifier.reloaded(&serving_status(&daemon));
    }
}

/// The status line systemd shows (`systemctl status`).
fn serving_status(daemon: &Daemon) -> String {
    let (running, queued) = daemon.supervisor.counts();
    format!(
        "serving {} agent(s) on {}; {running} run(s) running, {queued} queued",
        daemon.snapshot().project.agents.len(),
        daemon.listen
    )
}

/// Loads a new snapshot and swaps it in, or logs why the old one stays.
async fn reload(daemon: &Daemon, reloader: &mut Reloader) {
    match reloader.load(Some(daemon.snapshot())).await {
        Ok(loaded) => {
            let old = daemon.snapshot();
            log_diagnostics(&loaded.warnings);
            log_skipped(&loaded.snapshot);
            daemon
                .metrics
                .set_config_skipped(&skipped_counts(&loaded.snapshot));
            for change in describe_changes(&old, &loaded.snapshot) {
                tracing::info!("{change}");
            }
            daemon
                .supervisor
                .set_limit(loaded.snapshot.project.settings.max_concurrent_runs);
            daemon.snapshot.send_replace(loaded.snapshot);
            daemon.metrics.reload(true);
            daemon.set_mcp_states(reloader.server_states());
            tracing::info!("reloaded");
        }
        Err(diagnostics) => {
            log_diagnostics(&diagnostics);
            daemon.metrics.reload(false);
            tracing::error!(
                "reload rejected: aurad.yaml or a project directory has errors (above), which concern every agent; the previous version of the whole project keeps running"
            );
        }
    }
}

/// When the agent's newest failed or timed-out run ended: the start of its
/// backoff (skipped fires and interrupted runs recorded since do not move
/// it).
async fn last_failure(store: &Store, agent: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let mut newest = None;
    for state in [RunState::Failed, RunState::TimedOut] {
        let filter = crate::store::RunFilter {
            parent: None,
            agent: Some(agent.to_string()),
            state: Some(state),
            limit: 1,
        };
        let ended = store
            .list_runs(&filter)
            .await
            .ok()
            .and_then(|runs| runs.into_iter().next())
            .and_then(|r| r.finished_at);
        newest = newest.max(ended);
    }
    newest
}

/// One located line per item the snapshot left out or kept stale.
fn log_skipped(snapshot: &crate::registry::Snapshot) {
    for item in &snapshot.skipped {
        tracing::error!("{}", item.log_line());
    }
}

/// How many items of each kind the snapshot left out (stale agents count).
fn skipped_counts(snapshot: &crate::registry::Snapshot) -> Vec<(&'static str, u64)> {
    use crate::registry::skipped::ItemKind;
    ItemKind::ALL
        .iter()
        .map(|kind| {
            let n = snapshot.skipped.iter().filter(|i| i.kind == *kind).count();
            (kind.as_str(), n as u64)
        })
        .collect()
}

fn log_diagnostics(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        if d.is_error() {
            tracing::error!("{d}");
        } else {
            tracing::warn!("{d}");
        }
    }
}

/// The fewest characters an `AURAD_TOKEN` may have: a one-character token
/// was accepted before, and is guessed in a few requests.
pub const MIN_TOKEN_CHARS: usize = 16;

/// A new random API token: 32 bytes from the system's generator, in hex.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    hex::encode(bytes)
}
