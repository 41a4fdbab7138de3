//! `aurad serve`: the composition root of the daemon. [`serve`] takes the
//! project lock, opens the store, loads the snapshot and reloads it
//! ([`reload`], on `crate::watcher`'s signals), runs the scheduler, the run [`supervisor`]
//! (every served run starts there and goes through `crate::run`'s door),
//! the `watch:` ([`watch`]) and `after:` triggers, the cluster's node ([`cluster`]),
//! the retention pruner and the HTTP API, and shuts them down gracefully.
//! [`Daemon`] is the handle the API works through (as its `api::Backend`,
//! in `backend`).
//!
//! May depend on `run`, `registry`, `engine`, `store`, `scheduler`, `api`,
//! `config`, `mcp`, `telemetry`, `channels`.

mod backend;
pub mod channels;
pub mod cluster;
mod follow_ups;
pub mod lock;
mod notify;
pub mod reload;
pub mod retention;
pub mod scheduler;
mod serve;
mod sessions;
pub mod status;
pub mod supervisor;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt};

pub use crate::api::{
    AfterInfo, AgentInfo, CancelAnswer, RunAsk, ScheduleInfo, SubmitError, TriggerError,
};
pub use crate::scheduler::clock::{Clock, ManualClock, SystemClock};
pub use serve::{MIN_TOKEN_CHARS, ServeOptions, serve};
pub use supervisor::{CancelOutcome, Env};

use crate::config::WebhookSignature;
use crate::registry::Snapshot;
use crate::run::RunRequest;
use crate::run::hub::Numbered;
use crate::store::{RunFilter, RunRecord, Store, StoreError};
use crate::telemetry::metrics::Metrics;
use crate::types::{McpState, RunEvent, RunState};
use supervisor::Supervisor;

/// How many next fire times an agent's description lists per schedule.
const NEXT_FIRES: usize = 3;
/// How far ahead next fire times are looked for (a schedule limited to a
/// rare date, such as 29 February on a Monday, still shows its next fire).
const HORIZON_DAYS: i64 = 3660;

/// The running daemon, as the HTTP API sees it.
pub struct Daemon {
    root: PathBuf,
    store: Store,
    supervisor: Arc<Supervisor>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    env: Env,
    snapshot: tokio::sync::watch::Sender<Arc<Snapshot>>,
    listen: SocketAddr,
    token: String,
    mcp_states: Mutex<Vec<(String, McpState)>>,
    /// The cluster's nodes as the last heartbeat read them (PostgreSQL).
    nodes: Mutex<Vec<crate::store::NodeRecord>>,
    started_at: DateTime<Utc>,
    /// The channels of `channels/` that run.
    channels: channels::Channels,
}

impl AgentInfo {
    /// `agent` as of `now`, with what the store and the supervisor know.
    pub fn new(
        agent: &crate::config::Agent,
        now: DateTime<Utc>,
        last_run: Option<RunRecord>,
        consecutive_failures: u32,
        backoff_until: Option<DateTime<Utc>>,
    ) -> AgentInfo {
        AgentInfo {
            name: agent.name.clone(),
            description: agent.description.clone(),
            model: agent.model.clone(),
            definition_hash: agent.hash.clone(),
            schedules: agent
                .triggers
                .schedules
                .iter()
                .map(|s| ScheduleInfo {
                    id: s.id.clone(),
                    cron: s.cron.expression().to_string(),
                    timezone: s.cron.timezone().name().to_string(),
                    description: s.cron.describe(),
                    next_fires: s.cron.fires_between(
                        now,
                        now + chrono::Duration::days(HORIZON_DAYS),
                        NEXT_FIRES,
                    ),
                })
                .collect(),
            on_overlap: agent.triggers.on_overlap.as_str(),
            webhook: agent.triggers.webhook.is_some(),
            after: agent
                .triggers
                .after
                .iter()
                .map(|a| AfterInfo {
                    agent: a.agent.clone(),
                    on: a.on.as_str(),
                })
                .collect(),
            watch: agent
                .triggers
                .watch
                .as_ref()
                .map(|w| w.paths.clone())
                .unwrap_or_default(),
            agents: agent.agents.clone(),
            approve: agent.approval.approve.clone(),
            steps: agent.steps.as_ref().map(|p| p.steps.len()),
            last_run,
            consecutive_failures,
            // The backoff holds back scheduled fires only: an agent with no
            // schedule is never backed off, whatever its failures.
            backoff_until: backoff_until
                .filter(|until| *until > now && !agent.triggers.schedules.is_empty()),
            tools: None,
            system: None,
            prompt: None,
        }
    }
}

impl Daemon {
    /// The project root.
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The address the API was asked to listen on.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// The bearer token every API request but `/healthz`, the dashboard's
    /// files and the signed webhooks carries: `AURAD_TOKEN`, or one made at
    /// start and written where only the person's CLI can read it.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Every agent of the current snapshot, by name.
    pub async fn agents(&self) -> Result<Vec<AgentInfo>, StoreError> {
        let snapshot = self.snapshot();
        let mut agents = Vec::new();
        for agent in snapshot.project.agents.values() {
            agents.push(self.describe(&snapshot, agent).await?);
        }
        Ok(agents)
    }

    pub async fn agent(&self, name: &str) -> Result<Option<AgentInfo>, StoreError> {
        let snapshot = self.snapshot();
        let Some(agent) = snapshot.project.agents.get(name) else {
            return Ok(None);
        };
        // The texts as written, with the secrets the snapshot knows
        // redacted, as everything else shown.
        let redact = |text: &Option<String>| {
            text.as_deref()
                .map(|t| snapshot.redactor.redact(t).into_owned())
        };
        Ok(Some(AgentInfo {
            system: redact(&agent.system),
            prompt: redact(&agent.prompt),
            ..self.describe(&snapshot, agent).await?
        }))
    }

    async fn describe(
        &self,
        snapshot: &Snapshot,
        agent: &crate::config::Agent,
    ) -> Result<AgentInfo, StoreError> {
        let now = self.clock.now();
        let health = self.supervisor.health(&agent.name);
        let tools = crate::run::agent_tool_names(snapshot, agent);
        Ok(AgentInfo {
            tools: Some(tools),
            ..AgentInfo::new(
                agent,
                now,
                self.store.last_run(&agent.name).await?,
                health.consecutive_failures,
                health.backoff_until(),
            )
        })
    }

    /// Starts a run of `agent` now; returns it as stored (`queued`).
    pub async fn trigger(&self, agent: &str, trigger: RunAsk) -> Result<RunRecord, TriggerError> {
        let snapshot = self.snapshot();
        if !snapshot.project.agents.contains_key(agent) {
            return Err(TriggerError::UnknownAgent(agent.to_string()));
        }
        let request = RunRequest {
            input: trigger.input,
            vars: trigger.vars,
            payload: trigger.payload,
            event: trigger.event,
            headers: trigger.headers,
            delivery: trigger.delivery,
            history: trigger.history,
            ..RunRequest::new(agent, trigger.trigger)
        };
        Ok(self.supervisor.submit(snapshot, request, None).await?)
    }

    pub async fn runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        self.store.list_runs(filter).await
    }

    /// A run by id (or unique id prefix).
    pub async fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.store.get_run(id).await
    }

    /// The run's events after `after` (a sequence number; 0 for all): the
    /// stored ones, then, while it runs, the live ones, ending with its
    /// `finished` event. Text and reasoning deltas of a turn in progress
    /// share the sequence number their merged text will be stored under.
    pub async fn events(
        &self,
        run_id: &str,
        after: i64,
    ) -> Result<BoxStream<'static, Numbered>, StoreError> {
        let subscription = self.supervisor.hub(run_id).and_then(|h| h.subscribe());
        let stored = self.store.run_events_after(run_id, after).await?;
        let Some(sub) = subscription else {
            // Run elsewhere (another node, an `aurad run`) or finished.
            return Ok(cluster::remote_events::follow(
                self.store.clone(),
                run_id.to_string(),
                stored,
                after,
            ));
        };
        let committed = sub.committed;
        let stored = stored.into_iter().filter(move |(seq, _)| *seq <= committed);
        let pending = sub.pending.into_iter().filter(move |(seq, _)| *seq > after);
        let live = stream::unfold(sub.live, |mut rx| async move {
            match rx.recv().await {
                Ok(item) => Some((item, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!("an event subscriber fell {n} events behind and was cut off; it can resume with Last-Event-ID");
                    None
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
            }
        })
        .filter(move |(seq, _)| std::future::ready(*seq > after.max(committed)));
        // The hub ends without the run's `finished` when the run did not
        // run here after all (another node took it from the shared queue):
        // then its events come from the store.
        let seen = Arc::new(Mutex::new((after.max(committed), false)));
        let track = seen.clone();
        let head = stream::iter(stored.chain(pending))
            .chain(live)
            .inspect(move |(seq, event)| {
                let mut seen = track.lock().unwrap_or_else(PoisonError::into_inner);
                seen.0 = seen.0.max(*seq);
                seen.1 |= matches!(event, crate::types::RunEvent::Finished { .. });
            });
        let store = self.store.clone();
        let run_id = run_id.to_string();
        let tail = stream::once(async move {
            let (last, finished) = *seen.lock().unwrap_or_else(PoisonError::into_inner);
            if finished {
                stream::empty().boxed()
            } else {
                cluster::remote_events::follow(store, run_id, Vec::new(), last)
            }
        })
        .flatten();
        Ok(head.chain(tail).boxed())
    }

    /// Cancels a queued or running run.
    pub async fn cancel(&self, id: &str) -> Result<CancelAnswer, StoreError> {
        let Some(run) = self.store.get_run(id).await? else {
            return Ok(CancelAnswer::NotFound);
        };
        if matches!(
            self.supervisor.cancel(&run.id),
            CancelOutcome::Cancelling | CancelOutcome::AlreadyCancelling
        ) {
            return Ok(CancelAnswer::Cancelling(run));
        }
        if !self.store.is_shared() || run.state.is_final() {
            return Ok(CancelAnswer::NotRunning(run));
        }
        // Another node's run. Queued there: recorded cancelled here (that
        // node never starts it, its start checks the row). Running or
        // waiting there: that node is asked to cancel it.
        let owner = run.owner.clone().unwrap_or_default();
        if run.state == RunState::Queued
            && self
                .store
                .cancel_queued(&run.id, &owner, "cancelled while queued")
                .await?
        {
            return Ok(CancelAnswer::Cancelling(run));
        }
        self.store.request_cancel(&run.id).await?;
        Ok(CancelAnswer::Cancelling(run))
    }

    /// The webhook of `agent`: its signing scheme and secret; `Ok(None)` if
    /// it has no webhook, `Err` (what to fix) if its variable is not set.
    pub fn webhook_secret(
        &self,
        agent: &str,
    ) -> Result<Option<(Vec<WebhookSignature>, String)>, String> {
        let snapshot = self.snapshot();
        let Some(hook) = snapshot
            .project
            .agents
            .get(agent)
            .and_then(|a| a.triggers.webhook.as_ref())
        else {
            return Ok(None);
        };
        match (self.env)(&hook.secret_env) {
            Some(secret) if !secret.is_empty() => Ok(Some((hook.signatures.clone(), secret))),
            _ => Err(format!(
                "the webhook secret variable {} of agent `{agent}` is not set in aurad's environment",
                hook.secret_env
            )),
        }
    }

    /// Liveness and a summary, for `GET /healthz`.
    pub fn health(&self) -> serde_json::Value {
        let (running, queued) = self.supervisor.counts();
        let snapshot = self.snapshot();
        let mcp: Vec<serde_json::Value> = self
            .mcp_states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, state)| serde_json::json!({ "name": name, "state": state }))
            .collect();
        let store = self.store.intact().err().map(|e| e.to_string());
        serde_json::json!({
            "status": if store.is_some() { "failing" } else { "ok" },
            "store_error": store,
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "started_at": self.started_at,
            "agents": snapshot.project.agents.len(),
            "runs_running": running,
            "runs_queued": queued,
            "mcp_servers": mcp,
        })
    }

    /// Every started MCP server's state, as `(server, state)`.
    pub fn mcp_states(&self) -> Vec<(String, McpState)> {
        self.mcp_states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The cluster's nodes as last read (empty on SQLite).
    pub fn nodes(&self) -> Vec<crate::store::NodeRecord> {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_nodes(&self, nodes: Vec<crate::store::NodeRecord>) {
        *self.nodes.lock().unwrap_or_else(PoisonError::into_inner) = nodes;
    }

    fn set_mcp_states(&self, states: Vec<(String, McpState)>) {
        self.metrics.set_mcp_states(&states);
        *self
            .mcp_states
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = states;
    }
}

/// Seen by tests and the API: the events of a run as `(seq, event)`.
pub type EventItem = (i64, RunEvent);
