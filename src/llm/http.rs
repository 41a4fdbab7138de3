//! HTTP plumbing shared by the providers: send errors sorted into
//! connection and configuration problems, the provider's own error text
//! from an error body, `Retry-After`. May depend on `llm` only.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde_json::Value;

use super::{Delta, ModelTurn, ProviderError};

/// How much of a non-JSON error body is kept in the error message.
const MAX_ERROR_BODY_CHARS: usize = 500;

/// A send error: a bad URL is a configuration problem, anything else
/// (DNS, refused, TLS, timeout before the answer) a connection error.
pub(super) fn send_error(e: reqwest::Error) -> ProviderError {
    if e.is_builder() {
        ProviderError::Config(format!("invalid request: {}", error_chain(&e)))
    } else {
        ProviderError::Connect(error_chain(&e))
    }
}

/// Whether the stream goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    More,
    Done,
}

/// How one wire format assembles an answer (its `stream` module).
pub(super) trait Assemble: Default {
    /// One server-sent event: its name (`message` unless named) and data,
    /// trimmed and never blank (see [`Assemble::feed`]).
    fn push_event(
        &mut self,
        name: &str,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError>;
    /// Feeds one server-sent event: blank data (keep-alives) is skipped,
    /// the rest goes to [`Assemble::push_event`] trimmed.
    fn feed(
        &mut self,
        name: &str,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Flow::More);
        }
        self.push_event(name, data, on_delta)
    }
    /// The turn, once the stream has ended.
    fn finish(self) -> Result<ModelTurn, ProviderError>;
    /// A whole answer sent as one JSON document.
    fn parse_full(
        value: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError>;
}

/// An event's data as JSON. An `error` event whose data is not JSON is an
/// error with that text; other bad data names `what` the event carries.
pub(super) fn event_json(event: &str, data: &str, what: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(data).map_err(|e| {
        if event == "error" {
            ProviderError::Stream(truncate(data))
        } else {
            ProviderError::Stream(format!("invalid {what} JSON ({e}): {}", truncate(data)))
        }
    })
}

/// Reads a successful `response` into a turn with the assembler `A`,
/// streamed or whole.
pub(super) async fn read_turn<A: Assemble>(
    response: reqwest::Response,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelTurn, ProviderError> {
    let mut events = match answer(response).await? {
        Answer::Whole(value) => return A::parse_full(&value, on_delta),
        Answer::Events(events) => events,
    };
    let mut assembler = A::default();
    while let Some(event) = events.next().await {
        let (name, data) = event?;
        if assembler.feed(&name, &data, on_delta)? == Flow::Done {
            break;
        }
    }
    assembler.finish()
}

/// A successful answer, as it came.
enum Answer {
    /// One JSON document: the server (a proxy, say) ignored `stream: true`.
    Whole(Value),
    /// Server-sent events as (event name, data).
    Events(BoxStream<'static, Result<(String, String), ProviderError>>),
}

/// Reads a successful `response` as one JSON document or as an event
/// stream. A connection broken mid-stream is a [`ProviderError::Connect`]
/// (retried like one that never opened; the retry layer refuses once text
/// was shown), malformed SSE a [`ProviderError::Stream`].
async fn answer(response: reqwest::Response) -> Result<Answer, ProviderError> {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
    if is_json {
        let body = response
            .text()
            .await
            .map_err(|e| ProviderError::Stream(error_chain(&e)))?;
        let value = serde_json::from_str(&body)
            .map_err(|e| ProviderError::Stream(format!("invalid JSON response: {e}")))?;
        return Ok(Answer::Whole(value));
    }
    let events = response.bytes_stream().eventsource().map(|event| {
        event.map(|e| (e.event, e.data)).map_err(|e| match e {
            eventsource_stream::EventStreamError::Transport(e) => {
                ProviderError::Connect(format!("stream broken: {}", error_chain(&e)))
            }
            other => ProviderError::Stream(other.to_string()),
        })
    });
    Ok(Answer::Events(events.boxed()))
}

/// A non-success answer as a [`ProviderError::Status`], with the
/// provider's own error text and its `Retry-After`.
pub(super) async fn status_error(response: reqwest::Response) -> ProviderError {
    let status = response.status();
    let retry_after = parse_retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    ProviderError::Status {
        status: status.as_u16(),
        message: error_message(&body, status.canonical_reason()),
        retry_after,
    }
}

/// The error and its sources, joined: reqwest's own message alone is
/// usually "error sending request for url (...)".
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The provider's own error text from an error body.
pub(super) fn error_message(body: &str, reason: Option<&str>) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body)
        && let Some(text) = error_text(&value)
    {
        return text;
    }
    let body = body.trim();
    if body.is_empty() {
        reason.unwrap_or("no error text").to_string()
    } else {
        truncate(body)
    }
}

/// `{"error":{"message":..}}`, `{"error":".."}`, `{"message":..}` or
/// `{"detail":..}`.
pub(super) fn error_text(value: &Value) -> Option<String> {
    let err = value.get("error");
    let text = err
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| err.and_then(Value::as_str))
        .or_else(|| value.get("message").and_then(Value::as_str))
        .or_else(|| value.get("detail").and_then(Value::as_str))?;
    Some(text.to_string())
}

/// `Retry-After` in seconds or as an HTTP date, or OpenAI's
/// `retry-after-ms`.
pub(super) fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && (0.0..1e12).contains(&ms)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && (0.0..1e9).contains(&secs))
            .then(|| Duration::from_secs_f64(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// Cuts text to [`MAX_ERROR_BODY_CHARS`] characters.
pub(super) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_and_retry_after() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad model"}}"#, None),
            "bad model"
        );
        assert_eq!(error_message(r#"{"detail":"nope"}"#, None), "nope");
        assert_eq!(error_message("", Some("Bad Gateway")), "Bad Gateway");
        let long = "x".repeat(2000);
        assert_eq!(
            error_message(&long, None).chars().count(),
            MAX_ERROR_BODY_CHARS + 3
        );

        let mut h = HeaderMap::new();
        assert_eq!(parse_retry_after(&h), None);
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(parse_retry_after(&h), Some(Duration::ZERO));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(120)).to_rfc2822();
        h.insert(RETRY_AFTER, later.parse().unwrap());
        let wait = parse_retry_after(&h).unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120));
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(parse_retry_after(&h), None);
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(250)));
    }
}
