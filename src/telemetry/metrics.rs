//! The daemon's Prometheus metrics, kept per daemon instance (no global
//! recorder: tests run several daemons in one process) in a
//! `prometheus-client` registry, and rendered in the text exposition format
//! 0.0.4 for `GET /metrics`.
//!
//! May depend on `prometheus-client` and `crate::types` only. The metrics are
//! atomics; one std `Mutex` orders replacing the MCP server set against
//! rendering, and is never held across an `.await`.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::types::{McpState, RunEvent};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the `aurad_run_duration_seconds` buckets; `+Inf`
/// is implied.
pub const RUN_DURATION_BUCKETS: [f64; 9] = [0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentState {
    agent: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabel {
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    agent: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
    state: String,
}

type RunHistograms = Family<AgentLabel, Histogram, fn() -> Histogram>;

fn run_histogram() -> Histogram {
    Histogram::new(RUN_DURATION_BUCKETS)
}

/// The daemon's metrics. `Send + Sync`; share it as `Arc<Metrics>`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    runs: Family<AgentState, Counter>,
    run_durations: RunHistograms,
    runs_running: Gauge,
    runs_queued: Gauge,
    runs_waiting_approval: Gauge,
    tool_calls: Family<ToolLabel, Counter>,
    tool_failures: Family<ToolLabel, Counter>,
    tokens: Family<TokenLabels, Counter>,
    cost_usd: Family<AgentLabel, Counter<f64, AtomicU64>>,
    reloads: Counter,
    reload_errors: Counter,
    mcp_up: Family<ServerLabels, Gauge>,
    schedule_fires: Family<AgentLabel, Counter>,
    config_skipped: Family<KindLabel, Gauge>,
    /// Taken while the MCP server set or the skipped counts are replaced
    /// and while rendering, so a scrape never sees a set half replaced.
    mcp_replace: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            runs: Family::default(),
            run_durations: RunHistograms::new_with_constructor(run_histogram),
            runs_running: Gauge::default(),
            runs_queued: Gauge::default(),
            runs_waiting_approval: Gauge::default(),
            tool_calls: Family::default(),
            tool_failures: Family::default(),
            tokens: Family::default(),
            cost_usd: Family::default(),
            reloads: Counter::default(),
            reload_errors: Counter::default(),
            mcp_up: Family::default(),
            schedule_fires: Family::default(),
            config_skipped: Family::default(),
            mcp_replace: Mutex::new(()),
        };
        // The registry adds `_total` to counters and a final `.` to helps.
        let mut r = m.registry;
        r.register(
            "aurad_runs",
            "Runs by agent and final state (including skipped and missed)",
            m.runs.clone(),
        );
        r.register(
            "aurad_run_duration_seconds",
            "Wall-clock duration of runs that ran, by agent",
            m.run_durations.clone(),
        );
        r.register(
            "aurad_runs_running",
            "Runs executing now",
            m.runs_running.clone(),
        );
        r.register(
            "aurad_runs_queued",
            "Runs waiting for a free slot",
            m.runs_queued.clone(),
        );
        r.register(
            "aurad_runs_waiting_approval",
            "Runs waiting for a person's approval (holding no slot)",
            m.runs_waiting_approval.clone(),
        );
        r.register(
            "aurad_tool_calls",
            "Tool calls executed, by tool",
            m.tool_calls.clone(),
        );
        r.register(
            "aurad_tool_failures",
            "Tool calls whose result was an error, by tool",
            m.tool_failures.clone(),
        );
        r.register(
            "aurad_model_tokens",
            "Model tokens by agent and direction (input or output)",
            m.tokens.clone(),
        );
        r.register(
            "aurad_model_cost_usd",
            "US dollars spent on model calls by agent (calls whose model has a price in aurad.yaml)",
            m.cost_usd.clone(),
        );
        r.register(
            "aurad_reloads",
            "Configuration reloads attempted",
            m.reloads.clone(),
        );
        r.register(
            "aurad_reload_errors",
            "Configuration reloads rejected because of errors (the old configuration stayed)",
            m.reload_errors.clone(),
        );
        r.register(
            "aurad_mcp_server_up",
            "1 while an MCP server is connected, 0 while it is connecting, restarting or failed; `state` names the state",
            m.mcp_up.clone(),
        );
        r.register(
            "aurad_schedule_fires",
            "Cron schedule fires, by agent",
            m.schedule_fires.clone(),
        );
        r.register(
            "aurad_config_skipped",
            "Items (agent, skill, plugin, mcp_server, mcp_file) the current configuration left out or kept at their last good version because of errors",
            m.config_skipped.clone(),
        );
        Metrics { registry: r, ..m }
    }

    fn mcp_guard(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data: a panic elsewhere cannot corrupt it.
        self.mcp_replace
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A run ended in `state` after running for `duration`.
    pub fn run_finished(&self, agent: &str, state: &str, duration: Duration) {
        self.run_recorded(agent, state);
        self.run_durations
            .get_or_create(&AgentLabel {
                agent: agent.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// A run recorded without running (`skipped`, `missed`): counted in
    /// `aurad_runs_total` only.
    pub fn run_recorded(&self, agent: &str, state: &str) {
        self.runs
            .get_or_create(&AgentState {
                agent: agent.to_owned(),
                state: state.to_owned(),
            })
            .inc();
    }

    pub fn set_runs_in_flight(&self, n: usize) {
        self.runs_running.set(gauge_value(n));
    }

    pub fn set_runs_queued(&self, n: usize) {
        self.runs_queued.set(gauge_value(n));
    }

    pub fn set_runs_waiting_approval(&self, n: usize) {
        self.runs_waiting_approval.set(gauge_value(n));
    }

    /// One tool call finished; `failed` when its result was an error.
    pub fn tool_call(&self, tool: &str, failed: bool) {
        let label = ToolLabel {
            tool: tool.to_owned(),
        };
        self.tool_calls.get_or_create(&label).inc();
        if failed {
            self.tool_failures.get_or_create(&label).inc();
        }
    }

    pub fn model_tokens(&self, agent: &str, input: u64, output: u64) {
        self.model_call(agent, input, output, None);
    }

    /// One model call's tokens and, where its price is known, its cost.
    fn model_call(&self, agent: &str, input: u64, output: u64, cost_usd: Option<f64>) {
        for (direction, n) in [("input", input), ("output", output)] {
            self.tokens
                .get_or_create(&TokenLabels {
                    agent: agent.to_owned(),
                    direction,
                })
                .inc_by(n);
        }
        if let Some(cost) = cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            self.cost_usd
                .get_or_create(&AgentLabel {
                    agent: agent.to_owned(),
                })
                .inc_by(cost);
        }
    }

    /// A reload was attempted: `aurad_reloads_total` counts every attempt,
    /// `aurad_reload_errors_total` the ones that kept the old snapshot.
    pub fn reload(&self, ok: bool) {
        self.reloads.inc();
        if !ok {
            self.reload_errors.inc();
        }
    }

    /// The current state of every MCP server, as `(server, state)`; replaces
    /// the previous set, so servers gone from the config disappear. The
    /// gauge is 1 only for a connected server.
    pub fn set_mcp_states(&self, states: &[(String, McpState)]) {
        let _replacing = self.mcp_guard();
        self.mcp_up.clear();
        for (server, state) in states {
            let labels = ServerLabels {
                server: server.clone(),
                state: state.as_str().to_string(),
            };
            self.mcp_up
                .get_or_create(&labels)
                .set(i64::from(*state == McpState::Connected));
        }
    }

    /// What the current snapshot left out, as `(kind, items)`; replaces
    /// the previous counts.
    pub fn set_config_skipped(&self, counts: &[(&'static str, u64)]) {
        let _replacing = self.mcp_guard();
        self.config_skipped.clear();
        for (kind, n) in counts {
            let n = i64::try_from(*n).unwrap_or(i64::MAX);
            self.config_skipped
                .get_or_create(&KindLabel { kind })
                .set(n);
        }
    }

    /// A cron schedule of `agent` fired.
    pub fn scheduled_fire(&self, agent: &str) {
        self.schedule_fires
            .get_or_create(&AgentLabel {
                agent: agent.to_owned(),
            })
            .inc();
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
    /// in registration order.
    #[expect(
        clippy::expect_used,
        reason = "encoding writes into a String, whose fmt::Write never fails"
    )]
    pub fn render(&self) -> String {
        let _replacing = self.mcp_guard();
        let mut out = String::with_capacity(4096);
        prometheus_text::encode(&mut out, &self.registry)
            .expect("writing into a String cannot fail");
        out
    }
}

/// A count as a gauge value (gauges are `i64`).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
