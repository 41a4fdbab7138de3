//! A simulated Anthropic prompt cache, for the mock model server: no real
//! API is reachable from the tests, so the cache is reproduced from
//! Anthropic's documented rules, simplified:
//! - the prompt is rendered in the API's order: tools, system, messages,
//!   each content block one piece (a plain-string turn is one text block);
//! - a request with `cache_control` breakpoints writes a cache entry for
//!   the exact prefix up to each breakpoint, if that prefix is at least
//!   [`MIN_CACHEABLE_TOKENS`] long (the documented minimum of Sonnet and
//!   Opus models; shorter prefixes are not cached);
//! - a later request with a breakpoint reads the longest written prefix
//!   its own prompt starts with, up to its last breakpoint (without any
//!   breakpoint nothing is cached nor read);
//! - tokens are estimated as characters / 4.
//!
//! It answers as the Messages API reports usage: `input_tokens` is what was
//! neither read from nor written to the cache, `cache_read_input_tokens`
//! and `cache_creation_input_tokens` the rest.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support::mock_llm::{Recorded, Reply};

pub const MIN_CACHEABLE_TOKENS: u64 = 1024;

/// What the simulated API billed, summed over the requests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub requests: u64,
    /// All input tokens: uncached, read and written.
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Totals {
    /// The share of input tokens read from the cache.
    pub fn cached_share(&self) -> f64 {
        self.cache_read as f64 / self.input.max(1) as f64
    }
}

#[derive(Default)]
struct State {
    written: HashSet<String>,
    totals: Totals,
}

/// The simulated cache; clones share it.
#[derive(Clone, Default)]
pub struct CacheSim {
    state: Arc<Mutex<State>>,
}

fn tokens(text: &str) -> u64 {
    text.chars().count() as u64 / 4
}

/// The prompt's pieces in render order, each with whether it carries a
/// breakpoint. The mark itself is left out of the piece: it does not
/// change the prompt.
fn pieces(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |prefix: &str, block: &Value| {
        let mut block = block.clone();
        let marked = block
            .as_object_mut()
            .and_then(|o| o.remove("cache_control"))
            .is_some();
        out.push((format!("{prefix}{block}"), marked));
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push("tool:", tool);
    }
    match &body["system"] {
        Value::String(s) => push("system:", &json!({ "type": "text", "text": s })),
        Value::Array(blocks) => blocks.iter().for_each(|b| push("system:", b)),
        _ => {}
    }
    for turn in body["messages"].as_array().into_iter().flatten() {
        let role = format!("{}:", turn["role"].as_str().unwrap_or(""));
        match &turn["content"] {
            Value::String(s) => push(&role, &json!({ "type": "text", "text": s })),
            Value::Array(blocks) => blocks.iter().for_each(|b| push(&role, b)),
            _ => {}
        }
    }
    out
}

impl CacheSim {
    /// Answers one Messages request with `answer`, billing it as the
    /// cache rules say.
    pub fn answer(&self, request: &Recorded, answer: &str) -> Reply {
        let pieces = pieces(&request.body);
        let mut prefixes = Vec::with_capacity(pieces.len());
        let mut prefix = String::new();
        for (piece, _) in &pieces {
            prefix.push_str(piece);
            prefix.push('\u{1e}');
            prefixes.push(prefix.clone());
        }
        let total = tokens(&prefix);
        let last_mark = pieces.iter().rposition(|(_, marked)| *marked);
        let mut state = self.state.lock().unwrap();
        let (mut read, mut written_to) = (0, 0);
        if let Some(last_mark) = last_mark {
            read = prefixes[..=last_mark]
                .iter()
                .filter(|p| state.written.contains(*p))
                .map(|p| tokens(p))
                .max()
                .unwrap_or(0);
            for (at, (_, marked)) in pieces.iter().enumerate() {
                let p = &prefixes[at];
                if *marked && tokens(p) >= MIN_CACHEABLE_TOKENS && state.written.insert(p.clone()) {
                    written_to = written_to.max(tokens(p));
                }
            }
        }
        let write = written_to.saturating_sub(read);
        let uncached = total - read - write;
        let output = tokens(answer).max(1);
        state.totals.requests += 1;
        state.totals.input += total;
        state.totals.cache_read += read;
        state.totals.cache_write += write;
        Reply::Chunks(vec![
            json!({ "type": "message_start", "message": {
                "id": format!("msg_sim_{}", state.totals.requests), "type": "message",
                "role": "assistant", "model": "claude-sim", "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": { "input_tokens": uncached, "cache_read_input_tokens": read,
                           "cache_creation_input_tokens": write, "output_tokens": 1 },
            } }),
            json!({ "type": "content_block_start", "index": 0,
                    "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0,
                    "delta": { "type": "text_delta", "text": answer } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "message_delta",
                    "delta": { "stop_reason": "end_turn", "stop_sequence": null },
                    "usage": { "output_tokens": output } }),
            json!({ "type": "message_stop" }),
        ])
    }

    pub fn totals(&self) -> Totals {
        self.state.lock().unwrap().totals
    }
}
