//! `GET /v1/runs` (filtered by agent, state, trigger and parent run, newest
//! first, a page at a time with `limit` and `offset`), `GET
//! /v1/runs/{id}` (an id or a unique prefix of one) and `POST
//! /v1/runs/{id}/cancel`. Also [`find_run`], the run lookup the event
//! stream shares, and the `limit`/`offset` parsing the paged lists share.
//!
//! Depends on the `Backend` (`runs`, `run`, `cancel`) and `store`
//! (`RunFilter`, `RunPage`, `RunRecord`, `StoreError`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::CancelAnswer;
use super::{Api, ApiError, Param};
use crate::store::{RunFilter, RunPage, RunRecord, StoreError};
use crate::types::{RunState, Trigger};

/// Runs listed when `limit` is not given.
pub(super) const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` accepted.
pub(super) const MAX_LIMIT: usize = 1000;

pub(super) async fn list(
    State(api): State<Api>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let page = run_page(&pairs)?;
    let runs = api.daemon.runs(&page).await?;
    Ok(axum::Json(json!({ "runs": runs })).into_response())
}

/// The page of `?agent=&state=&trigger=&parent=&limit=&offset=` (`parent`:
/// the children of that run id); empty values mean "any".
fn run_page(pairs: &[(String, String)]) -> Result<RunPage, ApiError> {
    let mut page = RunPage {
        filter: RunFilter {
            limit: DEFAULT_LIMIT,
            ..RunFilter::default()
        },
        ..RunPage::default()
    };
    let filter = &mut page.filter;
    for (key, value) in pairs {
        let value = value.trim();
        match key.as_str() {
            "agent" => filter.agent = Some(value.to_string()).filter(|v| !v.is_empty()),
            "parent" => filter.parent = Some(value.to_string()).filter(|v| !v.is_empty()),
            "trigger" if value.is_empty() => page.trigger = None,
            "trigger" => {
                let trigger = value
                    .parse::<Trigger>()
                    .map_err(|e| ApiError::bad_request(format!("{e}: GET /v1/runs?trigger=")))?;
                page.trigger = Some(trigger);
            }
            "offset" => page.offset = parse_offset(value)?,
            "state" if value.is_empty() => filter.state = None,
            "state" => {
                let Some(state) = RunState::parse(value) else {
                    let valid: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
                    return Err(ApiError::bad_request(format!(
                        "unknown state `{value}`: use one of {}",
                        valid.join(", ")
                    )));
                };
                filter.state = Some(state);
            }
            "limit" => filter.limit = parse_limit(value)?,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`: GET /v1/runs takes agent, state, trigger, parent, limit and offset"
                )));
            }
        }
    }
    Ok(page)
}

/// A `limit` of 1 to [`MAX_LIMIT`]; empty: [`DEFAULT_LIMIT`].
pub(super) fn parse_limit(value: &str) -> Result<usize, ApiError> {
    if value.is_empty() {
        return Ok(DEFAULT_LIMIT);
    }
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "limit `{value}` is not a number from 1 to {MAX_LIMIT}"
            ))
        })
}

/// An `offset`: how many of the newest to skip (0 or more; empty: 0).
pub(super) fn parse_offset(value: &str) -> Result<usize, ApiError> {
    if value.is_empty() {
        return Ok(0);
    }
    value.parse::<usize>().map_err(|_| {
        ApiError::bad_request(format!(
            "offset `{value}` is not a whole number (0 or more)"
        ))
    })
}

pub(super) async fn show(State(api): State<Api>, Param(id): Param) -> Result<Response, ApiError> {
    let run = find_run(&api, &id).await?;
    Ok(axum::Json(run).into_response())
}

/// The run with this id or unique id prefix: 404 when there is none, 400
/// when the prefix is ambiguous.
pub(super) async fn find_run(api: &Api, id: &str) -> Result<RunRecord, ApiError> {
    match api.daemon.run(id).await {
        Ok(Some(run)) => Ok(run),
        Ok(None) => Err(unknown_run(id)),
        // Too short to be looked up as a prefix: no such run.
        Err(StoreError::Invalid(message)) => Err(ApiError::not_found(message)),
        Err(e) => Err(e.into()),
    }
}

fn unknown_run(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no run has the id `{id}`: GET /v1/runs lists the runs"
    ))
}

pub(super) async fn cancel(State(api): State<Api>, Param(id): Param) -> Result<Response, ApiError> {
    // Resolve a prefix first, so the 404 and 400 answers match `show`.
    let run = find_run(&api, &id).await?;
    match api.daemon.cancel(&run.id).await {
        Ok(CancelAnswer::Cancelling(run)) => {
            tracing::info!(run = %run.id, agent = %run.agent, "cancelling the run (API)");
            Ok((
                StatusCode::ACCEPTED,
                axum::Json(json!({ "cancelling": true, "run": run })),
            )
                .into_response())
        }
        Ok(CancelAnswer::NotRunning(run)) => Err(not_running(run)),
        Ok(CancelAnswer::NotFound) => Err(unknown_run(&id)),
        Err(StoreError::Invalid(message)) => Err(ApiError::not_found(message)),
        Err(e) => Err(e.into()),
    }
}

/// 409 for a run that is not in flight, with the run.
fn not_running(run: RunRecord) -> ApiError {
    let message = if run.state.is_final() {
        format!("run {} is already {}", run.id, run.state)
    } else {
        format!(
            "run {} is {} but not in flight in this daemon, so there is nothing to cancel",
            run.id, run.state
        )
    };
    let run = serde_json::to_value(&run).unwrap_or_default();
    ApiError::new(StatusCode::CONFLICT, message).with("run", run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn filters_default_to_fifty_of_any_agent_and_state() {
        let page = run_page(&[]).unwrap();
        assert_eq!((page.trigger, page.offset), (None, 0));
        assert_eq!(
            page.filter,
            RunFilter {
                parent: None,
                agent: None,
                state: None,
                limit: 50
            }
        );
        let page = run_page(&pairs(&[
            ("agent", ""),
            ("state", ""),
            ("trigger", ""),
            ("limit", ""),
            ("offset", ""),
        ]))
        .unwrap();
        assert_eq!((page.trigger, page.offset), (None, 0));
        assert_eq!(
            page.filter,
            RunFilter {
                parent: None,
                agent: None,
                state: None,
                limit: 50
            }
        );
    }

    #[test]
    fn filters_read_agent_state_trigger_parent_limit_and_offset() {
        let page = run_page(&pairs(&[
            ("agent", "a"),
            ("parent", "run-1"),
            ("state", "timed_out"),
            ("trigger", "schedule"),
            ("limit", "1000"),
            ("offset", "40"),
        ]))
        .unwrap();
        assert_eq!(page.trigger, Some(Trigger::Schedule));
        assert_eq!(page.offset, 40);
        assert_eq!(
            page.filter,
            RunFilter {
                parent: Some("run-1".into()),
                agent: Some("a".into()),
                state: Some(RunState::TimedOut),
                limit: 1000
            }
        );
    }

    #[test]
    fn bad_filters_say_what_is_valid() {
        let error = run_page(&pairs(&[("state", "done")])).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert!(
            error
                .message
                .contains("queued, running, waiting_approval, succeeded"),
            "{}",
            error.message
        );
        for limit in ["0", "1001", "-1", "ten"] {
            let error = run_page(&pairs(&[("limit", limit)])).unwrap_err();
            assert!(
                error.message.contains("from 1 to 1000"),
                "{}",
                error.message
            );
        }
        let error = run_page(&pairs(&[("status", "queued")])).unwrap_err();
        assert!(error.message.contains("`status`"), "{}", error.message);
        for offset in ["-1", "x", "1.5"] {
            let error = run_page(&pairs(&[("offset", offset)])).unwrap_err();
            assert!(error.message.contains("whole number"), "{}", error.message);
        }
    }
}
