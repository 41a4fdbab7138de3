//! `limits:` of an agent: iterations, tool calls, timeout, context budget,
//! and the spending budgets (tokens per run, US dollars per day). Each
//! limit ends a run with its own state and reason when reached.

use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::diag::Diagnostic;
use super::duration::duration_value;
use super::yaml_value::describe_value;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_iterations: Option<u32>,
    max_tool_calls: Option<u32>,
    timeout: Option<Value>,
    max_context_tokens: Option<usize>,
    max_tokens_per_run: Option<Value>,
    max_cost_usd_per_day: Option<Value>,
}

/// Run limits; each ends a run with its own state and reason when reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_iterations: u32,
    pub max_tool_calls: u32,
    pub timeout: Duration,
    pub max_context_tokens: usize,
    /// Input plus output tokens of all the run's model calls; once reached
    /// the run makes no further model call and ends `budget_exceeded`.
    pub max_tokens_per_run: Option<u64>,
    /// US dollars across all the agent's runs of one day in its time zone
    /// (that of its first schedule, else UTC); needs `prices` for its model.
    pub max_cost_usd_per_day: Option<f64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_iterations: 10,
            max_tool_calls: 50,
            timeout: Duration::from_secs(600),
            max_context_tokens: 32_000,
            max_tokens_per_run: None,
            max_cost_usd_per_day: None,
        }
    }
}

/// Validates `raw`; `err(keys, message)` makes a placed diagnostic.
pub(super) fn parse_limits(
    raw: &RawLimits,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> Limits {
    let mut limits = Limits::default();
    if let Some(n) = raw.max_iterations {
        if n == 0 {
            diags.push(err(
                &["limits", "max_iterations"],
                "`limits.max_iterations` must be at least 1".into(),
            ));
        }
        limits.max_iterations = n;
    }
    if let Some(n) = raw.max_tool_calls {
        limits.max_tool_calls = n;
    }
    if let Some(n) = raw.max_context_tokens {
        if n < 256 {
            diags.push(err(
                &["limits", "max_context_tokens"],
                format!("`limits.max_context_tokens` is {n}; it must be at least 256"),
            ));
        }
        limits.max_context_tokens = n;
    }
    if let Some(v) = &raw.timeout {
        match duration_value(v) {
            Ok(d) if d.is_zero() => diags.push(err(
                &["limits", "timeout"],
                "`limits.timeout` must be more than 0".into(),
            )),
            Ok(d) => limits.timeout = d,
            Err(msg) => diags.push(err(
                &["limits", "timeout"],
                format!("limits.timeout: {msg}"),
            )),
        }
    }
    if let Some(v) = &raw.max_tokens_per_run {
        match v.as_u64() {
            Some(n) if n > 0 => limits.max_tokens_per_run = Some(n),
            _ => diags.push(err(
                &["limits", "max_tokens_per_run"],
                format!(
                    "`limits.max_tokens_per_run` is {}; it must be a whole number of tokens, at least 1 (e.g. 200000)",
                    describe_value(v)
                ),
            )),
        }
    }
    if let Some(v) = &raw.max_cost_usd_per_day {
        match v.as_f64() {
            Some(n) if n.is_finite() && n > 0.0 => limits.max_cost_usd_per_day = Some(n),
            _ => diags.push(err(
                &["limits", "max_cost_usd_per_day"],
                format!(
                    "`limits.max_cost_usd_per_day` is {}; it must be a number of US dollars above 0 (e.g. 5.0)",
                    describe_value(v)
                ),
            )),
        }
    }
    limits
}
