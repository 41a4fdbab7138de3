//! The daemon's Prometheus metrics, kept per daemon instance (no global
//! recorder: tests run several daemons in one process) and rendered in the
//! text exposition format 0.0.4 for `GET /metrics`.
//!
//! May depend on `crate::types` only. All state sits behind one std `Mutex`
//! that is taken for a few map updates and never held across an `.await`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::types::RunEvent;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the `aurad_run_duration_seconds` buckets; `+Inf`
/// is implied.
pub const RUN_DURATION_BUCKETS: [f64; 9] = [0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0];

/// The daemon's metrics. `Send + Sync`; share it as `Arc<Metrics>`.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// (agent, state) -> runs.
    runs: BTreeMap<(String, String), u64>,
    /// agent -> durations of the runs that ran.
    run_durations: BTreeMap<String, Histogram>,
    runs_running: u64,
    runs_queued: u64,
    tool_calls: BTreeMap<String, u64>,
    tool_failures: BTreeMap<String, u64>,
    /// (agent, direction) -> tokens.
    tokens: BTreeMap<(String, &'static str), u64>,
    /// agent -> US dollars of the model calls whose price is known.
    cost_usd: BTreeMap<String, f64>,
    reloads: u64,
    reload_errors: u64,
    /// (server, state) pairs whose gauge is 1.
    mcp_states: Vec<(String, String)>,
    schedule_fires: u64,
    /// (kind, items) the current snapshot left out because of errors.
    config_skipped: Vec<(&'static str, u64)>,
}

/// Observation counts per bucket (not cumulative), with sum and count.
#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; RUN_DURATION_BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, value: f64) {
        if let Some(i) = RUN_DURATION_BUCKETS.iter().position(|le| value <= *le) {
            self.buckets[i] += 1;
        }
        self.sum += value;
        self.count += 1;
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Counters stay meaningful after a panic elsewhere; keep serving them.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A run ended in `state` after running for `duration`.
    pub fn run_finished(&self, agent: &str, state: &str, duration: Duration) {
        let mut inner = self.lock();
        *inner
            .runs
            .entry((agent.to_owned(), state.to_owned()))
            .or_default() += 1;
        inner
            .run_durations
            .entry(agent.to_owned())
            .or_default()
            .observe(duration.as_secs_f64());
    }

    /// A run recorded without running (`skipped`, `missed`): counted in
    /// `aurad_runs_total` only.
    pub fn run_recorded(&self, agent: &str, state: &str) {
        *self
            .lock()
            .runs
            .entry((agent.to_owned(), state.to_owned()))
            .or_default() += 1;
    }

    pub fn set_runs_in_flight(&self, n: usize) {
        self.lock().runs_running = n as u64;
    }

    pub fn set_runs_queued(&self, n: usize) {
        self.lock().runs_queued = n as u64;
    }

    /// One tool call finished; `failed` when its result was an error.
    pub fn tool_call(&self, tool: &str, failed: bool) {
        let mut inner = self.lock();
        *inner.tool_calls.entry(tool.to_owned()).or_default() += 1;
        if failed {
            *inner.tool_failures.entry(tool.to_owned()).or_default() += 1;
        }
    }

    pub fn model_tokens(&self, agent: &str, input: u64, output: u64) {
        self.model_call(agent, input, output, None);
    }

    /// One model call's tokens and, where its price is known, its cost.
    fn model_call(&self, agent: &str, input: u64, output: u64, cost_usd: Option<f64>) {
        let mut inner = self.lock();
        *inner.tokens.entry((agent.to_owned(), "input")).or_default() += input;
        *inner
            .tokens
            .entry((agent.to_owned(), "output"))
            .or_default() += output;
        if let Some(cost) = cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            *inner.cost_usd.entry(agent.to_owned()).or_default() += cost;
        }
    }

    /// A reload was attempted: `aurad_reloads_total` counts every attempt,
    /// `aurad_reload_errors_total` the ones that kept the old snapshot.
    pub fn reload(&self, ok: bool) {
        let mut inner = self.lock();
        inner.reloads += 1;
        if !ok {
            inner.reload_errors += 1;
        }
    }

    /// The current state of every MCP server, as `(server, state)`; replaces
    /// the previous set, so servers gone from the config disappear.
    pub fn set_mcp_states(&self, states: &[(String, String)]) {
        let mut states = states.to_vec();
        states.sort();
        states.dedup();
        self.lock().mcp_states = states;
    }

    /// What the current snapshot left out, as `(kind, items)`; replaces
    /// the previous counts.
    pub fn set_config_skipped(&self, counts: &[(&'static str, u64)]) {
        self.lock().config_skipped = counts.to_vec();
    }

    /// A cron schedule fired.
    pub fn scheduled_fire(&self) {
        self.lock().schedule_fires += 1;
    }

    /// Updates the tool and token counters from one event of a run of
    /// `agent`; other events are ignored.
    pub fn observe_event(&self, agent: &str, event: &RunEvent) {
        match event {
            RunEvent::ToolResult { name, is_error, .. } => self.tool_call(name, *is_error),
            RunEvent::Usage {
                usage, cost_usd, ..
            } => self.model_call(
                agent,
                usage.input_tokens.unwrap_or(0),
                usage.output_tokens.unwrap_or(0),
                *cost_usd,
            ),
            _ => {}
        }
    }

    /// All metrics in the Prometheus text exposition format 0.0.4, families
    /// in a fixed order and samples sorted by their labels.
    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::with_capacity(4096);

        family(
            &mut out,
            "aurad_runs_total",
            "counter",
            "Runs by agent and final state (including skipped and missed).",
        );
        for ((agent, state), n) in &inner.runs {
            sample(
                &mut out,
                "aurad_runs_total",
                &[("agent", agent), ("state", state)],
                n,
            );
        }

        family(
            &mut out,
            "aurad_run_duration_seconds",
            "histogram",
            "Wall-clock duration of runs that ran, by agent.",
        );
        for (agent, h) in &inner.run_durations {
            let mut cumulative = 0;
            for (le, n) in RUN_DURATION_BUCKETS.iter().zip(h.buckets) {
                cumulative += n;
                let le = le.to_string();
                sample(
                    &mut out,
                    "aurad_run_duration_seconds_bucket",
                    &[("agent", agent), ("le", &le)],
                    cumulative,
                );
            }
            sample(
                &mut out,
                "aurad_run_duration_seconds_bucket",
                &[("agent", agent), ("le", "+Inf")],
                h.count,
            );
            sample(
                &mut out,
                "aurad_run_duration_seconds_sum",
                &[("agent", agent)],
                h.sum,
            );
            sample(
                &mut out,
                "aurad_run_duration_seconds_count",
                &[("agent", agent)],
                h.count,
            );
        }

        family(
            &mut out,
            "aurad_runs_running",
            "gauge",
            "Runs executing now.",
        );
        sample(&mut out, "aurad_runs_running", &[], inner.runs_running);
        family(
            &mut out,
            "aurad_runs_queued",
            "gauge",
            "Runs waiting for a free slot.",
        );
        sample(&mut out, "aurad_runs_queued", &[], inner.runs_queued);

        family(
            &mut out,
            "aurad_tool_calls_total",
            "counter",
            "Tool calls executed, by tool.",
        );
        for (tool, n) in &inner.tool_calls {
            sample(&mut out, "aurad_tool_calls_total", &[("tool", tool)], n);
        }
        family(
            &mut out,
            "aurad_tool_failures_total",
            "counter",
            "Tool calls whose result was an error, by tool.",
        );
        for (tool, n) in &inner.tool_failures {
            sample(&mut out, "aurad_tool_failures_total", &[("tool", tool)], n);
        }

        family(
            &mut out,
            "aurad_model_tokens_total",
            "counter",
            "Model tokens by agent and direction (input or output).",
        );
        for ((agent, direction), n) in &inner.tokens {
            sample(
                &mut out,
                "aurad_model_tokens_total",
                &[("agent", agent), ("direction", direction)],
                n,
            );
        }

        family(
            &mut out,
            "aurad_model_cost_usd_total",
            "counter",
            "US dollars spent on model calls by agent (calls whose model has a price in aurad.yaml).",
        );
        for (agent, cost) in &inner.cost_usd {
            sample(
                &mut out,
                "aurad_model_cost_usd_total",
                &[("agent", agent)],
                cost,
            );
        }

        family(
            &mut out,
            "aurad_reloads_total",
            "counter",
            "Configuration reloads attempted.",
        );
        sample(&mut out, "aurad_reloads_total", &[], inner.reloads);
        family(
            &mut out,
            "aurad_reload_errors_total",
            "counter",
            "Configuration reloads rejected because of errors (the old configuration stayed).",
        );
        sample(
            &mut out,
            "aurad_reload_errors_total",
            &[],
            inner.reload_errors,
        );

        family(
            &mut out,
            "aurad_mcp_server_up",
            "gauge",
            "1 for the current state of each MCP server.",
        );
        for (server, state) in &inner.mcp_states {
            sample(
                &mut out,
                "aurad_mcp_server_up",
                &[("server", server), ("state", state)],
                1,
            );
        }

        family(
            &mut out,
            "aurad_schedule_fires_total",
            "counter",
            "Cron schedule fires.",
        );
        sample(
            &mut out,
            "aurad_schedule_fires_total",
            &[],
            inner.schedule_fires,
        );

        family(
            &mut out,
            "aurad_config_skipped",
            "gauge",
            "Items (agent, skill, plugin, mcp_server, mcp_file) the current configuration left out or kept at their last good version because of errors.",
        );
        for (kind, n) in &inner.config_skipped {
            sample(&mut out, "aurad_config_skipped", &[("kind", kind)], n);
        }

        out
    }
}

/// Writes the `# HELP` and `# TYPE` lines of a family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample line.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escape_label(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Escapes a label value: backslash, double quote and newline.
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
