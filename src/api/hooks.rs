//! `POST /hooks/{agent}`: signed webhooks. In order: the signature is
//! checked over the raw body by the agent's `webhook.signature` scheme
//! whose header the request carries (`signatures`; none: 401 naming the
//! sender it looks like); the body is read as JSON, or, sent as
//! `application/x-www-form-urlencoded`, as the JSON in its `payload` field
//! (GitHub's form mode, Slack's interactions) or, from Slack, as its fields
//! (a slash command); GitHub's `ping` and Slack's `url_verification` are
//! answered without a run; each delivery id (`X-GitHub-Delivery` or
//! `X-Delivery-Id`; a Stripe event's `id`; GitLab's `Idempotency-Key` or
//! `X-Gitlab-Event-UUID`; a Slack event's `event_id` or a command's
//! `trigger_id`) starts at most one run (the id is remembered in the
//! transaction that claims the run, so a delivery refused before its run
//! was claimed, e.g. during shutdown, can be delivered again and then runs).
//! The run's templates get `{{ payload }}` (the JSON), `{{ event }}` and
//! `{{ headers.X }}` (the request's headers, credentials left out). No
//! bearer token: the signature is the authentication.
//!
//! Depends on the `Backend` (`webhook_secret`, `trigger`), `config` (the
//! scheme names) and `form_urlencoded`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::agents::trigger_error;
use super::{Api, ApiError, Param, RunAsk, SubmitError, TriggerError};
use super::{accepted, read_body, signatures};
use crate::config::WebhookSignature;
use crate::types::Trigger;

const DELIVERY_HEADERS: [&str; 2] = ["x-github-delivery", "x-delivery-id"];
/// Where `{{ event }}` comes from, first found: GitHub's header, then the
/// generic ones other senders use. A Stripe event's is its `type`.
const EVENT_HEADERS: [&str; 3] = ["x-github-event", "x-event-type", "x-webhook-event"];
/// The longest delivery id accepted.
const MAX_DELIVERY_ID: usize = 200;

pub(super) async fn deliver(
    State(api): State<Api>,
    Param(agent): Param,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (schemes, secret) = match api.daemon.webhook_secret(&agent) {
        Ok(Some(webhook)) => webhook,
        Ok(None) => {
            return Err(ApiError::not_found(format!(
                "no webhook for `{agent}`: the agent does not exist or has no `webhook: {{ secret_env: VAR }}`"
            )));
        }
        Err(message) => return Err(ApiError::internal(message)),
    };
    let body = read_body(body)?;
    let now = chrono::Utc::now().timestamp();
    let scheme = signatures::choose(&schemes, &headers)?;
    signatures::verify(scheme, secret.as_bytes(), &headers, &body, now)?;
    let payload = parse_payload(scheme, &headers, &body)?;
    let event = event_name(scheme, &headers, &payload);
    if scheme == WebhookSignature::Github && event.as_deref() == Some("ping") {
        tracing::info!(agent = %agent, "webhook ping answered; no run");
        return Ok(axum::Json(json!({ "ping": true, "agent": agent })).into_response());
    }
    if scheme == WebhookSignature::Slack && payload["type"] == "url_verification" {
        tracing::info!(agent = %agent, "Slack's url_verification answered; no run");
        return Ok(axum::Json(json!({ "challenge": payload["challenge"] })).into_response());
    }
    let delivery = match scheme {
        WebhookSignature::Github => delivery_id(&headers)?,
        WebhookSignature::Stripe => stripe_event_id(&payload)?,
        WebhookSignature::Gitlab => gitlab_delivery_id(&headers)?,
        WebhookSignature::Slack => slack_delivery_id(&payload)?,
    };
    let trigger = RunAsk {
        payload: Some(payload),
        event,
        headers: template_headers(&headers),
        delivery: Some(delivery.clone()),
        ..RunAsk::new(Trigger::Webhook)
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

/// The daemon-free checks of a GitHub-scheme webhook request, in the order
/// `deliver` runs them: the signature of `body` under `secret`, then the
/// delivery id. `Ok(delivery id)`, or the refusal's HTTP status and
/// message. For the fuzz targets and property tests; behaves exactly as the
/// route.
#[doc(hidden)]
pub fn check_request(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<String, (u16, String)> {
    signatures::verify(WebhookSignature::Github, secret, headers, body, 0)
        .and_then(|()| delivery_id(headers))
        .map_err(|e| (e.status.as_u16(), e.message))
}

/// The delivery's JSON: the body, or with
/// `Content-Type: application/x-www-form-urlencoded` its `payload` field;
/// from Slack, a form without one (a slash command) is its fields.
fn parse_payload(
    scheme: WebhookSignature,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if media_type.as_deref() != Some("application/x-www-form-urlencoded") {
        return serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the webhook body must be JSON: {e}")));
    }
    let mut fields = Vec::new();
    let mut object = serde_json::Map::new();
    for (name, value) in form_urlencoded::parse(body) {
        if name == "payload" {
            return serde_json::from_str(&value).map_err(|e| {
                ApiError::bad_request(format!("the form field `payload` must be JSON: {e}"))
            });
        }
        fields.push(name.clone().into_owned());
        object.insert(name.into_owned(), Value::String(value.into_owned()));
    }
    if scheme == WebhookSignature::Slack {
        return Ok(Value::Object(object));
    }
    Err(ApiError::bad_request(format!(
        "a form-encoded delivery carries its JSON in the field `payload` (GitHub's form mode); this one has {}",
        if fields.is_empty() {
            "no fields".to_string()
        } else {
            format!("only: {}", fields.join(", "))
        }
    )))
}

/// `{{ event }}`: a Stripe event's `type`; GitLab's `X-Gitlab-Event`; a
/// Slack event's type (an interaction's `type`, a slash command's
/// `command`); else the first of [`EVENT_HEADERS`] present.
fn event_name(scheme: WebhookSignature, headers: &HeaderMap, payload: &Value) -> Option<String> {
    match scheme {
        WebhookSignature::Stripe => return payload["type"].as_str().map(str::to_string),
        WebhookSignature::Slack => {
            return [
                &payload["event"]["type"],
                &payload["type"],
                &payload["command"],
            ]
            .into_iter()
            .find_map(|v| v.as_str())
            .map(str::to_string);
        }
        WebhookSignature::Gitlab => {
            return headers
                .get("x-gitlab-event")
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_string());
        }
        WebhookSignature::Github => {}
    }
    EVENT_HEADERS
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Whether a header carries a credential, and so is never handed to the
/// templates: `Authorization`, `Proxy-Authorization`, `Cookie`, and any
/// header whose name has `signature`, `token`, `secret` or `key` in it
/// (`X-Hub-Signature-256`, `Stripe-Signature`, `X-Gitlab-Token`,
/// `X-Api-Key`). Signatures are not secrets, but they are no use to a
/// model, and a rule this simple is easy to trust.
fn is_credential(name: &str) -> bool {
    matches!(name, "authorization" | "proxy-authorization" | "cookie")
        || ["signature", "token", "secret", "key"]
            .iter()
            .any(|word| name.contains(word))
}

/// `{{ headers }}`: every header but credentials, by lowercase name;
/// repeated headers joined with `, `; values that are not text left out.
fn template_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut kept: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let name = name.as_str();
        let Ok(value) = value.to_str() else { continue };
        if is_credential(name) {
            continue;
        }
        kept.entry(name.to_string())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(value);
            })
            .or_insert_with(|| value.to_string());
    }
    kept
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
    checked_delivery_id(value.to_str().unwrap_or(""))
}

/// A Stripe event's `id` (`evt_...`), which Stripe keeps when it sends the
/// event again: its delivery id.
fn stripe_event_id(payload: &Value) -> Result<String, ApiError> {
    let id = payload["id"].as_str().ok_or_else(|| {
        ApiError::bad_request(
            "a Stripe event needs its `id` (\"evt_...\"): it is the delivery id, so a resent event runs once",
        )
    })?;
    checked_delivery_id(id)
}

/// GitLab's id of an event, the same on its retries: `Idempotency-Key`
/// (GitLab 17.4 and later), else `X-Gitlab-Event-UUID`.
fn gitlab_delivery_id(headers: &HeaderMap) -> Result<String, ApiError> {
    let value = ["idempotency-key", "x-gitlab-event-uuid"]
        .iter()
        .find_map(|name| headers.get(*name))
        .ok_or_else(|| {
            ApiError::bad_request(
                "a GitLab delivery needs its Idempotency-Key or X-Gitlab-Event-UUID header: it is the delivery id, so a retried event runs once",
            )
        })?;
    checked_delivery_id(value.to_str().unwrap_or(""))
}

/// A Slack event's `event_id` (kept on Slack's retries), or an
/// interaction's or slash command's `trigger_id`.
fn slack_delivery_id(payload: &Value) -> Result<String, ApiError> {
    let id = [&payload["event_id"], &payload["trigger_id"]]
        .into_iter()
        .find_map(|v| v.as_str())
        .ok_or_else(|| {
            ApiError::bad_request(
                "a Slack request needs an `event_id` (Events API) or a `trigger_id` (commands, interactions): it is the delivery id",
            )
        })?;
    checked_delivery_id(id)
}

fn checked_delivery_id(id: &str) -> Result<String, ApiError> {
    let id = id.trim();
    let valid =
        !id.is_empty() && id.len() <= MAX_DELIVERY_ID && id.bytes().all(|b| b.is_ascii_graphic());
    if !valid {
        return Err(ApiError::bad_request(format!(
            "the delivery id must be 1 to {MAX_DELIVERY_ID} printable ASCII characters without spaces"
        )));
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
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
        assert_eq!(stripe_event_id(&json!({ "id": "evt_9" })).unwrap(), "evt_9");
        assert!(stripe_event_id(&json!({ "type": "x" })).is_err());
    }

    #[test]
    fn payload_is_the_json_body_or_the_form_field() {
        let json_body = br#"{"zen":"Keep it logically awesome."}"#;
        let expected = json!({ "zen": "Keep it logically awesome." });
        for content_type in [None, Some("application/json"), Some("text/plain")] {
            let headers = match content_type {
                Some(value) => headers(&[("content-type", value)]),
                None => HeaderMap::new(),
            };
            assert_eq!(
                parse_payload(WebhookSignature::Github, &headers, json_body).unwrap(),
                expected
            );
        }
        let form = headers(&[(
            "content-type",
            "Application/X-WWW-Form-Urlencoded; charset=utf-8",
        )]);
        let encoded: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", r#"{"zen":"Keep it logically awesome."}"#)
            .finish();
        assert_eq!(
            parse_payload(WebhookSignature::Github, &form, encoded.as_bytes()).unwrap(),
            expected
        );
        let error = parse_payload(WebhookSignature::Github, &form, b"a=1&b=2").unwrap_err();
        assert!(error.message.contains("only: a, b"), "{}", error.message);
        let error = parse_payload(WebhookSignature::Github, &form, b"payload=%7Bnope").unwrap_err();
        assert!(
            error.message.contains("`payload` must be JSON"),
            "{}",
            error.message
        );
        let error = parse_payload(
            WebhookSignature::Github,
            &HeaderMap::new(),
            encoded.as_bytes(),
        )
        .unwrap_err();
        assert!(error.message.contains("must be JSON"), "{}", error.message);
    }

    #[test]
    fn event_comes_from_github_then_generic_headers_or_stripes_type() {
        let github = WebhookSignature::Github;
        let none = json!({});
        assert_eq!(event_name(github, &HeaderMap::new(), &none), None);
        let generic = headers(&[
            ("x-webhook-event", "build.done"),
            ("x-event-type", "deploy"),
        ]);
        assert_eq!(
            event_name(github, &generic, &none).as_deref(),
            Some("deploy")
        );
        let both = headers(&[("x-event-type", "deploy"), ("x-github-event", "issues")]);
        assert_eq!(event_name(github, &both, &none).as_deref(), Some("issues"));
        let stripe = json!({ "type": "invoice.paid" });
        assert_eq!(
            event_name(WebhookSignature::Stripe, &both, &stripe).as_deref(),
            Some("invoice.paid")
        );
    }

    #[test]
    fn template_headers_leave_credentials_out() {
        let kept = template_headers(&headers(&[
            ("x-github-event", "issues"),
            ("user-agent", "GitHub-Hookshot/1"),
            ("accept", "a"),
            ("accept", "b"),
            ("authorization", "Bearer x"),
            ("cookie", "c=1"),
            ("x-hub-signature-256", "sha256=00"),
            ("stripe-signature", "t=1,v1=00"),
            ("x-gitlab-token", "t"),
            ("x-api-key", "k"),
            ("x-webhook-secret", "s"),
        ]));
        let names: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(names, ["accept", "user-agent", "x-github-event"]);
        assert_eq!(kept["accept"], "a, b");
    }
}
