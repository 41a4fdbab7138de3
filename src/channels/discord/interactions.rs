//! Interactions over HTTP: with `public_key` set, the application's
//! Interactions Endpoint URL may point at the channel's webhook (`POST
//! /channels/NAME`), and Discord then posts button presses there instead
//! of sending them on the Gateway. Each request is signed: Ed25519 over
//! `X-Signature-Timestamp` followed by the raw body, the signature in
//! `X-Signature-Ed25519` (hex); a request that fails the check is answered
//! 401, as Discord requires (it sends bad signatures on purpose to test
//! the endpoint). A PING (type 1) is answered with a PONG (`{"type": 1}`);
//! a button press is handed to the daemon and answered with a deferred
//! update (`{"type": 6}`) once it is taken. A timestamp more than five
//! minutes from now is refused too, so a captured request cannot be
//! replayed later.
//!
//! <https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers>,
//! <https://discord.com/developers/docs/interactions/receiving-and-responding>

use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Value, json};

use super::Discord;
use super::events::{DEFERRED_UPDATE_MESSAGE, Interaction};
use crate::channels::{WebhookAnswer, WebhookRequest};

/// How far a request's timestamp may be from now, in seconds.
const MAX_SKEW: i64 = 300;
/// Interaction type of Discord's endpoint check.
const PING: u8 = 1;
/// Callback type answering a PING.
const PONG: u8 = 1;
/// Callback type: a message in answer (used, ephemeral, for what the bot
/// does not handle, such as a slash command).
const CHANNEL_MESSAGE_WITH_SOURCE: u8 = 4;
/// Message flag: only the user who interacted sees it.
const EPHEMERAL: u64 = 1 << 6;

/// Checks `request`'s signature against `key`: `Err` says what is wrong.
pub(super) fn verify(key: &VerifyingKey, request: &WebhookRequest) -> Result<(), String> {
    let signature = request
        .header("x-signature-ed25519")
        .ok_or("the X-Signature-Ed25519 header is missing")?;
    let timestamp = request
        .header("x-signature-timestamp")
        .ok_or("the X-Signature-Timestamp header is missing")?;
    let signature: [u8; 64] = hex::decode(signature.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("X-Signature-Ed25519 is not 128 hex digits")?;
    let at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "X-Signature-Timestamp is not a Unix time in seconds")?;
    if (request.now - at).abs() > MAX_SKEW {
        return Err(format!(
            "X-Signature-Timestamp {at} is more than {MAX_SKEW} s from now ({}): an old or replayed request",
            request.now
        ));
    }
    let mut signed = timestamp.as_bytes().to_vec();
    signed.extend_from_slice(&request.body);
    key.verify_strict(&signed, &Signature::from_bytes(&signature))
        .map_err(|_| {
            "the signature does not match the body and the application's public key".to_string()
        })
}

impl Discord {
    pub(super) async fn interaction_webhook(&self, request: WebhookRequest) -> WebhookAnswer {
        let key = match &self.verifier {
            None => {
                return WebhookAnswer::json(
                    404,
                    &json!({"error": "this Discord channel takes interactions over the Gateway; set `discord.public_key` to take them here"}),
                );
            }
            Some(Err(e)) => return WebhookAnswer::json(500, &json!({"error": e})),
            Some(Ok(key)) => key,
        };
        if let Err(why) = verify(key, &request) {
            return WebhookAnswer::json(
                401,
                &json!({"error": format!("invalid request signature: {why}")}),
            );
        }
        let raw: Value = match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => {
                return WebhookAnswer::json(
                    400,
                    &json!({"error": format!("the body is not a Discord interaction: {e}")}),
                );
            }
        };
        if raw.get("type").and_then(Value::as_u64) == Some(u64::from(PING)) {
            return WebhookAnswer::json(200, &json!({"type": PONG}));
        }
        let interaction: Interaction = match serde_json::from_value(raw) {
            Ok(i) => i,
            Err(e) => {
                return WebhookAnswer::json(
                    400,
                    &json!({"error": format!("the body is not a Discord interaction: {e}")}),
                );
            }
        };
        let Some(incoming) = self.decision(&interaction) else {
            return WebhookAnswer::json(
                200,
                &json!({"type": CHANNEL_MESSAGE_WITH_SOURCE, "data": {
                    "content": "This bot answers messages and its own approval buttons only.",
                    "flags": EPHEMERAL,
                }}),
            );
        };
        if let Err(refused) = self.inbox.deliver(incoming).await {
            return refused;
        }
        WebhookAnswer::json(200, &json!({"type": DEFERRED_UPDATE_MESSAGE}))
    }
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signer, SigningKey};

    use super::*;

    fn signed(key: &SigningKey, timestamp: &str, body: &str, now: i64) -> WebhookRequest {
        let mut message = timestamp.as_bytes().to_vec();
        message.extend_from_slice(body.as_bytes());
        let signature = key.sign(&message);
        WebhookRequest {
            headers: vec![
                (
                    "X-Signature-Ed25519".into(),
                    hex::encode(signature.to_bytes()),
                ),
                ("X-Signature-Timestamp".into(), timestamp.into()),
            ],
            body: body.as_bytes().to_vec(),
            now,
        }
    }

    fn key_pair() -> SigningKey {
        let seed: [u8; 32] = rand::random();
        SigningKey::from_bytes(&seed)
    }

    #[test]
    fn a_good_signature_is_accepted() {
        let key = key_pair();
        let request = signed(&key, "1700000000", r#"{"type":1}"#, 1_700_000_010);
        assert_eq!(verify(&key.verifying_key(), &request), Ok(()));
    }

    #[test]
    fn a_changed_body_or_another_key_is_refused() {
        let key = key_pair();
        let mut request = signed(&key, "1700000000", r#"{"type":1}"#, 1_700_000_000);
        request.body = br#"{"type":3}"#.to_vec();
        assert!(verify(&key.verifying_key(), &request).is_err());
        let request = signed(&key, "1700000000", r#"{"type":1}"#, 1_700_000_000);
        assert!(verify(&key_pair().verifying_key(), &request).is_err());
    }

    #[test]
    fn an_old_timestamp_or_missing_header_is_refused() {
        let key = key_pair();
        let request = signed(&key, "1700000000", r#"{"type":1}"#, 1_700_000_000 + 301);
        let err = verify(&key.verifying_key(), &request).unwrap_err();
        assert!(err.contains("old or replayed"), "{err}");
        let mut request = signed(&key, "1700000000", "{}", 1_700_000_000);
        request.headers.remove(0);
        assert!(verify(&key.verifying_key(), &request).is_err());
    }
}
