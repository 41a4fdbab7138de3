//! `mode: events`: Slack posts to the channel's webhook (`POST
//! /channels/NAME`) both Events API callbacks (JSON) and interactions
//! (`application/x-www-form-urlencoded`, one field `payload` holding the
//! JSON). Every request is signed: `X-Slack-Signature: v0=` followed by the
//! hex HMAC-SHA256, keyed by the app's signing secret, of `v0:`, the
//! `X-Slack-Request-Timestamp` header, `:` and the raw body; a timestamp
//! more than five minutes from now is refused (a replayed request). Docs:
//! <https://docs.slack.dev/authentication/verifying-requests-from-slack>,
//! <https://docs.slack.dev/reference/events/url_verification>,
//! <https://docs.slack.dev/interactivity/handling-user-interaction>.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::super::{WebhookAnswer, WebhookRequest};
use super::{Slack, events};

/// How far a request's timestamp may be from now, in seconds.
const MAX_SKEW: i64 = 5 * 60;

/// Checks Slack's signature of `body`: `Ok` or why it is refused.
pub(super) fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), &'static str> {
    let timestamp = timestamp.ok_or("the X-Slack-Request-Timestamp header is missing")?;
    let at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "the X-Slack-Request-Timestamp header is not a number of seconds")?;
    if (now - at).abs() > MAX_SKEW {
        return Err(
            "the X-Slack-Request-Timestamp is more than 5 minutes from now (a replayed request, or this machine's clock is wrong)",
        );
    }
    let signature = signature.ok_or("the X-Slack-Signature header is missing")?;
    let hex_sig = signature
        .trim()
        .strip_prefix("v0=")
        .ok_or("the X-Slack-Signature header is not a v0= signature")?;
    let given = hex::decode(hex_sig).map_err(|_| "the X-Slack-Signature header is not hex")?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|_| "the signing secret cannot key an HMAC")?;
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&given)
        .map_err(|_| "the X-Slack-Signature does not match the body signed with the channel's signing_secret")
}

impl Slack {
    /// A request to the webhook in `mode: events`, signed with `secret`.
    pub(super) async fn events_request(
        &self,
        secret: &str,
        request: &WebhookRequest,
    ) -> WebhookAnswer {
        if let Err(why) = verify(
            secret,
            request.header("x-slack-request-timestamp"),
            request.header("x-slack-signature"),
            &request.body,
            request.now,
        ) {
            return WebhookAnswer::json(401, &json!({"error": why}));
        }
        let form = request
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
        let incoming = if form {
            let Some(payload) = form_urlencoded::parse(&request.body)
                .find(|(k, _)| k == "payload")
                .map(|(_, v)| v.into_owned())
            else {
                return WebhookAnswer::json(
                    400,
                    &json!({"error": "a form post from Slack carries a `payload` field; this one has none"}),
                );
            };
            match serde_json::from_str::<Value>(&payload) {
                Ok(p) => events::from_interaction(&p),
                Err(e) => {
                    return WebhookAnswer::json(
                        400,
                        &json!({"error": format!("the `payload` field is not JSON: {e}")}),
                    );
                }
            }
        } else {
            let body: Value = match serde_json::from_slice(&request.body) {
                Ok(v) => v,
                Err(e) => {
                    return WebhookAnswer::json(
                        400,
                        &json!({"error": format!("the body is not a Slack event (JSON): {e}")}),
                    );
                }
            };
            if body.get("type").and_then(Value::as_str) == Some("url_verification") {
                let challenge = body.get("challenge").and_then(Value::as_str).unwrap_or("");
                return WebhookAnswer {
                    status: 200,
                    content_type: "text/plain",
                    body: challenge.as_bytes().to_vec(),
                };
            }
            self.learn_bot_user(&body);
            events::from_callback(&body, self.bot_user().as_deref())
        };
        let Some(incoming) = incoming else {
            // An event or interaction the channel does not handle: taken,
            // so Slack does not send it again.
            return WebhookAnswer::json(200, &json!({"ok": true}));
        };
        // Slack retries a delivery answered 503.
        if let Err(refused) = self.inbox.deliver(incoming).await {
            return refused;
        }
        WebhookAnswer::json(200, &json!({"ok": true}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

    fn sign(ts: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(format!("v0:{ts}:").as_bytes());
        mac.update(body);
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    /// The worked example of Slack's "Verifying requests from Slack" page.
    #[test]
    fn slacks_documented_example_passes() {
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(sign("1531420618", body.as_bytes()), sig);
        assert_eq!(
            verify(
                SECRET,
                Some("1531420618"),
                Some(sig),
                body.as_bytes(),
                1_531_420_618
            ),
            Ok(())
        );
    }

    #[test]
    fn a_good_signature_passes() {
        let body = br#"{"type":"event_callback","event_id":"Ev1"}"#;
        let sig = sign("1700000000", body);
        assert_eq!(
            verify(SECRET, Some("1700000000"), Some(&sig), body, 1_700_000_100),
            Ok(())
        );
    }

    #[test]
    fn a_bad_signature_or_another_body_fails() {
        let body = b"token=x&payload=%7B%7D";
        let sig = sign("1700000000", body);
        assert!(
            verify(
                SECRET,
                Some("1700000000"),
                Some(&sig),
                b"token=y",
                1_700_000_000
            )
            .is_err()
        );
        let mut wrong = sig.clone();
        wrong.replace_range(5..6, if &sig[5..6] == "0" { "1" } else { "0" });
        assert!(
            verify(
                SECRET,
                Some("1700000000"),
                Some(&wrong),
                body,
                1_700_000_000
            )
            .is_err()
        );
        assert!(
            verify(
                "another",
                Some("1700000000"),
                Some(&sig),
                body,
                1_700_000_000
            )
            .is_err()
        );
        assert!(verify(SECRET, Some("1700000000"), None, body, 1_700_000_000).is_err());
        assert!(
            verify(
                SECRET,
                Some("1700000000"),
                Some("v1=00"),
                body,
                1_700_000_000
            )
            .is_err()
        );
        // The timestamp is part of what is signed.
        assert!(verify(SECRET, Some("1700000001"), Some(&sig), body, 1_700_000_000).is_err());
    }

    #[test]
    fn an_old_or_future_timestamp_fails_even_when_signed() {
        let body = b"{}";
        let sig = sign("1700000000", body);
        let old = verify(SECRET, Some("1700000000"), Some(&sig), body, 1_700_000_301);
        assert!(old.unwrap_err().contains("more than 5 minutes"));
        assert!(verify(SECRET, Some("1700000000"), Some(&sig), body, 1_699_999_699).is_err());
        assert!(verify(SECRET, Some("1700000000"), Some(&sig), body, 1_700_000_300).is_ok());
    }
}
