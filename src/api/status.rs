//! `GET /v1/status`: what the configuration loaded and what it left out or
//! kept stale, and why, as the [`super::Backend`] reports it.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::Api;

pub(super) async fn show(State(api): State<Api>) -> Response {
    axum::Json(api.daemon.status()).into_response()
}
