//! The channels of `channels/` under `aurad serve`: one connector per
//! channel file (`crate::channels`), started, and restarted or stopped when
//! a reload changes or removes its file; the webhook requests of channels
//! in webhook mode; each channel's state for status and metrics. What a
//! channel's updates become is `inbound.rs` (who may talk, the claim,
//! sessions, turns, decisions); how answers and approval prompts go back,
//! also after a restart, is `outbound.rs`.
//!
//! Depends on `channels` (the connectors), `run` (a session's turn), the
//! store and the daemon's supervisor.

mod inbound;
mod outbound;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Daemon;
use crate::channels::state::Count;
use crate::channels::{
    ChannelState, ChannelStatus, Connector, Inbox, WebhookAnswer, WebhookRequest,
};
use crate::config::channels::ChannelConfig;
use crate::registry::Snapshot;

/// How many updates of one channel may wait to be taken.
const INBOX: usize = 64;

/// The running channels.
#[derive(Default)]
pub struct Channels {
    running: Mutex<BTreeMap<String, Running>>,
    /// Runs whose answers a task of this process is sending: a run is
    /// followed once, however many updates point at it.
    following: Mutex<HashSet<String>>,
}

/// One running channel.
#[derive(Clone)]
pub(crate) struct Running {
    pub config: Arc<ChannelConfig>,
    pub state: Arc<ChannelState>,
    pub connector: Arc<dyn Connector>,
    stop: CancellationToken,
    metrics: Arc<crate::telemetry::metrics::Metrics>,
}

impl Running {
    /// One more update or message of `what` kind, in the channel's state
    /// and the metrics.
    pub(crate) fn count(&self, what: Count) {
        self.state.count(what);
        let kind = match what {
            Count::In => "in",
            Count::Out => "out",
            Count::Ignored => "ignored",
            Count::Duplicate => "duplicate",
        };
        self.metrics.channel_message(&self.config.name, kind);
    }
}

impl Channels {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Running>> {
        // Plain data: a panic elsewhere leaves it usable.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Channel `name`, if it runs.
    pub(crate) fn get(&self, name: &str) -> Option<Running> {
        self.lock().get(name).cloned()
    }

    /// Each running channel's state, by name.
    pub fn statuses(&self) -> Vec<ChannelStatus> {
        self.lock().values().map(|r| r.state.status()).collect()
    }

    /// Whether this process takes on following run `run_id`: false when
    /// it does already.
    fn follow(&self, run_id: &str) -> bool {
        self.following
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run_id.to_string())
    }

    fn followed(&self, run_id: &str) {
        self.following
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run_id);
    }

    fn stop_all(&self) {
        for (_, running) in std::mem::take(&mut *self.lock()) {
            running.stop.cancel();
            running.state.stopped();
        }
    }
}

/// Runs the channels of each snapshot `snapshots` gives until `stop`:
/// starts the new ones, restarts those whose file changed, stops the
/// removed ones. A channel's runs and answers are not affected by a
/// restart of its connector.
pub async fn run(
    daemon: Arc<Daemon>,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    stop: CancellationToken,
) {
    let http = match reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::error!("channels are off: cannot make an HTTP client: {e}");
            return;
        }
    };
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        apply(&daemon, &snapshot, &http, &stop);
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            () = stop.cancelled() => break,
        }
    }
    daemon.channels.stop_all();
}

/// Makes the running channels those of `snapshot`.
fn apply(
    daemon: &Arc<Daemon>,
    snapshot: &Snapshot,
    http: &reqwest::Client,
    stop: &CancellationToken,
) {
    let wanted: BTreeMap<&str, &ChannelConfig> = snapshot
        .project
        .channels
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let mut running = daemon.channels.lock();
    running.retain(|name, r| {
        let keep = wanted
            .get(name.as_str())
            .is_some_and(|c| c.hash == r.config.hash);
        if !keep {
            tracing::info!(channel = %name, "channel stopped (its file changed or was removed)");
            r.stop.cancel();
            r.state.stopped();
        }
        keep
    });
    for (name, config) in wanted {
        if running.contains_key(name) {
            continue;
        }
        let config = Arc::new(config.clone());
        let state = Arc::new(ChannelState::new(
            name,
            config.platform.name(),
            &config.agent,
        ));
        let connector = crate::channels::connector(&config, state.clone(), http.clone());
        let channel = Running {
            config,
            state,
            connector,
            stop: stop.child_token(),
            metrics: daemon.metrics.clone(),
        };
        let (inbox, updates) = Inbox::new(INBOX);
        tokio::spawn(channel.connector.clone().run(inbox, channel.stop.clone()));
        tokio::spawn(inbound::take(daemon.clone(), channel.clone(), updates));
        tokio::spawn(outbound::recover(daemon.clone(), channel.clone()));
        tracing::info!(channel = %name, platform = channel.config.platform.name(), agent = %channel.config.agent, "channel started");
        running.insert(name.to_string(), channel);
    }
}

impl Daemon {
    /// A request to `POST /channels/{name}`, for a channel in webhook mode.
    pub async fn channel_webhook(&self, name: &str, request: WebhookRequest) -> WebhookAnswer {
        match self.channels.get(name) {
            Some(channel) => channel.connector.webhook(request).await,
            None => WebhookAnswer::json(
                404,
                &serde_json::json!({"error": format!("no channel `{name}` runs (no channels/{name}.yaml, or it has errors: see aurad validate)")}),
            ),
        }
    }
}
