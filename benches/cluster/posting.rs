//! The cluster bench's client side: runs posted to the nodes
//! (`POST /v1/agents/wNN/runs`, each input carrying a marker of its phase
//! and index), at a steady pace or as fast as a few threads can, and what
//! is then read back: POST-to-start latencies and the check that each run
//! ran exactly once. Depends on the test support's HTTP client and mock
//! LLM, and `cluster/db.rs`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::db::RunRow;
use crate::support::mock_llm::MockLlm;
use crate::support::serve::http_post_json;

/// Agents the API runs are spread over (`w00`..).
pub const WORKER_AGENTS: usize = 20;

/// What one POST gave: the run's index, when it was sent, and the run id
/// or what went wrong.
pub struct Posted {
    pub index: usize,
    pub sent_at: DateTime<Utc>,
    pub id: Result<String, String>,
}

/// The marker of run `index` of a phase, in its input.
fn marker(phase: &str, index: usize) -> String {
    format!("{phase}-{index:06}")
}

/// The index in a run's input after `phase-`.
pub fn index_of(phase: &str, input: &str) -> Option<usize> {
    let at = input.find(&format!("{phase}-"))? + phase.len() + 1;
    input.get(at..at + 6)?.parse().ok()
}

/// `POST /v1/agents/wNN/runs` of run `index` to node `index % nodes`.
fn post(addrs: &[SocketAddr], phase: &str, index: usize) -> Posted {
    let addr = addrs[index % addrs.len()];
    let agent = format!("w{:02}", index % WORKER_AGENTS);
    let body =
        serde_json::json!({ "input": format!("Bench run {}: say ok.", marker(phase, index)) })
            .to_string();
    // To the millisecond, as both backends store times: the difference
    // with a stored time is then never negative, with a 1 ms resolution.
    let sent_at = DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap();
    let id = match http_post_json(addr, &format!("/v1/agents/{agent}/runs"), &body) {
        Some((202, answer)) => serde_json::from_str::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_string))
            .ok_or_else(|| format!("no id in {answer}")),
        Some((status, answer)) => Err(format!("{addr}: status {status}: {answer}")),
        None => Err(format!("{addr}: no answer")),
    };
    Posted { index, sent_at, id }
}

/// Runs `n` POSTs on `threads` client threads, round-robin over `addrs`,
/// thread k posting runs k, k + threads, ...; run i not before `due(i)`
/// after the start when given.
pub fn post_all(
    addrs: &[SocketAddr],
    phase: &str,
    n: usize,
    threads: usize,
    due: Option<&(dyn Fn(usize) -> Duration + Sync)>,
) -> Vec<Posted> {
    let start = Instant::now();
    let mut posted: Vec<Posted> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                scope.spawn(move || {
                    (k..n)
                        .step_by(threads)
                        .map(|i| {
                            if let Some(due) = due {
                                let at = start + due(i);
                                let now = Instant::now();
                                if at > now {
                                    std::thread::sleep(at - now);
                                }
                            }
                            post(addrs, phase, i)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    posted.sort_by_key(|p| p.index);
    posted
}

pub fn post_errors(posted: &[Posted]) -> Vec<&str> {
    posted
        .iter()
        .filter_map(|p| p.id.as_ref().err().map(String::as_str))
        .collect()
}

pub fn ms_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

pub fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// POST sent -> stored `started_at` of each of `rows` (sorted, in ms), and
/// how many rows have no start or no POST of theirs.
pub fn start_latencies(phase: &str, posted: &[Posted], rows: &[RunRow]) -> (Vec<f64>, usize) {
    let mut latencies = Vec::new();
    let mut never_started = 0;
    for row in rows {
        let sent = index_of(phase, &row.input).and_then(|i| posted.get(i));
        match (sent, row.started_at) {
            (Some(p), Some(started)) => latencies.push(ms_between(p.sent_at, started)),
            _ => never_started += 1,
        }
    }
    (sorted(latencies), never_started)
}

/// Every way the `n` runs posted in `phase` could fail to have run exactly
/// once: POSTs failed, stored rows != POSTs, ids not distinct or not the
/// ones answered, runs not succeeded, an input not at the mock exactly
/// once (the mock's requests of the phase only: forgotten before it).
/// Empty when each ran exactly once.
pub fn exactly_once(
    phase: &str,
    n: usize,
    posted: &[Posted],
    rows: &[RunRow],
    mock: &MockLlm,
) -> Vec<String> {
    let mut problems = Vec::new();
    let errors = post_errors(posted);
    if !errors.is_empty() {
        problems.push(format!(
            "{} POSTs failed (first: {})",
            errors.len(),
            errors[0]
        ));
    }
    if rows.len() != n {
        problems.push(format!("{} runs stored for {n} POSTs", rows.len()));
    }
    let ids: HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    if ids.len() != rows.len() {
        problems.push(format!("{} distinct ids in {} rows", ids.len(), rows.len()));
    }
    let answered: HashSet<&str> = posted.iter().filter_map(|p| p.id.as_deref().ok()).collect();
    if answered != ids {
        problems.push(format!(
            "{} ids answered to POSTs are not stored, {} stored were not answered",
            answered.difference(&ids).count(),
            ids.difference(&answered).count()
        ));
    }
    let not_succeeded: Vec<&RunRow> = rows.iter().filter(|r| r.state != "succeeded").collect();
    if let Some(first) = not_succeeded.first() {
        problems.push(format!(
            "{} runs not succeeded (first: {} {})",
            not_succeeded.len(),
            first.id,
            first.state
        ));
    }
    // Each run's input reached the model exactly once.
    let mut at_mock = vec![0usize; n];
    for request in mock.requests() {
        let body = request.body.to_string();
        if let Some(i) = index_of(phase, &body).filter(|&i| i < n) {
            at_mock[i] += 1;
        }
    }
    let never = at_mock.iter().filter(|&&c| c == 0).count();
    let twice = at_mock.iter().filter(|&&c| c > 1).count();
    if never + twice > 0 {
        problems.push(format!(
            "at the mock: {never} runs' inputs never, {twice} more than once"
        ));
    }
    problems
}
