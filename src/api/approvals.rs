//! `POST /v1/runs/{id}/approval`: a person decides on the tool call a run
//! waits on, naming it: `{"call_id": "c1", "approve": true}` or
//! `{"call_id": "c1", "approve": false, "reason": "..."}`. 200 with the
//! decided approval; 404 for no such run; 409 when the run does not wait on
//! that call (not waiting, decided already: a decision is made once, or
//! waiting on another call, which nobody was shown). Guarded like every
//! state-changing route (`guard`).
//!
//! Depends on the `Backend` (`run`, `decide_approval`) and `store`
//! (`StoreError`).

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::runs::find_run;
use super::{Api, ApiError, Param, parse_json, read_body};
use crate::store::StoreError;

/// The body of `POST /v1/runs/{id}/approval`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    /// The call decided: the `id` of the run's `approval_requested` event.
    call_id: String,
    approve: bool,
    reason: Option<String>,
}

/// `GET /v1/approvals`: every run waiting for a person, with the call it
/// waits on (what a decision names), oldest request first.
pub(super) async fn waiting(State(api): State<Api>) -> Result<Response, ApiError> {
    let waiting = api.daemon.waiting_approvals().await?;
    let list: Vec<serde_json::Value> = waiting
        .into_iter()
        .filter(|w| w.approval.decision.is_none())
        .map(|w| {
            json!({
                "run_id": w.run.id,
                "agent": w.run.agent,
                "call_id": w.approval.request.call_id,
                "tool": w.approval.request.tool,
                "arguments": w.approval.request.arguments,
                "requested_at": w.approval.requested_at,
                "timeout_at": w.approval.timeout_at,
            })
        })
        .collect();
    Ok(axum::Json(json!({ "approvals": list })).into_response())
}

pub(super) async fn decide(
    State(api): State<Api>,
    Param(id): Param,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = read_body(body)?;
    let body: DecisionBody = parse_json(&body)?;
    let run = find_run(&api, &id).await?;
    match api
        .daemon
        .decide_approval(&run.id, &body.call_id, body.approve, body.reason)
        .await
    {
        Ok(approval) => {
            tracing::info!(run = %run.id, tool = %approval.request.tool, approved = body.approve, "approval decided (API)");
            Ok(axum::Json(json!({ "approval": approval })).into_response())
        }
        Err(StoreError::Conflict(message)) => Err(ApiError::new(StatusCode::CONFLICT, message)),
        Err(e) => Err(e.into()),
    }
}
