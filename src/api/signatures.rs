//! The webhook signing schemes (`webhook.signature`), each checked over the
//! raw body as sent, in constant time:
//! - `github` (the default, also Gitea, Forgejo and most generic senders):
//!   `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`;
//! - `stripe`: `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
//!   "<t>.<body>")>[,v1=...]`, any `v1` may match (Stripe sends two while a
//!   secret is rolled), and `t` must be within 5 minutes of now (Stripe's
//!   default tolerance), so a captured delivery cannot be replayed later;
//! - `gitlab`: `X-Gitlab-Token: <secret>` (GitLab sends the secret itself),
//!   compared in constant time;
//! - `slack`: `X-Slack-Signature: v0=<hex HMAC-SHA256(secret,
//!   "v0:<ts>:<body>")>` with `X-Slack-Request-Timestamp: <ts>`, `ts`
//!   within 5 minutes of now (Slack's own advice against replays).
//!
//! An agent may accept several schemes: a request is checked by the first
//! configured scheme whose header it carries ([`choose`]); one that carries
//! none is refused with the sender it looks like and what to configure.
//!
//! Depends on `config` (the scheme names), `hmac`, `sha2` and `hex`.

use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::ApiError;
use crate::config::WebhookSignature;

pub(super) const GITHUB_HEADER: &str = "x-hub-signature-256";
pub(super) const STRIPE_HEADER: &str = "stripe-signature";
pub(super) const GITLAB_HEADER: &str = "x-gitlab-token";
pub(super) const SLACK_HEADER: &str = "x-slack-signature";
pub(super) const SLACK_TIMESTAMP: &str = "x-slack-request-timestamp";
/// How far a Stripe signature's `t` may be from now, in seconds.
pub(super) const STRIPE_TOLERANCE_SECS: i64 = 300;

/// Checks `body`'s signature under `secret` by `scheme`; `now` is the Unix
/// time in seconds. 401 when it is missing, malformed, wrong or too old.
pub(super) fn verify(
    scheme: WebhookSignature,
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), ApiError> {
    match scheme {
        WebhookSignature::Github => verify_github(secret, headers, body),
        WebhookSignature::Stripe => verify_stripe(secret, headers, body, now),
        WebhookSignature::Gitlab => verify_gitlab(secret, headers),
        WebhookSignature::Slack => verify_slack(secret, headers, body, now),
    }
}

fn header_of(scheme: WebhookSignature) -> &'static str {
    match scheme {
        WebhookSignature::Github => GITHUB_HEADER,
        WebhookSignature::Stripe => STRIPE_HEADER,
        WebhookSignature::Gitlab => GITLAB_HEADER,
        WebhookSignature::Slack => SLACK_HEADER,
    }
}

/// The scheme of `configured` to check a request with `headers` by: the
/// first whose header it carries. A request with none of them is refused
/// (401) naming the sender it looks like, so a GitLab hook pointed at an
/// agent that expects GitHub's signature says so.
pub(super) fn choose(
    configured: &[WebhookSignature],
    headers: &HeaderMap,
) -> Result<WebhookSignature, ApiError> {
    if let Some(scheme) = configured
        .iter()
        .find(|s| headers.contains_key(header_of(**s)))
    {
        return Ok(*scheme);
    }
    let expected: Vec<String> = configured
        .iter()
        .map(|s| format!("{} (`{}`)", s.header(), s.as_str()))
        .collect();
    let expected = expected.join(" or ");
    // GitLab also names itself in X-Gitlab-Event when no token is set.
    let seen = WebhookSignature::ALL
        .into_iter()
        .find(|s| headers.contains_key(header_of(*s)))
        .or_else(|| {
            headers
                .contains_key("x-gitlab-event")
                .then_some(WebhookSignature::Gitlab)
        });
    Err(unauthorized(match seen {
        Some(seen) if seen == WebhookSignature::Gitlab && !headers.contains_key(GITLAB_HEADER) => {
            format!(
                "this request comes from GitLab (X-Gitlab-Event) without a secret token, and this agent's webhook expects {expected}: set the hook's secret token in GitLab to the agent's webhook secret, and add `gitlab` to `webhook.signature`"
            )
        }
        Some(seen) => format!(
            "this request looks like a {} delivery ({}), but this agent's webhook expects {expected}: add `{}` to `webhook.signature` (a list takes several), or sign it as expected",
            seen.sender(),
            seen.header(),
            seen.as_str()
        ),
        None => format!(
            "this request carries no signature header of a known sender (X-Hub-Signature-256, Stripe-Signature, X-Gitlab-Token, X-Slack-Signature); this agent's webhook expects {expected}"
        ),
    }))
}

fn unauthorized(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, message)
}

fn mac(secret: &[u8]) -> Result<Hmac<Sha256>, ApiError> {
    Hmac::<Sha256>::new_from_slice(secret)
        .map_err(|e| ApiError::internal(format!("cannot use the webhook secret: {e}")))
}

fn verify_github(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    let Some(value) = headers.get(GITHUB_HEADER) else {
        return Err(unauthorized(
            "X-Hub-Signature-256 is missing: sign the raw body with HMAC-SHA256 under the agent's webhook secret and send `sha256=<hex>`",
        ));
    };
    let signature = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().strip_prefix("sha256="))
        .and_then(|hex| hex::decode(hex).ok())
        .ok_or_else(|| unauthorized("X-Hub-Signature-256 must be `sha256=<hex digest>`"))?;
    let mut mac = mac(secret)?;
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&signature).map_err(|_| {
        unauthorized("X-Hub-Signature-256 does not match the body: sign the raw body with the agent's webhook secret")
    })
}

fn verify_stripe(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), ApiError> {
    const SHAPE: &str =
        "Stripe-Signature must be `t=<unix time>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">`";
    let Some(value) = headers.get(STRIPE_HEADER) else {
        return Err(unauthorized(format!(
            "Stripe-Signature is missing (this agent's webhook has `signature: stripe`): {SHAPE}"
        )));
    };
    let value = value.to_str().map_err(|_| unauthorized(SHAPE))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in value.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t),
            Some(("v1", hex)) => {
                signatures.push(hex::decode(hex).map_err(|_| unauthorized(SHAPE))?)
            }
            // `v0` (test-mode scheme) and anything newer are not ours to check.
            _ => {}
        }
    }
    let (Some(timestamp), false) = (timestamp, signatures.is_empty()) else {
        return Err(unauthorized(SHAPE));
    };
    let t: i64 = timestamp.parse().map_err(|_| unauthorized(SHAPE))?;
    let mut mac = mac(secret)?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let matches = signatures
        .iter()
        .any(|signature| mac.clone().verify_slice(signature).is_ok());
    if !matches {
        return Err(unauthorized(
            "Stripe-Signature does not match the body: no `v1` is the HMAC-SHA256 of \"<t>.<body>\" under the agent's webhook secret (the endpoint's `whsec_...` signing secret)",
        ));
    }
    let age = now - t;
    if age.abs() > STRIPE_TOLERANCE_SECS {
        return Err(unauthorized(format!(
            "Stripe-Signature's timestamp t={t} is {age} s from this machine's clock; a delivery is accepted within {STRIPE_TOLERANCE_SECS} s so that it cannot be replayed later: check the clock"
        )));
    }
    Ok(())
}

fn verify_gitlab(secret: &[u8], headers: &HeaderMap) -> Result<(), ApiError> {
    use subtle::ConstantTimeEq;
    let given = headers
        .get(GITLAB_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if bool::from(given.ct_eq(secret)) {
        Ok(())
    } else {
        Err(unauthorized(
            "X-Gitlab-Token does not match: set the hook's secret token in GitLab to the agent's webhook secret",
        ))
    }
}

fn verify_slack(secret: &[u8], headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), ApiError> {
    const SHAPE: &str = "X-Slack-Signature must be `v0=<hex HMAC-SHA256 of \"v0:<X-Slack-Request-Timestamp>:<body>\">`";
    let signature = headers
        .get(SLACK_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("v0="))
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| unauthorized(SHAPE))?;
    let timestamp = headers
        .get(SLACK_TIMESTAMP)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .ok_or_else(|| {
            unauthorized(
                "X-Slack-Request-Timestamp is missing: Slack signs `v0:<timestamp>:<body>`",
            )
        })?;
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| unauthorized("X-Slack-Request-Timestamp must be Unix seconds"))?;
    let mut mac = mac(secret)?;
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac.verify_slice(&signature).map_err(|_| {
        unauthorized("X-Slack-Signature does not match the body: sign `v0:<timestamp>:<body>` with the app's signing secret")
    })?;
    let age = now - ts;
    if age.abs() > STRIPE_TOLERANCE_SECS {
        return Err(unauthorized(format!(
            "X-Slack-Request-Timestamp {ts} is {age} s from this machine's clock; a request is accepted within {STRIPE_TOLERANCE_SECS} s so that it cannot be replayed later: check the clock"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn github_sign(secret: &[u8], body: &[u8]) -> String {
        let mut mac = mac(secret).unwrap();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    fn stripe_sign(secret: &[u8], t: i64, body: &[u8]) -> String {
        let mut mac = mac(secret).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    fn with(header: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn github(secret: &[u8], headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
        verify(WebhookSignature::Github, secret, headers, body, 0)
    }

    /// GitHub's own test values ("Validating webhook deliveries", GitHub
    /// Docs): this secret and body give exactly this header.
    #[test]
    fn githubs_documented_test_vector_passes() {
        let headers = with(
            GITHUB_HEADER,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        );
        let secret = b"It's a Secret to Everybody";
        assert!(github(secret, &headers, b"Hello, World!").is_ok());
        assert!(github(secret, &headers, b"Hello, World?").is_err());
        assert!(github(b"It's a secret to everybody", &headers, b"Hello, World!").is_err());
    }

    #[test]
    fn wrong_missing_and_malformed_github_signatures_are_401() {
        let body = br#"{"action":"opened"}"#;
        assert!(
            github(
                b"s3cret",
                &with(GITHUB_HEADER, &github_sign(b"s3cret", body)),
                body
            )
            .is_ok()
        );
        let cases = [
            HeaderMap::new(),
            with(GITHUB_HEADER, &github_sign(b"other", body)),
            with(GITHUB_HEADER, &github_sign(b"s3cret", b"{}")),
            with(GITHUB_HEADER, "sha1=abcd"),
            with(GITHUB_HEADER, "sha256=xyz"),
            with(GITHUB_HEADER, "sha256=abcd"),
            with(
                STRIPE_HEADER,
                &format!("t=1,v1={}", stripe_sign(b"s3cret", 1, body)),
            ),
        ];
        for headers in cases {
            let error = github(b"s3cret", &headers, body).unwrap_err();
            assert_eq!(error.status, StatusCode::UNAUTHORIZED, "{headers:?}");
        }
    }

    #[test]
    fn stripe_signatures_over_timestamp_and_body() {
        let secret = b"whsec_test_secret";
        let body = br#"{"id":"evt_1","type":"invoice.paid"}"#;
        let now = 1_767_225_600;
        let t = now - 10;
        let good = stripe_sign(secret, t, body);
        let stripe = |value: &str, now: i64| {
            verify(
                WebhookSignature::Stripe,
                secret,
                &with(STRIPE_HEADER, value),
                body,
                now,
            )
        };
        assert!(stripe(&format!("t={t},v1={good}"), now).is_ok());
        // Any `v1` may match (a rolled secret), `v0` and unknown parts are ignored.
        let other = stripe_sign(b"whsec_old", t, body);
        assert!(stripe(&format!("t={t},v1={other},v1={good},v0=00,v9=zz"), now).is_ok());
        let refused = [
            (format!("t={t},v1={other}"), now, "does not match"),
            (format!("t={},v1={good}", t + 1), now, "does not match"),
            (format!("v1={good}"), now, "must be `t="),
            (format!("t={t}"), now, "must be `t="),
            (format!("t=soon,v1={good}"), now, "must be `t="),
            (format!("t={t},v1=nothex"), now, "must be `t="),
            (format!("t={t},v1={good}"), t + 301, "301 s from"),
            (format!("t={t},v1={good}"), t - 301, "-301 s from"),
        ];
        for (value, now, expected) in refused {
            let error = stripe(&value, now).unwrap_err();
            assert_eq!(error.status, StatusCode::UNAUTHORIZED, "{value}");
            assert!(
                error.message.contains(expected),
                "{value}: {}",
                error.message
            );
        }
        // A GitHub-style signature is not a Stripe one.
        let error = verify(
            WebhookSignature::Stripe,
            secret,
            &with(GITHUB_HEADER, &github_sign(secret, body)),
            body,
            now,
        )
        .unwrap_err();
        assert!(
            error.message.contains("Stripe-Signature is missing"),
            "{}",
            error.message
        );
    }
}
