//! `GET /v1/runs` (filtered by agent, state and parent run, newest first), `GET
//! /v1/runs/{id}` (an id or a unique prefix of one) and `POST
//! /v1/runs/{id}/cancel`. Also [`find_run`], the run lookup the event
//! stream shares.
//!
//! Depends on the `Backend` (`runs`, `run`, `cancel`) and `store`
//! (`RunFilter`, `RunRecord`, `StoreError`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::CancelAnswer;
use super::{Api, ApiError, Param};
use crate::store::{RunFilter, RunRecord, StoreError};
use crate::types::RunState;

/// Runs listed when `limit` is not given.
const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` accepted.
const MAX_LIMIT: usize = 1000;

pub(super) async fn list(
    State(api): State<Api>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let filter = run_filter(&pairs)?;
    let runs = api.daemon.runs(&filter).await?;
    Ok(axum::Json(json!({ "runs": runs })).into_response())
}

/// The filter of `?agent=&state=&parent=&limit=` (`parent`: the children
/// of that run id); empty values mean "any".
fn run_filter(pairs: &[(String, String)]) -> Result<RunFilter, ApiError> {
    let mut filter = RunFilter {
        limit: DEFAULT_LIMIT,
        ..RunFilter::default()
    };
    for (key, value) in pairs {
        let value = value.trim();
        match key.as_str() {
            "agent" => filter.agent = Some(value.to_string()).filter(|v| !v.is_empty()),
            "parent" => filter.parent = Some(value.to_string()).filter(|v| !v.is_empty()),
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
            "limit" if value.is_empty() => filter.limit = DEFAULT_LIMIT,
            "limit" => {
                filter.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "limit `{value}` is not a number from 1 to {MAX_LIMIT}"
                        ))
                    })?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`: GET /v1/runs takes agent, state, parent and limit"
                )));
            }
        }
    }
    Ok(filter)
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
        let filter = run_filter(&[]).unwrap();
        assert_eq!(
            filter,
            RunFilter {
                parent: None,
                agent: None,
                state: None,
                limit: 50
            }
        );
        let filter = run_filter(&pairs(&[("agent", ""), ("state", ""), ("limit", "")])).unwrap();
        assert_eq!(
            filter,
            RunFilter {
                parent: None,
                agent: None,
                state: None,
                limit: 50
            }
        );
    }

    #[test]
    fn filters_read_agent_state_parent_and_limit() {
        let filter = run_filter(&pairs(&[
            ("agent", "a"),
            ("parent", "run-1"),
            ("state", "timed_out"),
            ("limit", "1000"),
        ]))
        .unwrap();
        assert_eq!(
            filter,
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
        let error = run_filter(&pairs(&[("state", "done")])).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert!(
            error
                .message
                .contains("queued, running, waiting_approval, succeeded"),
            "{}",
            error.message
        );
        for limit in ["0", "1001", "-1", "ten"] {
            let error = run_filter(&pairs(&[("limit", limit)])).unwrap_err();
            assert!(
                error.message.contains("from 1 to 1000"),
                "{}",
                error.message
            );
        }
        let error = run_filter(&pairs(&[("status", "queued")])).unwrap_err();
        assert!(error.message.contains("`status`"), "{}", error.message);
    }
}
