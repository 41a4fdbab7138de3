//! Model providers behind one small trait: a normalised request, a streamed
//! answer delivered as deltas plus the assembled turn, and errors typed by
//! what the caller does next (retry or fail). May depend on `types` only.

pub mod anthropic;
#[doc(hidden)]
pub mod decode;
pub mod gemini;
mod http;
pub mod limits;
pub mod openai;
pub mod openai_responses;
pub mod retry;
pub mod test_model;
pub mod text_tools;

use std::time::Duration;

use futures::future::BoxFuture;

use crate::types::{Message, RetryReason, ToolCall, ToolSpec, Usage};

/// The longest wait for a provider's answer head, or between two pieces of
/// its answer, before the call is cut as idle and retried. Generous: a
/// local model may think long before its first token.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// What the engine asks of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The model name as the provider knows it (no `provider/` prefix).
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// The JSON Schema the final answer must match (the agent's
    /// `output_schema`), for providers with a native structured-output or
    /// JSON mode. The engine validates the answer whatever the provider did.
    pub output_schema: Option<serde_json::Value>,
    /// The prompt-cache key of the call (the agent's name): a provider
    /// built with prompt caching on marks what to cache (Anthropic
    /// `cache_control` breakpoints) or sends it (OpenAI
    /// `prompt_cache_key`); `None`: nothing to cache under.
    pub cache_key: Option<String>,
}

/// A piece of a streamed answer, delivered as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Text(String),
    Reasoning(String),
}

/// One complete model answer, assembled from the stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTurn {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub finish_reason: Option<String>,
    /// The answer's id as the provider gave it (for traces).
    pub response_id: Option<String>,
    /// The model that answered, as the provider names it (may be more
    /// precise than the one asked for: a dated version).
    pub response_model: Option<String>,
    /// What the wire format needs back with this answer in later requests
    /// (OpenAI Responses reasoning items), opaque to the engine, which
    /// keeps it on the answer's [`Message::Assistant`]; `None` for the
    /// formats that need nothing.
    pub provider_items: Option<serde_json::Value>,
}

/// Which answer it was and which model gave it, as the first piece of the
/// stream that names them says (for traces).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AnswerIdentity {
    pub id: Option<String>,
    pub model: Option<String>,
}

impl AnswerIdentity {
    /// Notes `value[id_key]` and `value[model_key]` unless already known.
    pub fn note(&mut self, value: &serde_json::Value, id_key: &str, model_key: &str) {
        let text = |key: &str| {
            value
                .get(key)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        if self.id.is_none() {
            self.id = text(id_key);
        }
        if self.model.is_none() {
            self.model = text(model_key);
        }
    }
}

/// Why a model stopped before a whole answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlyStop {
    /// The answer reached its output token limit.
    OutputLimit,
    /// The provider's safety or content filter stopped it.
    Filtered,
}

impl ModelTurn {
    /// Whether the answer was cut short, by its finish reason. Each
    /// provider names the reasons its own way: OpenAI `length` and
    /// `content_filter`, Anthropic `max_tokens` and `refusal`, Gemini
    /// `MAX_TOKENS`, `SAFETY` and its other blocking reasons.
    pub fn early_stop(&self) -> Option<EarlyStop> {
        match self.finish_reason.as_deref()? {
            "length" | "max_tokens" | "MAX_TOKENS" => Some(EarlyStop::OutputLimit),
            "content_filter" | "refusal" | "SAFETY" | "RECITATION" | "BLOCKLIST"
            | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => Some(EarlyStop::Filtered),
            _ => None,
        }
    }
}

/// Why a model call failed, sorted by what the caller does about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// Could not connect or the connection broke before an answer started:
    /// retry.
    #[error("connection error: {0}")]
    Connect(String),
    /// The provider answered with an error status. 408, 409, 429 and 5xx
    /// (Anthropic's 529 included) are retried, honouring `retry_after`;
    /// other statuses fail at once.
    #[error("HTTP {status}: {message}")]
    Status {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The answer stream was cut: it broke, ended before its end marker,
    /// went idle, or carried a chunk that is not JSON. Retried: the engine
    /// runs tools only after an answer ended whole, so re-sending the call
    /// repeats no side effect.
    #[error("{kind}: {detail}")]
    Cut { kind: CutKind, detail: String },
    /// The provider reported an error inside the stream, or sent an answer
    /// that parses but cannot be used: fail.
    #[error("bad response stream: {0}")]
    Stream(String),
    /// The provider is not usable as configured (missing key, bad URL): fail.
    #[error("{0}")]
    Config(String),
    /// A retryable error that was not retried any more, and why (a
    /// `Retry-After` that does not fit in the run's time left, no time left
    /// for another attempt, no attempts left).
    #[error("{last} ({why})")]
    GaveUp {
        last: Box<ProviderError>,
        why: String,
    },
}

/// How an answer stream was cut ([`ProviderError::Cut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutKind {
    /// The connection broke mid-answer.
    Broken,
    /// The stream ended cleanly but before the answer's end marker.
    EndedEarly,
    /// Nothing arrived within the provider's idle timeout.
    Idle,
    /// An event's data was not JSON.
    InvalidChunk,
}

impl std::fmt::Display for CutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CutKind::Broken => "answer stream broken",
            CutKind::EndedEarly => "answer stream ended early",
            CutKind::Idle => "provider went idle",
            CutKind::InvalidChunk => "invalid JSON in the answer stream",
        })
    }
}

impl ProviderError {
    /// A cut answer stream of `kind`.
    pub fn cut(kind: CutKind, detail: impl Into<String>) -> ProviderError {
        ProviderError::Cut {
            kind,
            detail: detail.into(),
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.retry_reason().is_some()
    }

    /// Why this error is worth another attempt, or `None` when it is not.
    pub fn retry_reason(&self) -> Option<RetryReason> {
        match self {
            ProviderError::Connect(_) => Some(RetryReason::Connection),
            ProviderError::Status { status, .. } => (*status >= 500
                || matches!(*status, 408 | 409 | 429))
            .then_some(RetryReason::Status),
            ProviderError::Cut { kind, .. } => Some(match kind {
                CutKind::Broken | CutKind::EndedEarly => RetryReason::StreamCut,
                CutKind::Idle => RetryReason::Idle,
                CutKind::InvalidChunk => RetryReason::InvalidChunk,
            }),
            ProviderError::Stream(_) | ProviderError::Config(_) | ProviderError::GaveUp { .. } => {
                None
            }
        }
    }

    /// The wait the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Status { retry_after, .. } => *retry_after,
            ProviderError::GaveUp { last, .. } => last.retry_after(),
            _ => None,
        }
    }
}

/// A model provider. One call = one streamed model answer; retries live in
/// [`retry`], outside the providers.
pub trait Provider: Send + Sync {
    /// Streams one answer, calling `on_delta` for each piece of text as it
    /// arrives, and returns the assembled turn.
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>>;
}

/// `value` as a JSON number through its shortest decimal form, so 0.2f32 is
/// sent as 0.2 and not as 0.20000000298023224; `None` for NaN or infinity.
fn shortest_decimal(value: f32) -> Option<serde_json::Value> {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(serde_json::Value::Number)
}

/// For the stream assemblers' tests: `err` says `want`, and is a cut
/// (retried) when the stream had no end or carried data that is not JSON,
/// else a stream error (an answer that parses but cannot be used: not
/// retried).
#[cfg(test)]
pub(crate) fn assert_stream_error(err: &ProviderError, want: &str) {
    let m = err.to_string();
    assert!(m.contains(want), "{m:?} lacks {want:?}");
    let cut = [
        "ended",
        "without any candidate",
        "before message_stop",
        "JSON",
    ]
    .iter()
    .any(|w| want.contains(w));
    if cut {
        assert!(matches!(err, ProviderError::Cut { .. }), "{err:?}");
    } else {
        assert!(matches!(err, ProviderError::Stream(_)), "{err:?}");
    }
}
