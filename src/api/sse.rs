//! `GET /v1/runs/{id}/events`: a run's events as server-sent events, the
//! stored ones then the live ones, ending after `finished` (or when the API
//! stops). Each event is `event: <kind>`, `data: <RunEvent JSON>` and `id:
//! <seq>`, except text and reasoning deltas, which carry no id: a client's
//! `Last-Event-ID` then stays at the last complete event, and resuming
//! replays the merged text of the turn in progress. Where to resume comes
//! from `Last-Event-ID` or `?after=N`.
//!
//! Depends on the `Backend` (`events`), `types` (`RunEvent`) and the
//! run lookup of `runs`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{Stream, StreamExt};

use super::{Api, ApiError, Param, runs};
use crate::types::RunEvent;

/// How often an idle stream sends a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) async fn events(
    State(api): State<Api>,
    Param(id): Param,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let after = resume_point(&headers, &pairs)?;
    let run = runs::find_run(&api, &id).await?;
    stream_run(&api, &run.id, after).await
}

/// Where to resume: `Last-Event-ID` (what a reconnecting client sends)
/// wins over `?after=`; 0 (from the start) without either.
fn resume_point(headers: &HeaderMap, pairs: &[(String, String)]) -> Result<i64, ApiError> {
    let header = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("?").trim())
        .filter(|v| !v.is_empty());
    if let Some(value) = header {
        return parse_seq(value).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Last-Event-ID `{value}` is not an event id (a whole number, 0 or more)"
            ))
        });
    }
    let mut after = 0;
    for (key, value) in pairs {
        if key != "after" {
            return Err(ApiError::bad_request(format!(
                "unknown query parameter `{key}`: the event stream takes `after` (an event id)"
            )));
        }
        after = parse_seq(value.trim()).ok_or_else(|| {
            ApiError::bad_request(format!(
                "after `{value}` is not an event id (a whole number, 0 or more)"
            ))
        })?;
    }
    Ok(after)
}

fn parse_seq(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().filter(|n| *n >= 0)
}

/// The SSE answer for the events of `run_id` (an exact id) after `after`.
pub(super) async fn stream_run(api: &Api, run_id: &str, after: i64) -> Result<Response, ApiError> {
    let events = api.daemon.events(run_id, after).await?;
    let stream = to_sse(until_finished(events)).take_until(api.stop.clone().cancelled_owned());
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    // Proxies such as nginx would otherwise hold events back.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// The events up to and including the first `finished`.
fn until_finished<S>(events: S) -> impl Stream<Item = (i64, RunEvent)> + Send + 'static
where
    S: Stream<Item = (i64, RunEvent)> + Send + 'static,
{
    events.scan(false, |done, (seq, event)| {
        let item = if *done {
            None
        } else {
            *done = matches!(event, RunEvent::Finished { .. });
            Some((seq, event))
        };
        std::future::ready(item)
    })
}

fn to_sse<S>(events: S) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static
where
    S: Stream<Item = (i64, RunEvent)> + Send + 'static,
{
    events.filter_map(|(seq, event)| std::future::ready(sse_event(seq, &event)))
}

/// One SSE event; deltas carry no id (see the module doc). `None` (and a
/// log line) if the event cannot be encoded, which a `RunEvent` never fails.
fn sse_event(seq: i64, event: &RunEvent) -> Option<Result<Event, Infallible>> {
    let sse = match Event::default().event(event.kind()).json_data(event) {
        Ok(sse) => sse,
        Err(e) => {
            tracing::error!(seq, kind = event.kind(), "cannot encode a run event: {e}");
            return None;
        }
    };
    let is_delta = matches!(
        event,
        RunEvent::TextDelta { .. } | RunEvent::ReasoningDelta { .. }
    );
    Some(Ok(if is_delta {
        sse
    } else {
        sse.id(seq.to_string())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{RunState, Usage};
    use axum::body::Body;
    use futures::stream;

    fn finished() -> RunEvent {
        RunEvent::Finished {
            state: RunState::Succeeded,
            reason: None,
            output: Some("hi".into()),
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        }
    }

    fn text(t: &str) -> RunEvent {
        RunEvent::TextDelta { text: t.into() }
    }

    async fn render(events: Vec<(i64, RunEvent)>) -> String {
        let stream = to_sse(until_finished(stream::iter(events)));
        let response = Sse::new(stream).into_response();
        let body = axum::body::to_bytes(Body::new(response.into_body()), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn events_carry_kind_json_and_seq_but_deltas_no_id() {
        let text = render(vec![(1, text("he")), (1, text("llo")), (2, finished())]).await;
        let blocks: Vec<&str> = text.split("\n\n").filter(|b| !b.is_empty()).collect();
        assert_eq!(blocks.len(), 3, "{text}");
        assert_eq!(
            blocks[0],
            "event: text_delta\ndata: {\"type\":\"text_delta\",\"text\":\"he\"}"
        );
        assert!(!blocks[1].contains("id:"), "{text}");
        assert!(blocks[2].starts_with("event: finished\n"), "{text}");
        assert!(blocks[2].ends_with("\nid: 2"), "{text}");
    }

    #[tokio::test]
    async fn the_stream_ends_after_finished() {
        let text = render(vec![(1, finished()), (2, text("late"))]).await;
        assert!(!text.contains("late"), "{text}");
    }

    #[test]
    fn the_resume_point_prefers_last_event_id() {
        let after = |id: Option<&str>, query: &[(&str, &str)]| {
            let mut headers = HeaderMap::new();
            if let Some(id) = id {
                headers.insert("last-event-id", HeaderValue::from_str(id).unwrap());
            }
            let pairs: Vec<(String, String)> = query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            resume_point(&headers, &pairs).map_err(|e| e.message)
        };
        assert_eq!(after(None, &[]), Ok(0));
        assert_eq!(after(None, &[("after", "7")]), Ok(7));
        assert_eq!(after(Some("9"), &[("after", "7")]), Ok(9));
        assert_eq!(after(Some(""), &[("after", "3")]), Ok(3));
        assert!(after(Some("x"), &[]).unwrap_err().contains("Last-Event-ID"));
        assert!(
            after(None, &[("after", "-1")])
                .unwrap_err()
                .contains("after")
        );
        assert!(
            after(None, &[("from", "1")])
                .unwrap_err()
                .contains("`from`")
        );
    }
}
