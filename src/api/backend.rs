//! What the API needs from the daemon, as the [`Backend`] trait the daemon
//! implements, and the request, answer and error types they exchange. The
//! API names no daemon type: `daemon` depends on `api` (it serves it), never
//! the reverse. Depends on `config` (the allowed hosts), `store` (its record
//! and error types) and `types`.

use std::net::SocketAddr;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::Serialize;

use crate::config::WebhookSignature;
use crate::config::settings::AllowedHost;
use crate::store::{
    FirePage, MemoryNamespace, RunPage, RunRecord, SessionMessage, SessionRecord, StoreError,
    WaitingRun,
};
use crate::types::approval::ApprovalRecord;
use crate::types::memory::Memory;
use crate::types::{Message, RunEvent, ScheduleId, Trigger};

/// A channel's answer to its webhook request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelAnswer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// The running daemon, as the HTTP API sees it.
pub trait Backend: Send + Sync + 'static {
    /// The address the API was asked to listen on.
    fn listen(&self) -> SocketAddr;
    /// `AURAD_TOKEN`, required as a bearer token when not on loopback.
    fn token(&self) -> &str;
    /// The names besides its own the API answers to (`allowed_hosts`).
    fn allowed_hosts(&self) -> Vec<AllowedHost>;
    /// The metrics in the Prometheus text format.
    fn metrics_text(&self) -> String;
    /// Liveness and a summary, for `GET /healthz`.
    fn health(&self) -> serde_json::Value;
    /// Every agent of the current snapshot, by name.
    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentInfo>, StoreError>>;
    fn agent<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<AgentInfo>, StoreError>>;
    /// Starts a run of `agent` now; returns it as stored (`queued`).
    fn trigger<'a>(
        &'a self,
        agent: &'a str,
        ask: RunAsk,
    ) -> BoxFuture<'a, Result<RunRecord, TriggerError>>;
    /// The runs of `page`, newest first.
    fn runs<'a>(&'a self, page: &'a RunPage) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>>;
    /// The runs of scheduled fires, skipped and missed ones included,
    /// newest fire first.
    fn fires<'a>(&'a self, page: &'a FirePage)
    -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>>;
    /// The runs waiting for a person's approval, each with the call it
    /// waits on, oldest request first.
    fn waiting_approvals(&self) -> BoxFuture<'_, Result<Vec<WaitingRun>, StoreError>>;
    /// Every long-term memory namespace with its entry count.
    fn memory_namespaces(&self) -> BoxFuture<'_, Result<Vec<MemoryNamespace>, StoreError>>;
    /// The memories of `namespace`, most recently updated first (`limit`
    /// 0: all).
    fn memories<'a>(
        &'a self,
        namespace: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Memory>, StoreError>>;
    /// A run by id (or unique id prefix).
    fn run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>>;
    /// The run's events after `after` (a sequence number; 0 for all) as
    /// `(seq, event)`: the stored ones, then, while it runs, the live ones,
    /// ending with its `finished` event.
    fn events<'a>(
        &'a self,
        run_id: &'a str,
        after: i64,
    ) -> BoxFuture<'a, Result<BoxStream<'static, (i64, RunEvent)>, StoreError>>;
    /// Decides call `call_id` of run `run_id` (a whole id); `Conflict` when
    /// the run does not wait on that call (not waiting, decided already, or
    /// waiting on another).
    fn decide_approval<'a>(
        &'a self,
        run_id: &'a str,
        call_id: &'a str,
        approve: bool,
        reason: Option<String>,
    ) -> BoxFuture<'a, Result<ApprovalRecord, StoreError>>;
    /// Cancels a queued or running run.
    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<CancelAnswer, StoreError>>;
    /// The webhook of `agent`: its signing scheme and secret; `Ok(None)` if
    /// it has no webhook, `Err` (what to fix) if its variable is not set.
    fn webhook_secret(
        &self,
        agent: &str,
    ) -> Result<Option<(Vec<WebhookSignature>, String)>, String>;
    /// A request to `POST /channels/{name}` (a channel in webhook mode),
    /// checked and answered by the channel's platform.
    fn channel_webhook<'a>(
        &'a self,
        name: &'a str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> BoxFuture<'a, ChannelAnswer>;
    /// What the configuration loaded and what it left out or kept stale,
    /// and why, for `GET /v1/status`.
    fn status(&self) -> serde_json::Value;
    /// The agents `/mcp` offers as tools now (`mcp_server:` in aurad.yaml).
    fn agent_tools(&self) -> Vec<super::mcp::AgentTool>;
    /// A new session of `agent` (not a pipeline).
    fn new_session<'a>(
        &'a self,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<SessionRecord, SessionError>>;
    /// The sessions (of `agent`, or all), the last updated first.
    fn sessions<'a>(
        &'a self,
        agent: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SessionRecord>, StoreError>>;
    /// Session `id` with its messages in order.
    fn session<'a>(&'a self, id: &'a str)
    -> BoxFuture<'a, Result<Option<SessionView>, StoreError>>;
    /// Starts the turn of session `id` whose message is `message`, through
    /// the supervisor like any API run; returns its run as stored. With
    /// `agent`, the session must be that agent's.
    fn send_message<'a>(
        &'a self,
        id: &'a str,
        message: String,
        agent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<RunRecord, SessionError>>;
    /// Deletes session `id` and its messages; `Conflict` while a turn of it
    /// has not ended.
    fn delete_session<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), SessionError>>;
}

/// A session and its messages in order.
pub type SessionView = (SessionRecord, Vec<SessionMessage>);

/// Why a session was not created, continued or deleted; each message says
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No such session, or no such agent.
    #[error("{0}")]
    NotFound(String),
    /// The message or the agent cannot make a turn: an empty message, a
    /// pipeline, another agent's session.
    #[error("{0}")]
    Invalid(String),
    /// The session is full (`sessions.max_turns`), or (deleting) a turn of
    /// it has not ended; `runs` are those turns.
    #[error("{message}")]
    Conflict { message: String, runs: Vec<String> },
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

/// An agent as the API and `aurad agents` describe it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentInfo {
    pub name: String,
    pub description: String,
    pub model: String,
    pub definition_hash: String,
    pub schedules: Vec<ScheduleInfo>,
    pub on_overlap: &'static str,
    pub webhook: bool,
    /// `after:`: the agents whose runs' ends start this one, and on which
    /// outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<AfterInfo>,
    /// `watch:`: the globs whose files start a run each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub watch: Vec<String>,
    /// `agents:`: the agents it may call as tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// `approve:`: the tool globs whose calls wait for a person.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approve: Vec<String>,
    /// `steps:`: how many steps, for a pipeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<usize>,
    pub last_run: Option<RunRecord>,
    pub consecutive_failures: u32,
    /// Scheduled fires before this instant are skipped (failure backoff).
    pub backoff_until: Option<DateTime<Utc>>,
    /// The tools a run of the agent gets now: those of its `tools` list
    /// among the built-in ones, the plugins and the connected MCP servers',
    /// and the memory tools with `memory.tools`.
    /// Only the daemon knows them (it holds the MCP connections).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// `system:` as written (secrets redacted), on `GET /v1/agents/{name}`
    /// only: the dashboard's agent page shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// `prompt:` as written (secrets redacted), on `GET /v1/agents/{name}`
    /// only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// One `after:` entry of an agent.
#[derive(Debug, Clone, Serialize)]
pub struct AfterInfo {
    pub agent: String,
    /// `succeeded`, `failed` or `any`.
    pub on: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScheduleInfo {
    /// What the schedule is, hashed: its runs carry the same `schedule_id`.
    pub id: ScheduleId,
    pub cron: String,
    pub timezone: String,
    pub description: String,
    pub next_fires: Vec<DateTime<Utc>>,
}

/// A request to start a run through the API or a webhook.
#[derive(Debug, Clone)]
pub struct RunAsk {
    pub input: Option<String>,
    pub vars: serde_json::Map<String, serde_json::Value>,
    pub payload: Option<serde_json::Value>,
    /// A webhook's event name (`{{ event }}`).
    pub event: Option<String>,
    /// A webhook's headers, names in lowercase (`{{ headers.X }}`).
    pub headers: std::collections::BTreeMap<String, String>,
    /// `api` or `webhook`.
    pub trigger: Trigger,
    /// A webhook's delivery id, claimed with the run so a redelivery starts
    /// no second run.
    pub delivery: Option<String>,
    /// The earlier messages of a conversation the caller holds (the
    /// OpenAI-compatible endpoint), put before the input.
    pub history: Option<Vec<Message>>,
}

impl RunAsk {
    /// A request for `trigger` with nothing else said.
    pub fn new(trigger: Trigger) -> RunAsk {
        RunAsk {
            input: None,
            vars: serde_json::Map::new(),
            payload: None,
            event: None,
            headers: std::collections::BTreeMap::new(),
            trigger,
            delivery: None,
            history: None,
        }
    }
}

/// Why a run was not started (by the API, a webhook or a schedule).
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The request cannot run (unknown agent, template error, no input).
    #[error("{0}")]
    Invalid(String),
    /// The scheduled fire was claimed before (e.g. by an earlier process).
    #[error("this fire was already claimed")]
    AlreadyFired,
    /// The webhook delivery started a run before (within a day).
    #[error("this webhook delivery started a run already")]
    DuplicateDelivery,
    /// The run's end (`after:`) or file version (`watch:`) started a run
    /// before.
    #[error("this run's end or file version started a run already")]
    AlreadyTriggered,
    #[error("aurad is shutting down and accepts no new runs")]
    ShuttingDown,
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Why [`Backend::trigger`] did not start a run.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error("no agent named `{0}`")]
    UnknownAgent(String),
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

/// The answer of [`Backend::cancel`].
#[derive(Debug, Clone, PartialEq)]
pub enum CancelAnswer {
    /// Queued or running; it is being cancelled (it ends `cancelled`).
    Cancelling(RunRecord),
    /// It has already ended (or was never run by this daemon).
    NotRunning(RunRecord),
    NotFound,
}
