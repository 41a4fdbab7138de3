//! `POST /v1/runs/{id}/approval`: a person decides on the tool call a run
//! waits on, `{"approve": true}` or `{"approve": false, "reason": "..."}`.
//! 200 with the decided approval; 404 for no such run; 409 when the run is
//! not waiting for approval or its call was decided already (a decision is
//! made once). Guarded like every state-changing route (`guard`).
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
    approve: bool,
    reason: Option<String>,
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
        .decide_approval(&run.id, body.approve, body.reason)
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
