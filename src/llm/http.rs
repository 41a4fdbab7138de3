//! HTTP plumbing shared by the providers: sending with an idle timeout,
//! send errors sorted into connection and configuration problems, answer
//! streams read with an idle timeout and their cuts typed
//! ([`ProviderError::Cut`]), the provider's own error text from an error
//! body, `Retry-After` (delta-seconds or any HTTP date of RFC 9110). May
//! depend on `llm` only.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde_json::Value;

use super::{CutKind, Delta, ModelTurn, ProviderError};

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

/// Sends the request; no answer head within `idle` is a
/// [`CutKind::Idle`] cut, any other failure a [`send_error`].
pub(super) async fn send(
    builder: reqwest::RequestBuilder,
    idle: Duration,
) -> Result<reqwest::Response, ProviderError> {
    match tokio::time::timeout(idle, builder.send()).await {
        Ok(sent) => sent.map_err(send_error),
        Err(_) => Err(ProviderError::cut(
            CutKind::Idle,
            format!("no answer within the idle timeout of {}", format_secs(idle)),
        )),
    }
}

/// `1.5s`, `300s`.
fn format_secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
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
/// error with that text; other data that is not JSON is a
/// [`CutKind::InvalidChunk`] cut naming `what` the event carries.
pub(super) fn event_json(event: &str, data: &str, what: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(data).map_err(|e| {
        if event == "error" {
            ProviderError::Stream(truncate(data))
        } else {
            invalid_chunk(what, &e, data)
        }
    })
}

/// Data that is not JSON where JSON was due: a garbled chunk, retried like
/// a cut stream (a proxy's garbling is transient in practice; a provider
/// that always garbles still fails once the run's time is spent).
pub(super) fn invalid_chunk(what: &str, e: &serde_json::Error, data: &str) -> ProviderError {
    ProviderError::cut(
        CutKind::InvalidChunk,
        format!("invalid {what} JSON ({e}): {}", truncate(data)),
    )
}

/// Sends the request and reads its answer with the assembler `A`: an
/// error status is a [`status_error`], a success the turn [`read_turn`]
/// reads.
pub(super) async fn stream_turn<A: Assemble>(
    builder: reqwest::RequestBuilder,
    idle: Duration,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelTurn, ProviderError> {
    let response = send(builder, idle).await?;
    if !response.status().is_success() {
        return Err(status_error(response).await);
    }
    read_turn::<A>(response, idle, on_delta).await
}

/// Reads a successful `response` into a turn with the assembler `A`,
/// streamed or whole; a gap of more than `idle` between two pieces of the
/// body is a [`CutKind::Idle`] cut.
pub(super) async fn read_turn<A: Assemble>(
    response: reqwest::Response,
    idle: Duration,
    on_delta: &mut (dyn FnMut(Delta) + Send),
) -> Result<ModelTurn, ProviderError> {
    let mut events = match answer(response, idle).await? {
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
/// stream. A connection broken mid-stream is a [`CutKind::Broken`] cut, a
/// body silent for `idle` a [`CutKind::Idle`] one, bytes that are not SSE
/// a [`CutKind::InvalidChunk`] one.
async fn answer(response: reqwest::Response, idle: Duration) -> Result<Answer, ProviderError> {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
    if is_json {
        let body = match tokio::time::timeout(idle, response.text()).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Err(body_error(BodyError::Read(e))),
            Err(_) => return Err(body_error(BodyError::Idle(idle))),
        };
        let value =
            serde_json::from_str(&body).map_err(|e| invalid_chunk("response", &e, &body))?;
        return Ok(Answer::Whole(value));
    }
    let events = idle_bounded(response, idle).eventsource().map(|event| {
        event.map(|e| (e.event, e.data)).map_err(|e| match e {
            eventsource_stream::EventStreamError::Transport(e) => body_error(e),
            other => ProviderError::cut(CutKind::InvalidChunk, other.to_string()),
        })
    });
    Ok(Answer::Events(events.boxed()))
}

/// Why reading an answer body stopped.
#[derive(Debug)]
enum BodyError {
    Read(reqwest::Error),
    /// Nothing arrived for this long.
    Idle(Duration),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Read(e) => f.write_str(&error_chain(e)),
            BodyError::Idle(idle) => write!(
                f,
                "nothing arrived for the idle timeout of {}",
                format_secs(*idle)
            ),
        }
    }
}

impl std::error::Error for BodyError {}

/// A body read failure as a cut: a read timeout of the HTTP client counts
/// as idle too.
fn body_error(e: BodyError) -> ProviderError {
    let kind = match &e {
        BodyError::Read(read) if read.is_timeout() => CutKind::Idle,
        BodyError::Read(_) => CutKind::Broken,
        BodyError::Idle(_) => CutKind::Idle,
    };
    ProviderError::cut(kind, e.to_string())
}

/// The body's bytes, ending with [`BodyError::Idle`] after a gap of more
/// than `idle`; nothing follows an error.
fn idle_bounded(
    response: reqwest::Response,
    idle: Duration,
) -> impl futures::Stream<Item = Result<impl AsRef<[u8]>, BodyError>> {
    let body = Box::pin(response.bytes_stream());
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(body))),
            Ok(Some(Err(e))) => Some((Err(BodyError::Read(e)), None)),
            Ok(None) => None,
            Err(_) => Some((Err(BodyError::Idle(idle)), None)),
        }
    })
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
    // RFC 9110 HTTP-date: IMF-fixdate, or the obsolete RFC 850 and asctime
    // forms a recipient must still accept. A date in the past: no wait.
    let date = httpdate::parse_http_date(value).ok()?;
    Some(
        date.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
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
        let later =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
        h.insert(RETRY_AFTER, later.parse().unwrap());
        let wait = parse_retry_after(&h).unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120));
        // The obsolete forms RFC 9110 still asks recipients to accept.
        for old in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            h.insert(RETRY_AFTER, old.parse().unwrap());
            assert_eq!(parse_retry_after(&h), Some(Duration::ZERO), "{old}");
        }
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(parse_retry_after(&h), None);
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(250)));
    }
}
