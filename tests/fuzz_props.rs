//! Property tests over the entry points the fuzz targets of `fuzz/` drive,
//! so every `cargo test` exercises them without nightly: config loading of
//! each file kind (decode, interpolation, parse), the nesting pre-scan
//! (never fooled into passing real depth, never tripped by text), SSE
//! parsing of each provider (no panic, and the same answer however the
//! network splits the bytes) and the webhook signature check (a valid
//! signature passes, any change to body, signature or secret is refused).
//! The seed is fixed (see [`config`]); set `PROPTEST_RNG_SEED` to explore.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

use std::path::Path;

use aurad::config::bounds::{MAX_NESTING, decode, json_too_deep, yaml_too_deep};
use aurad::config::interp::{Escape, interpolate_with};
use aurad::config::{agent, mcp, plugins, settings};
use aurad::llm::decode::{Wire, replay_events, replay_whole};
use aurad::skills::parse::parse_skill;
use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, KeyInit, Mac};
use proptest::prelude::*;
use sha2::Sha256;

/// Characters that are structure somewhere in YAML or JSON, and some text.
const TRICKY: &[&str] = &[
    "[", "]", "{", "}", "'", "\"", "#", " ", " ", "\n", "\n  ", "- ", ": ", ":", ",", "|", ">",
    "\\", "&a ", "*a", "!t ", "? ", "a", "b", "x y", "---\n", "\t", "\r\n", "${V}", "$$",
];

/// A text made of [`TRICKY`] pieces.
fn tricky_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TRICKY), 0..max).prop_map(|parts| parts.concat())
}

fn env(name: &str) -> Option<String> {
    (name == "V").then(|| "value [with] {brackets} 'and' \"quotes\"".to_string())
}

/// Every place of a diagnostic is inside the text (or 0 for the file).
fn places_inside(text: &str, diags: &[aurad::config::Diagnostic]) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    for d in diags {
        prop_assert!(d.line <= lines, "{d} is past line {lines} of {text:?}");
    }
    Ok(())
}

/// Decodes, interpolates and parses `bytes` as each YAML file kind, as the
/// loader does.
fn load_every_kind(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(text) = decode(bytes.to_vec(), Path::new("f")) else {
        return Ok(());
    };
    let (_, diags) = parse_skill("s", Path::new("skills/s/SKILL.md"), &text);
    places_inside(&text, &diags)?;
    let Ok(text) = interpolate_with(&text, &env, Escape::Yaml) else {
        return Ok(());
    };
    let (_, diags) = agent::parse_agent("a", Path::new("agents/a.yaml"), &text, String::new());
    places_inside(&text, &diags)?;
    let (_, diags) = settings::parse_settings(Path::new("/p"), Path::new("aurad.yaml"), &text);
    places_inside(&text, &diags)?;
    let (_, diags) = plugins::parse_plugin("t", Path::new("tools.d/t.yaml"), &text);
    places_inside(&text, &diags)?;
    Ok(())
}

/// How deep a YAML value nests (a scalar is 0).
fn yaml_depth(value: &serde_yaml::Value) -> usize {
    match value {
        serde_yaml::Value::Sequence(items) => 1 + items.iter().map(yaml_depth).max().unwrap_or(0),
        serde_yaml::Value::Mapping(map) => {
            1 + map
                .iter()
                .map(|(k, v)| yaml_depth(k).max(yaml_depth(v)))
                .max()
                .unwrap_or(0)
        }
        serde_yaml::Value::Tagged(tagged) => yaml_depth(&tagged.value),
        _ => 0,
    }
}

fn json_depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A nested YAML value whose strings are full of brackets and quotes.
fn nested_value() -> impl Strategy<Value = serde_yaml::Value> {
    let text = prop::collection::vec(prop::sample::select(TRICKY), 0..6)
        .prop_map(|parts| serde_yaml::Value::String(parts.concat()));
    text.prop_recursive(12, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(serde_yaml::Value::Sequence),
            prop::collection::vec(("[a-z]{1,3}", inner), 1..4).prop_map(|pairs| {
                serde_yaml::Value::Mapping(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (serde_yaml::Value::String(k), v))
                        .collect(),
                )
            }),
        ]
    })
}

/// `value` in YAML flow style (`[a, {k: v}]`), strings double-quoted.
fn flow_yaml(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::Sequence(items) => {
            format!(
                "[{}]",
                items.iter().map(flow_yaml).collect::<Vec<_>>().join(", ")
            )
        }
        serde_yaml::Value::Mapping(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", flow_yaml(k), flow_yaml(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        serde_yaml::Value::String(s) => serde_json::to_string(s).unwrap(),
        other => serde_yaml::to_string(other).unwrap().trim().to_string(),
    }
}

const SECRET: &[u8] = b"hook secret";

fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(body);
    let hex = hex::encode(mac.finalize().into_bytes());
    format!("sha256={hex}")
}

fn headers(signature: &str, delivery: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(signature) {
        headers.insert("x-hub-signature-256", v);
    }
    if let Ok(v) = HeaderValue::from_str(delivery) {
        headers.insert("x-github-delivery", v);
    }
    headers
}

/// A well-formed stream of each wire format carrying `text` in pieces.
fn stream_of(wire: Wire, pieces: &[String]) -> String {
    let mut body = String::new();
    for piece in pieces {
        let event = match wire {
            Wire::OpenAi => serde_json::json!({"choices": [{"delta": {"content": piece}}]}),
            Wire::OpenAiResponses => serde_json::json!({"type": "response.output_text.delta",
                "output_index": 0, "content_index": 0, "delta": piece}),
            Wire::Anthropic => serde_json::json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": piece}}),
            Wire::Gemini => {
                serde_json::json!({"candidates": [{"content": {"parts": [{"text": piece}]}}]})
            }
        };
        if wire == Wire::Anthropic && body.is_empty() {
            body.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n");
            body.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
        }
        body.push_str(&format!("data: {event}\n\n"));
    }
    match wire {
        Wire::OpenAi => body.push_str(
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        ),
        Wire::OpenAiResponses => body.push_str(
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[]}}\n\n",
        ),
        Wire::Anthropic => body.push_str(
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
             data: {\"type\":\"message_stop\"}\n\n",
        ),
        Wire::Gemini => body.push_str(
            "data: {\"candidates\":[{\"content\":{\"parts\":[]},\"finishReason\":\"STOP\"}]}\n\n",
        ),
    }
    body
}

/// `body` cut at the given (sorted, deduplicated) offsets.
fn split_at<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut parts = Vec::new();
    let mut start = 0;
    for cut in cuts {
        parts.push(&body[start..cut]);
        start = cut;
    }
    parts.push(&body[start..]);
    parts
}

const WIRES: [Wire; 4] = [
    Wire::OpenAi,
    Wire::OpenAiResponses,
    Wire::Anthropic,
    Wire::Gemini,
];

/// 256 cases from a fixed seed, so `cargo test` (and CI) is deterministic;
/// `PROPTEST_RNG_SEED=N` explores other cases, `PROPTEST_CASES=N` more of
/// them. A case found that way belongs in a unit test next to the code.
fn config() -> ProptestConfig {
    let defaults = ProptestConfig::default();
    ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            defaults.cases
        } else {
            256
        },
        rng_seed: match defaults.rng_seed {
            proptest::test_runner::RngSeed::Random => proptest::test_runner::RngSeed::Fixed(14),
            chosen => chosen,
        },
        ..defaults
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn config_kinds_never_panic_on_tricky_text(text in tricky_text(120)) {
        load_every_kind(text.as_bytes())?;
        let (_, diags) = mcp::parse_mcp(Path::new("/p"), &text);
        places_inside(&text, &diags)?;
    }

    #[test]
    fn config_kinds_never_panic_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        load_every_kind(&bytes)?;
        if let Ok(text) = decode(bytes, Path::new("mcp.json")) {
            let (_, diags) = mcp::parse_mcp(Path::new("/p"), &text);
            places_inside(&text, &diags)?;
        }
    }

    #[test]
    fn interpolation_never_adds_a_line(text in tricky_text(80)) {
        for escape in [Escape::Yaml, Escape::JsonString] {
            if let Ok(out) = interpolate_with(&text, &env, escape) {
                prop_assert_eq!(out.matches('\n').count(), text.matches('\n').count(), "{:?}", out);
            }
        }
    }

    /// The pre-scan may over-count, never under-count: whatever it lets
    /// through nests at most one level more than its limit (a flow
    /// collection used as a key is seen before its mapping).
    #[test]
    fn yaml_prescan_never_lets_real_depth_through(text in tricky_text(100), limit in 1usize..5) {
        if yaml_too_deep(&text, limit).is_none()
            && let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(&text)
        {
            prop_assert!(yaml_depth(&value) <= limit + 1, "depth {} for limit {limit}: {text:?}", yaml_depth(&value));
        }
    }

    #[test]
    fn json_prescan_never_lets_real_depth_through(text in tricky_text(100), limit in 1usize..5) {
        if json_too_deep(&text, limit).is_none()
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
        {
            prop_assert!(json_depth(&value) <= limit, "{text:?}");
        }
    }

    /// Brackets and quotes inside strings never count: a value of depth d,
    /// written in block style (by serde_yaml) or in flow style, passes with
    /// limit d and is caught with limit d - 1.
    #[test]
    fn yaml_prescan_counts_exactly_what_nests(value in nested_value()) {
        let depth = yaml_depth(&value);
        prop_assume!(depth > 0);
        for text in [serde_yaml::to_string(&value).unwrap(), flow_yaml(&value)] {
            let parsed = serde_yaml::from_str::<serde_yaml::Value>(&text).ok();
            prop_assert_eq!(parsed, Some(value.clone()), "{}", text);
            prop_assert_eq!(yaml_too_deep(&text, depth), None, "{}", text);
            prop_assert!(yaml_too_deep(&text, depth - 1).is_some(), "{}", text);
        }
        let json = serde_json::to_string(&value).unwrap();
        prop_assert_eq!(json_too_deep(&json, depth), None);
        prop_assert!(json_too_deep(&json, depth - 1).is_some());
        prop_assert!(depth <= MAX_NESTING);
    }

    #[test]
    fn sse_parsing_never_panics(body in prop::collection::vec(any::<u8>(), 0..400), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let parts = split_at(&body, &cuts);
        for wire in WIRES {
            let _ = replay_events(wire, &parts);
            let _ = replay_whole(wire, &body);
        }
    }

    #[test]
    fn sse_events_of_tricky_data_never_panic(lines in prop::collection::vec(
        (prop::sample::select(&["data: ", "event: error\ndata: ", "event: message_start\ndata: ", "event: content_block_delta\ndata: ", ": ", "id: 1\ndata: "][..]),
         tricky_text(30)), 0..8)) {
        let body: String = lines.iter().map(|(field, value)| format!("{field}{value}\n\n")).collect();
        for wire in WIRES {
            let _ = replay_events(wire, &[body.as_bytes()]);
        }
    }

    /// However the network cuts a stream, the answer is the same.
    #[test]
    fn sse_answers_do_not_depend_on_how_the_bytes_are_split(
        pieces in prop::collection::vec("[a-zé€ \\[\\]{}\"'\\\\\n]{0,6}", 1..6),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        for wire in WIRES {
            let body = stream_of(wire, &pieces);
            let whole = replay_events(wire, &[body.as_bytes()]);
            let split = replay_events(wire, &split_at(body.as_bytes(), &cuts));
            let turn = whole.unwrap_or_else(|e| panic!("{wire:?}: {e}\n{body}"));
            prop_assert_eq!(turn.text.clone(), pieces.concat());
            prop_assert_eq!(split.ok(), Some(turn));
        }
    }

    #[test]
    fn a_valid_signature_passes_and_any_change_is_refused(
        body in prop::collection::vec(any::<u8>(), 0..200),
        flip in any::<prop::sample::Index>(),
        delivery in "[!-~]{1,40}",
    ) {
        let signature = sign(SECRET, &body);
        prop_assert_eq!(aurad::api::check_webhook_request(SECRET, &headers(&signature, &delivery), &body), Ok(delivery.clone()));
        // The body changed by one bit.
        if !body.is_empty() {
            let mut changed = body.clone();
            changed[flip.index(body.len())] ^= 1;
            let refused = aurad::api::check_webhook_request(SECRET, &headers(&signature, &delivery), &changed);
            prop_assert_eq!(refused.map_err(|(status, _)| status), Err(401));
        }
        // Another secret, or the signature of another body.
        let refused = aurad::api::check_webhook_request(b"other secret", &headers(&signature, &delivery), &body);
        prop_assert_eq!(refused.map_err(|(status, _)| status), Err(401));
        let mut other = body.clone();
        other.push(b'x');
        let refused = aurad::api::check_webhook_request(SECRET, &headers(&sign(SECRET, &other), &delivery), &body);
        prop_assert_eq!(refused.map_err(|(status, _)| status), Err(401));
    }

    #[test]
    fn webhook_headers_of_any_shape_never_panic(signature in ".{0,80}", delivery in ".{0,250}", body in prop::collection::vec(any::<u8>(), 0..50)) {
        let result = aurad::api::check_webhook_request(SECRET, &headers(&signature, &delivery), &body);
        if let Err((status, _)) = result {
            prop_assert!(status == 401 || status == 400);
        }
    }
}
