//! `GET /v1/memory` (the long-term memory namespaces with their sizes) and
//! `GET /v1/memory/{namespace}` (its memories, most recently updated first,
//! `?limit=`), each with its provenance: the run that last wrote it
//! (`run_id`), when, and its metadata. Read only: memories are written by
//! runs and `aurad memory`.
//!
//! Depends on the `Backend` (`memory_namespaces`, `memories`) and the limit
//! parsing of `runs`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::runs::parse_limit;
use super::{Api, ApiError, Param};

pub(super) async fn namespaces(State(api): State<Api>) -> Result<Response, ApiError> {
    let namespaces = api.daemon.memory_namespaces().await?;
    Ok(axum::Json(json!({ "namespaces": namespaces })).into_response())
}

pub(super) async fn list(
    State(api): State<Api>,
    Param(namespace): Param,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut limit = parse_limit("")?;
    for (key, value) in &pairs {
        match key.as_str() {
            "limit" => limit = parse_limit(value.trim())?,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`: GET /v1/memory/{{namespace}} takes limit"
                )));
            }
        }
    }
    let known = api.daemon.memory_namespaces().await?;
    if !known.iter().any(|ns| ns.name == namespace) {
        return Err(ApiError::not_found(format!(
            "no memory namespace `{namespace}`: GET /v1/memory lists them"
        )));
    }
    let memories = api.daemon.memories(&namespace, limit).await?;
    Ok(axum::Json(json!({ "namespace": namespace, "memories": memories })).into_response())
}
