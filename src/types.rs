//! Plain shared data with no I/O: messages, tool specs and calls, usage, run
//! states and the `RunEvent` stream the engine emits, and validated values
//! that several layers share: a parsed cron expression ([`CronSchedule`],
//! pure time math), `on_missed`. Every module may use it; it depends on
//! nothing of ours.

use serde::{Deserialize, Serialize};

pub mod approval;
mod channel_status;
pub mod cron;
#[cfg(test)]
mod cron_tests;
mod database;
mod gate_status;
mod mcp_state;
pub mod memory;
pub mod plugin;
mod schedule_id;
pub mod timestamp;
mod trigger;
pub use channel_status::{ChannelStatus, Connection};
pub use cron::CronSchedule;
pub use database::{Database, DatabaseUrl};
pub use gate_status::{GateLimits, GateStatus};
pub use mcp_state::McpState;
pub use schedule_id::ScheduleId;
pub use trigger::Trigger;

/// A tool as the model sees it: a name, a description and the JSON Schema of
/// its arguments (always `type: object`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// One tool call requested by the model. `arguments` is the raw JSON text the
/// model produced; it is parsed and validated only when the call is executed,
/// so a malformed call can be reported back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of the conversation sent to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// What the wire format that gave this answer needs back with it in
        /// later requests, opaque to everything else (the reasoning items
        /// of an OpenAI Responses answer, which a stateless conversation
        /// must send again before the answer's calls). Kept in the
        /// conversation, and so in a session's stored messages, so a later
        /// turn can send it. Other wire formats ignore it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_items: Option<serde_json::Value>,
    },
    Tool {
        tool_call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with nothing for the provider to carry.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant {
            content: content.into(),
            tool_calls,
            provider_items: None,
        }
    }

    /// The text of the message (for assistant messages, without tool calls).
    pub fn content(&self) -> &str {
        match self {
            Message::System { content }
            | Message::User { content }
            | Message::Assistant { content, .. }
            | Message::Tool { content, .. } => content,
        }
    }
}

/// Token usage of one model call or of a whole run. `None` fields were not
/// reported by the provider: unknown is not zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// The part of `input_tokens` read from the provider's prompt cache
    /// (billed at a lower price), where the provider reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
}

impl Usage {
    /// Adds `other` into `self`; a field stays unknown only while every part
    /// so far is unknown.
    pub fn add(&mut self, other: &Usage) {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }
        }
        self.input_tokens = sum(self.input_tokens, other.input_tokens);
        self.output_tokens = sum(self.output_tokens, other.output_tokens);
        self.cached_input_tokens = sum(self.cached_input_tokens, other.cached_input_tokens);
    }

    /// Input plus output tokens, counting unknown parts as zero.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.unwrap_or(0) + self.output_tokens.unwrap_or(0)
    }
}

/// What a model costs, in US dollars per million tokens (`prices:` in
/// `aurad.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Input read from the prompt cache; `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
}

impl Price {
    /// The cost of `usage`, or `None` when a token count it needs is
    /// unknown (unknown is not zero).
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        let input = usage.input_tokens? as f64;
        let output = usage.output_tokens? as f64;
        let cached = (usage.cached_input_tokens.unwrap_or(0) as f64).min(input);
        let cached_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        Some(
            ((input - cached) * self.input_per_mtok
                + cached * cached_price
                + output * self.output_per_mtok)
                / 1e6,
        )
    }
}

/// The states of a run: `queued -> running -> succeeded | failed |
/// cancelled | timed_out | budget_exceeded | interrupted`, and
/// `waiting_approval` between; `skipped` and `missed` are recorded without
/// running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Running,
    /// Paused before a tool call matching the agent's `approve:` until a
    /// person (or `approval_timeout`) decides; holds no concurrency slot.
    WaitingApproval,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
    BudgetExceeded,
    Interrupted,
    Skipped,
    Missed,
}

impl RunState {
    pub const ALL: [RunState; 11] = [
        RunState::Queued,
        RunState::Running,
        RunState::WaitingApproval,
        RunState::Succeeded,
        RunState::Failed,
        RunState::Cancelled,
        RunState::TimedOut,
        RunState::BudgetExceeded,
        RunState::Interrupted,
        RunState::Skipped,
        RunState::Missed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::WaitingApproval => "waiting_approval",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
            RunState::TimedOut => "timed_out",
            RunState::BudgetExceeded => "budget_exceeded",
            RunState::Interrupted => "interrupted",
            RunState::Skipped => "skipped",
            RunState::Missed => "missed",
        }
    }

    pub fn parse(s: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// True once the run can no longer change.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            RunState::Queued | RunState::Running | RunState::WaitingApproval
        )
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one pipeline step (or one `for_each` item of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    Running,
    Succeeded,
    Failed,
    /// Its `when:` was false, or the pipeline ended before it started.
    Skipped,
}

impl StepState {
    pub const ALL: [StepState; 5] = [
        StepState::Pending,
        StepState::Running,
        StepState::Succeeded,
        StepState::Failed,
        StepState::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Pending => "pending",
            StepState::Running => "running",
            StepState::Succeeded => "succeeded",
            StepState::Failed => "failed",
            StepState::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<StepState> {
        StepState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// True once the step can no longer change.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            StepState::Succeeded | StepState::Failed | StepState::Skipped
        )
    }
}

impl std::fmt::Display for StepState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `sandbox:` of an agent: what the processes started for its tools
/// (`bash`, `tools.d` commands) may write. Ordered from the loosest to the
/// strictest (each mode allows a subset of the writes of the one before),
/// so the strictest of two is their `max`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No restriction: the daemon user's full power.
    #[default]
    None,
    /// Nothing under the project root is writable; paths outside it are.
    ReadOnlyProject,
    /// Only the run's scratch directory is writable (and a few devices
    /// such as `/dev/null`); the project stays readable.
    Workdir,
}

impl SandboxMode {
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::None,
        SandboxMode::ReadOnlyProject,
        SandboxMode::Workdir,
    ];

    /// The word written in `sandbox:`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::None => "none",
            SandboxMode::ReadOnlyProject => "read-only-project",
            SandboxMode::Workdir => "workdir",
        }
    }

    pub fn parse(s: &str) -> Option<SandboxMode> {
        SandboxMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A memory recalled into a run's context, as recorded in its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecalledMemory {
    pub id: i64,
    pub score: f64,
    pub category: String,
    pub content: String,
}

/// Why a model call is retried ([`RunEvent::ModelRetry`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryReason {
    /// No connection, or it broke before the answer started (also the
    /// reason read for retries recorded before reasons were).
    #[default]
    Connection,
    /// The provider answered 408, 409, 429 or 5xx (Anthropic's 529 too).
    Status,
    /// The answer stream broke or ended before its end marker.
    StreamCut,
    /// Nothing arrived from the provider within its idle timeout.
    Idle,
    /// A chunk of the answer stream was not valid JSON (a proxy's garbled
    /// event is transient in practice).
    InvalidChunk,
}

impl RetryReason {
    /// As serialized (metrics and traces label retries with it).
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::Connection => "connection",
            RetryReason::Status => "status",
            RetryReason::StreamCut => "stream_cut",
            RetryReason::Idle => "idle",
            RetryReason::InvalidChunk => "invalid_chunk",
        }
    }
}

/// How a run's skills were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillActivation {
    /// Matched against the input (`skills: auto`).
    Auto,
    /// Named by the agent (`skills: [a, b]`).
    Pinned,
    /// Listed by name and description for the model to load from
    /// (`skills.mode: catalog`); not loaded yet.
    Catalog,
    /// Loaded by the model from the catalog (the tool `load_skill`).
    Loaded,
}

impl std::fmt::Display for SkillActivation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkillActivation::Auto => "auto",
            SkillActivation::Pinned => "pinned",
            SkillActivation::Catalog => "catalog",
            SkillActivation::Loaded => "loaded",
        })
    }
}

/// What the engine tells the world about a run, in order. The CLI renders
/// these, the store persists them (text deltas merged per model turn), tests
/// assert on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Started {
        run_id: String,
        agent: String,
        model: String,
        trigger: Trigger,
        definition_hash: String,
        input: String,
    },
    /// Long-term memories put ahead of the input, and why (their scores).
    MemoryRecalled {
        namespace: String,
        memories: Vec<RecalledMemory>,
    },
    /// Skills added to the context after the system prompt (`auto`,
    /// `pinned`), listed there as a catalog (`catalog`), or loaded from it
    /// by the model during the run (`loaded`, right after its
    /// `load_skill` call).
    SkillsActivated {
        skills: Vec<String>,
        how: SkillActivation,
    },
    /// Streamed answer text.
    TextDelta { text: String },
    /// Streamed reasoning ("thinking") text, where the model reports it.
    ReasoningDelta { text: String },
    /// A model call failed with a retryable error and will be tried again
    /// (the whole call is re-sent: the engine runs tools only once a
    /// model's answer has ended whole, so no tool of this turn has run).
    ModelRetry {
        /// The failed attempt, 1-based.
        attempt: u32,
        delay_ms: u64,
        error: String,
        /// What went wrong, by kind.
        #[serde(default)]
        reason: RetryReason,
        /// Text or reasoning of the failed attempt had already been
        /// streamed: it is discarded, and the answer starts over (the
        /// final answer holds only the retried attempt's text).
        #[serde(default)]
        discarded_output: bool,
    },
    /// A model call failed for a reason the agent's model chain names, and
    /// it goes on with the next model of the chain (no tool of the turn
    /// had run: tools run only once an answer has ended whole). The rest
    /// of the run stays on `to`.
    ModelFallback {
        /// `provider/model` of the model that failed, and of the next.
        from: String,
        to: String,
        reason: FallbackReason,
        error: String,
    },
    /// A model call waited for its turn under the provider's shared limits
    /// (requests at once, per minute, tokens per minute, a 429's pause).
    LimitWait {
        /// The provider's name in aurad.yaml.
        provider: String,
        waited_ms: u64,
    },
    /// Messages were dropped from the context to fit the token budget.
    ContextTrimmed {
        dropped_messages: usize,
        estimated_tokens: usize,
        budget: usize,
    },
    /// A session's oldest messages were replaced by a summary the model
    /// wrote (`history: compact`), so the history fits the budget.
    HistoryCompacted {
        /// How many stored messages the new summary stands for, besides
        /// the earlier summary it replaces.
        summarized_messages: usize,
        /// The seq of the last of them: the history goes on after it.
        through_seq: u64,
        /// The summary as stored.
        summary: String,
        /// The history's estimated tokens before and after.
        estimated_tokens_before: usize,
        estimated_tokens_after: usize,
    },
    /// One model call finished: the end of a model turn.
    Usage {
        iteration: u32,
        #[serde(flatten)]
        usage: Usage,
        /// US dollars, where the model's price is known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// `provider/model` of the call, priced by its own price (a chain
        /// may have answered with another model than the first).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    ToolResult {
        id: String,
        name: String,
        output: String,
        is_error: bool,
        duration_ms: u64,
    },
    /// A tool call waits for a person's decision (`approve:`); the run is
    /// `waiting_approval` until [`RunEvent::ApprovalDecided`].
    ApprovalRequested {
        id: String,
        name: String,
        arguments: String,
        /// When it is denied if nobody decides (`approval_timeout`).
        timeout_at: chrono::DateTime<chrono::Utc>,
    },
    /// The decision on a tool call that waited for approval.
    ApprovalDecided {
        id: String,
        name: String,
        approved: bool,
        by: approval::DecidedBy,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A pipeline step (or one `for_each` item of it, `index`) started an
    /// attempt (1-based; a step cut off by a crash starts again with the
    /// next one).
    StepStarted {
        step: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<usize>,
        attempt: u32,
    },
    /// A pipeline step (or one item of it) ended: `succeeded`, `failed`
    /// (after its last attempt) or `skipped`. An attempt that will be
    /// retried ends with `retrying` set and the error.
    StepFinished {
        step: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<usize>,
        state: StepState,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The attempt failed and another one follows.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        retrying: bool,
        duration_ms: u64,
        #[serde(default)]
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The run of an agent step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child_run_id: Option<String>,
    },
    /// The last event of every run.
    Finished {
        state: RunState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        usage: Usage,
        /// US dollars, where the model's price is known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The final answer as JSON, for agents with an `output_schema`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
    },
}

impl RunEvent {
    /// The `type` tag, as stored in the events table.
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::Started { .. } => "started",
            RunEvent::MemoryRecalled { .. } => "memory_recalled",
            RunEvent::SkillsActivated { .. } => "skills_activated",
            RunEvent::TextDelta { .. } => "text_delta",
            RunEvent::ReasoningDelta { .. } => "reasoning_delta",
            RunEvent::ModelRetry { .. } => "model_retry",
            RunEvent::ModelFallback { .. } => "model_fallback",
            RunEvent::LimitWait { .. } => "limit_wait",
            RunEvent::ContextTrimmed { .. } => "context_trimmed",
            RunEvent::HistoryCompacted { .. } => "history_compacted",
            RunEvent::Usage { .. } => "usage",
            RunEvent::ToolCall { .. } => "tool_call",
            RunEvent::ToolResult { .. } => "tool_result",
            RunEvent::ApprovalRequested { .. } => "approval_requested",
            RunEvent::ApprovalDecided { .. } => "approval_decided",
            RunEvent::StepStarted { .. } => "step_started",
            RunEvent::StepFinished { .. } => "step_finished",
            RunEvent::Finished { .. } => "finished",
        }
    }
}

/// Why a model call moves on to the next model of its chain
/// (`fallback_on:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    /// No connection, or the answer stream broke or went idle, after the
    /// retries the model was given.
    Unreachable,
    /// 5xx answers after the retries.
    ServerError,
    /// 429 answers whose retries no longer fit.
    RateLimited,
    /// The request is longer than the model's context window.
    ContextLength,
}

impl FallbackReason {
    pub const ALL: [FallbackReason; 4] = [
        FallbackReason::Unreachable,
        FallbackReason::ServerError,
        FallbackReason::RateLimited,
        FallbackReason::ContextLength,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::Unreachable => "unreachable",
            FallbackReason::ServerError => "server_error",
            FallbackReason::RateLimited => "rate_limited",
            FallbackReason::ContextLength => "context_length",
        }
    }

    pub fn parse(s: &str) -> Option<FallbackReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// `on_missed`: what to do with fires missed while the daemon was down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMissed {
    /// Run once, for the newest missed fire within `catch_up` (default).
    #[default]
    Latest,
    /// Run each missed fire within `catch_up` (the newest `scheduler::MAX_CATCH_UP_RUNS`).
    All,
    /// Run none; record them all as missed.
    Skip,
}
