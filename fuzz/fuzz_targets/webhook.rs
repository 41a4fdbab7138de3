//! The webhook checks (HMAC-SHA256 signature, then delivery id) on any
//! headers and body: never a panic; a refusal is 400 or 401; and a request
//! that passes carries the body's true signature under the secret.
#![no_main]

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, KeyInit, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;

const SECRET: &[u8] = b"fuzz secret";

fuzz_target!(|data: &[u8]| {
    // signature \0 delivery \0 body
    let mut parts = data.splitn(3, |b| *b == 0);
    let signature = parts.next().unwrap_or_default();
    let delivery = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default();
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(signature) {
        headers.insert("x-hub-signature-256", v);
    }
    if let Ok(v) = HeaderValue::from_bytes(delivery) {
        headers.insert("x-delivery-id", v);
    }
    match aurad::api::check_webhook_request(SECRET, &headers, body) {
        Ok(_) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
            mac.update(body);
            let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
            let sent = String::from_utf8_lossy(signature).trim().to_ascii_lowercase();
            assert_eq!(sent, format!("sha256={hex}"), "a wrong signature passed");
        }
        Err((status, _)) => assert!(status == 400 || status == 401, "status {status}"),
    }
});
