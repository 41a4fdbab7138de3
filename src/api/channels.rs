//! `POST /channels/{name}`: the requests of chat platforms to a channel in
//! webhook mode (Telegram's updates, Slack's Events API, Discord's
//! interactions). The channel's platform checks the request's signature or
//! secret header and says what to answer; no bearer token (the platform
//! cannot send one) and no guard against web pages (the signature is the
//! authentication, as for `/hooks`).
//!
//! Depends on the `Backend` (`channel_webhook`).

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Api, ApiError, Param, read_body};

pub(super) async fn deliver(
    State(api): State<Api>,
    Param(name): Param,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = read_body(body)?;
    let headers = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let answer = api
        .daemon
        .channel_webhook(&name, headers, body.to_vec())
        .await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, answer.body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    Ok(response)
}
