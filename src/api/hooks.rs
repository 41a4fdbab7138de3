//! `POST /hooks/{agent}`: signed webhooks (GitHub's scheme). The body is
//! checked against `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the
//! raw body under the agent's `webhook.secret_env`, in constant time; each
//! delivery id (`X-GitHub-Delivery` or `X-Delivery-Id`) starts at most one
//! run (the id is remembered in the transaction that claims the run, so a
//! delivery refused before its run was claimed, e.g. during shutdown, can
//! be delivered again and then runs); the JSON body becomes the run's `payload` (`{{ payload }}` in the
//! agent's prompt). No bearer token: the signature is the authentication.
//!
//! Depends on `daemon` (`Daemon::webhook_secret`, `trigger`), `hmac` and
//! `sha2`.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::agents::trigger_error;
use super::{Api, ApiError, Param, accepted, read_body};
use crate::daemon::{SubmitError, Trigger, TriggerError};

const SIGNATURE_HEADER: &str = "x-hub-signature-256";
const DELIVERY_HEADERS: [&str; 2] = ["x-github-delivery", "x-delivery-id"];
/// The longest delivery id accepted.
const MAX_DELIVERY_ID: usize = 200;

pub(super) async fn deliver(
    State(api): State<Api>,
    Param(agent): Param,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let secret = match api.daemon.webhook_secret(&agent) {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(ApiError::not_found(format!(
                "no webhook for `{agent}`: the agent does not exist or has no `webhook: {{ secret_env: VAR }}`"
            )));
        }
        Err(message) => return Err(ApiError::internal(message)),
    };
    let body = read_body(body)?;
    verify_signature(secret.as_bytes(), &headers, &body)?;
    let delivery = delivery_id(&headers)?;
    let payload: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the webhook body must be JSON: {e}")))?;
    let trigger = Trigger {
        payload: Some(payload),
        trigger: "webhook".into(),
        delivery: Some(delivery.clone()),
        ..Trigger::default()
    };
    let run = match api.daemon.trigger(&agent, trigger).await {
        Ok(run) => run,
        Err(TriggerError::Submit(SubmitError::DuplicateDelivery)) => {
            tracing::info!(agent = %agent, delivery = %delivery, "webhook delivery seen before; not run again");
            return Ok((
                StatusCode::OK,
                axum::Json(json!({ "duplicate": true, "delivery": delivery })),
            )
                .into_response());
        }
        Err(e) => return Err(trigger_error(e)),
    };
    tracing::info!(agent = %agent, run = %run.id, delivery = %delivery, "webhook started a run");
    Ok(accepted(&run))
}

/// The daemon-free checks of a webhook request, in the order `deliver`
/// runs them: the signature of `body` under `secret`, then the delivery id.
/// `Ok(delivery id)`, or the refusal's HTTP status and message. For the fuzz
/// targets and property tests; behaves exactly as the route.
#[doc(hidden)]
pub fn check_request(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<String, (u16, String)> {
    verify_signature(secret, headers, body)
        .and_then(|()| delivery_id(headers))
        .map_err(|e| (e.status.as_u16(), e.message))
}

/// Checks `X-Hub-Signature-256` against the body: 401 when it is missing,
/// malformed or wrong.
fn verify_signature(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, message);
    let Some(value) = headers.get(SIGNATURE_HEADER) else {
        return Err(unauthorized(
            "X-Hub-Signature-256 is missing: sign the raw body with HMAC-SHA256 under the agent's webhook secret and send `sha256=<hex>`",
        ));
    };
    let signature = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().strip_prefix("sha256="))
        .and_then(decode_hex)
        .ok_or_else(|| unauthorized("X-Hub-Signature-256 must be `sha256=<hex digest>`"))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret)
        .map_err(|e| ApiError::internal(format!("cannot use the webhook secret: {e}")))?;
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&signature).map_err(|_| {
        unauthorized("X-Hub-Signature-256 does not match the body: sign the raw body with the agent's webhook secret")
    })
}

/// The delivery id: required, printable ASCII, at most 200 characters.
fn delivery_id(headers: &HeaderMap) -> Result<String, ApiError> {
    let value = DELIVERY_HEADERS
        .iter()
        .find_map(|name| headers.get(*name))
        .ok_or_else(|| {
            ApiError::bad_request(
                "a delivery id is required: send X-GitHub-Delivery or X-Delivery-Id with an id unique to this delivery",
            )
        })?;
    let id = value.to_str().unwrap_or("").trim();
    let valid =
        !id.is_empty() && id.len() <= MAX_DELIVERY_ID && id.bytes().all(|b| b.is_ascii_graphic());
    if !valid {
        return Err(ApiError::bad_request(format!(
            "the delivery id must be 1 to {MAX_DELIVERY_ID} printable ASCII characters without spaces"
        )));
    }
    Ok(id.to_string())
}

/// Lowercase or uppercase hex to bytes; `None` if not hex.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    hex::decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn sign(secret: &[u8], body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(body);
        let bytes = mac.finalize().into_bytes();
        format!("sha256={}", hex::encode(bytes))
    }

    fn with_signature(signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(signature).unwrap());
        headers
    }

    #[test]
    fn hex_decodes_both_cases_and_rejects_the_rest() {
        assert_eq!(decode_hex("00ffAB"), Some(vec![0, 255, 171]));
        assert_eq!(decode_hex(""), Some(vec![]));
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
    }

    #[test]
    fn a_good_signature_passes() {
        let body = br#"{"action":"opened"}"#;
        let headers = with_signature(&sign(b"s3cret", body));
        assert!(verify_signature(b"s3cret", &headers, body).is_ok());
    }

    #[test]
    fn wrong_missing_and_malformed_signatures_are_401() {
        let body = br#"{"action":"opened"}"#;
        let cases = [
            HeaderMap::new(),
            with_signature(&sign(b"other", body)),
            with_signature(&sign(b"s3cret", b"{}")),
            with_signature("sha1=abcd"),
            with_signature("sha256=xyz"),
            with_signature("sha256=abcd"),
        ];
        for headers in cases {
            let error = verify_signature(b"s3cret", &headers, body).unwrap_err();
            assert_eq!(error.status, StatusCode::UNAUTHORIZED, "{headers:?}");
        }
    }

    #[test]
    fn delivery_ids_come_from_either_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            delivery_id(&headers).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        headers.insert("x-delivery-id", HeaderValue::from_static("d-1"));
        assert_eq!(delivery_id(&headers).unwrap(), "d-1");
        headers.insert("x-github-delivery", HeaderValue::from_static("gh-2"));
        assert_eq!(delivery_id(&headers).unwrap(), "gh-2");
        headers.insert("x-github-delivery", HeaderValue::from_static("a b"));
        assert!(delivery_id(&headers).is_err());
    }
}
