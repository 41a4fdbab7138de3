//! The mock's fault plan: per model request, a failure injected instead of
//! the answer (error statuses, 429 with `Retry-After` in seconds or as an
//! HTTP date, a hang after the headers, a stream cut mid-way, a stream that
//! ends early, an event that is not JSON), in any wire format. Deterministic:
//! explicit faults by request number, faults on every n-th request, and
//! faults by chance from a seeded RNG that draws once per request and rule,
//! so the faults by request number do not depend on timing.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::http::{end_stream, write_raw, write_stream_events, write_stream_head};
use super::{Reply, Wire, anthropic, gemini, responses, stream_chunks};

/// How a 429 says when to come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// `Retry-After: N` (delta-seconds).
    Seconds(u64),
    /// `Retry-After: <HTTP date>` at least this far after the answer is
    /// sent (the date is rounded up to its whole second).
    Date(Duration),
}

/// A failure the mock sends instead of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// This status, with a JSON error body `mock fault: HTTP <status>`.
    Status(u16),
    /// 429 with a `Retry-After`.
    RateLimited(RetryAfter),
    /// The head of a 200 event stream, then silence until the client goes
    /// away.
    Hang,
    /// The first half of the answer's events, then the connection closes
    /// in the middle of the chunked body.
    Cut,
    /// The first half of the answer's events, then the body ends cleanly,
    /// without the answer's end marker.
    EndEarly,
    /// The first half of the answer's events, then an event whose data is
    /// not JSON.
    InvalidChunk,
}

/// One fault the mock injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injected {
    /// The model request it answered, 1-based.
    pub request: usize,
    pub fault: Fault,
    /// The `Retry-After` value sent, if any.
    pub retry_after: Option<String>,
}

#[derive(Clone, Debug)]
enum Rule {
    /// Requests n, 2n, 3n, ...
    Every(usize, Fault),
    /// Each request with this probability.
    Chance(f64, Fault),
}

/// Which model requests fail, and how. Explicit faults come first, then
/// the rules in the order they were added (the first that applies wins).
#[derive(Clone, Debug)]
pub struct FaultPlan {
    at: BTreeMap<usize, Fault>,
    rules: Vec<Rule>,
    rng: StdRng,
}

impl FaultPlan {
    /// A plan with no fault yet; `seed` drives the chance rules.
    pub fn new(seed: u64) -> FaultPlan {
        FaultPlan {
            at: BTreeMap::new(),
            rules: Vec::new(),
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Model request `request` (1-based) gets `fault`.
    pub fn at(mut self, request: usize, fault: Fault) -> FaultPlan {
        self.at.insert(request, fault);
        self
    }

    /// Faults on requests `n`, `2n`, `3n`, ...
    pub fn every(mut self, n: usize, fault: Fault) -> FaultPlan {
        assert!(n > 0, "every(0) would fault nothing");
        self.rules.push(Rule::Every(n, fault));
        self
    }

    /// Faults on each request with `probability`, drawn from the seeded RNG.
    pub fn chance(mut self, probability: f64, fault: Fault) -> FaultPlan {
        self.rules.push(Rule::Chance(probability, fault));
        self
    }

    /// The fault of model request `request` (1-based), if any. Every chance
    /// rule draws once per request, whichever rule wins.
    pub(super) fn fault_for(&mut self, request: usize) -> Option<Fault> {
        let mut chosen = self.at.get(&request).cloned();
        for rule in &self.rules {
            let applies = match rule {
                Rule::Every(n, _) => request.is_multiple_of(*n),
                Rule::Chance(p, _) => self.rng.random_bool(p.clamp(0.0, 1.0)),
            };
            if applies && chosen.is_none() {
                chosen = Some(match rule {
                    Rule::Every(_, f) | Rule::Chance(_, f) => f.clone(),
                });
            }
        }
        chosen
    }
}

/// The `Retry-After` value of `after`, as sent now.
pub(super) fn retry_after_value(after: RetryAfter) -> String {
    match after {
        RetryAfter::Seconds(n) => n.to_string(),
        RetryAfter::Date(wait) => {
            let at = SystemTime::now() + wait;
            let nanos = at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let at = if nanos == 0 {
                at
            } else {
                at + Duration::from_nanos(u64::from(1_000_000_000 - nanos))
            };
            httpdate::fmt_http_date(at)
        }
    }
}

/// Sends `fault` for a request of `wire`. `partial` is the answer whose
/// first events a cut stream carries.
pub(super) async fn send_fault(
    socket: &mut TcpStream,
    fault: &Fault,
    retry_after: Option<&str>,
    partial: &Reply,
    wire: Wire,
    model: &str,
) -> std::io::Result<()> {
    let error_body = |status: u16| {
        serde_json::json!({ "error": { "message": format!("mock fault: HTTP {status}"), "type": "mock_fault" } })
            .to_string()
    };
    match fault {
        Fault::Status(status) => write_raw(socket, *status, &[], &error_body(*status)).await,
        Fault::RateLimited(_) => {
            let headers = vec![(
                "Retry-After".to_string(),
                retry_after.unwrap_or("0").to_string(),
            )];
            write_raw(socket, 429, &headers, &error_body(429)).await
        }
        Fault::Hang => {
            write_stream_head(socket).await?;
            let mut sink = [0u8; 1024];
            while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            Ok(())
        }
        Fault::Cut | Fault::EndEarly | Fault::InvalidChunk => {
            let frames = frames_of(partial, wire, model);
            let half = (frames.len() / 2).max(1).min(frames.len());
            write_stream_head(socket).await?;
            write_stream_events(socket, &frames[..half]).await?;
            match fault {
                // Dropping the socket mid-body: no final chunk.
                Fault::Cut => Ok(()),
                Fault::EndEarly => end_stream(socket).await,
                _ => {
                    let garbled = match wire {
                        Wire::Anthropic => {
                            "event: content_block_delta\ndata: {\"type\": \"content_bl\n\n"
                        }
                        _ => "data: {\"choices\": [{\"delta\": {\"cont\n\n",
                    };
                    write_stream_events(socket, &[garbled.to_string()]).await?;
                    end_stream(socket).await
                }
            }
        }
    }
}

/// The SSE frames of a streamable reply in `wire`; a reply that is not a
/// stream stands in as a short text.
fn frames_of(reply: &Reply, wire: Wire, model: &str) -> Vec<String> {
    let reply = match reply {
        Reply::Raw { .. } | Reply::Drop | Reply::Hang | Reply::Delay(..) => {
            &Reply::Text("A partial answer from the mock.".into())
        }
        streamable => streamable,
    };
    match wire {
        Wire::OpenAi => stream_chunks(reply, model)
            .iter()
            .map(|data| format!("data: {data}\n\n"))
            .collect(),
        Wire::OpenAiResponses => responses::frames(reply, model),
        Wire::Anthropic => anthropic::frames(reply, model),
        Wire::Gemini => gemini::frames(reply, model),
    }
}
