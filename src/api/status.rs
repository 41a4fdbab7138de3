//! `GET /v1/status`: what the configuration loaded and what it left out or
//! kept stale, and why (see `daemon::status`).
//!
//! Depends on `daemon` only.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::Api;

pub(super) async fn show(State(api): State<Api>) -> Response {
    let snapshot = api.daemon.snapshot();
    let states = api.daemon.mcp_states();
    axum::Json(crate::daemon::status::status(&snapshot, &states)).into_response()
}
