//! The daemon's Prometheus metrics, kept per daemon instance (no global
//! recorder: tests run several daemons in one process) in a
//! `prometheus-client` registry, and rendered in the text exposition format
//! 0.0.4 for `GET /metrics`.
//!
//! Model calls are counted by provider (its name in aurad.yaml) and model
//! (`provider/model`): each attempt's outcome and latency as the run's
//! provider sees it ([`super::MeteredProvider`]), and from the run's
//! events its retries, fallbacks, waits for the provider's shared limits
//! and tokens (cached input tokens too, for a cache-hit ratio). The
//! limits' gauges (calls waiting, in flight) are read from the gates at
//! scrape time.
//!
//! May depend on `prometheus-client`, `crate::llm::limits` (the gates) and
//! `crate::types`. The metrics are atomics; one std `Mutex` orders
//! replacing the MCP server set and the gate gauges against rendering, and
//! is never held across an `.await`.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::llm::limits::{self, Gates};
use crate::types::{McpState, RunEvent};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the `aurad_run_duration_seconds` buckets; `+Inf`
/// is implied.
pub const RUN_DURATION_BUCKETS: [f64; 9] = [0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0];

/// Upper bounds (seconds) of the `aurad_model_call_duration_seconds`
/// buckets: from a short answer's first tokens to a long reasoning one.
pub const MODEL_CALL_BUCKETS: [f64; 10] =
    [0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: String,
    model: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    provider: String,
    model: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    from: String,
    to: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelTokenLabels {
    provider: String,
    model: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelMessageLabels {
    channel: String,
    /// `in`, `out`, `ignored` or `duplicate`.
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: String,
}

type RunHistograms = Family<AgentLabel, Histogram, fn() -> Histogram>;
type CallHistograms = Family<CallLabels, Histogram, fn() -> Histogram>;

fn run_histogram() -> Histogram {
    Histogram::new(RUN_DURATION_BUCKETS)
}

fn call_histogram() -> Histogram {
    Histogram::new(MODEL_CALL_BUCKETS)
}

/// The provider part of `provider/model` (all of `test`).
fn provider_of(model: &str) -> &str {
    model.split_once('/').map_or(model, |(p, _)| p)
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
    model_calls: Family<CallLabels, Counter>,
    model_call_durations: CallHistograms,
    model_retries: Family<RetryLabels, Counter>,
    model_fallbacks: Family<FallbackLabels, Counter>,
    model_tokens: Family<ModelTokenLabels, Counter>,
    limit_waits: Family<ProviderLabel, Counter>,
    limit_waited: Family<ProviderLabel, Counter<f64, AtomicU64>>,
    limit_waiting: Family<ProviderLabel, Gauge>,
    limit_in_flight: Family<ProviderLabel, Gauge>,
    channel_messages: Family<ChannelMessageLabels, Counter>,
    channel_connected: Family<ChannelLabel, Gauge>,
    /// The provider gates read at scrape time (the process's own, but for
    /// a test's).
    gates: GateSource,
    /// Taken while the MCP server set, the skipped counts or the gate
    /// gauges are replaced and while rendering, so a scrape never sees a
    /// set half replaced.
    mcp_replace: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::with_gates(limits::gates())
    }

    /// Metrics whose limit gauges read `gates`.
    pub fn with_gates(gates: &'static Gates) -> Metrics {
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
            model_calls: Family::default(),
            model_call_durations: CallHistograms::new_with_constructor(call_histogram),
            model_retries: Family::default(),
            model_fallbacks: Family::default(),
            model_tokens: Family::default(),
            limit_waits: Family::default(),
            limit_waited: Family::default(),
            limit_waiting: Family::default(),
            limit_in_flight: Family::default(),
            channel_messages: Family::default(),
            channel_connected: Family::default(),
            gates: GateSource(gates),
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
        r.register(
            "aurad_model_calls",
            "Model call attempts by provider, model and outcome (ok, rate_limited, server_error, client_error, unreachable, stream_cut, bad_stream, config, cancelled)",
            m.model_calls.clone(),
        );
        r.register(
            "aurad_model_call_duration_seconds",
            "Latency of model call attempts, from the request to the answer's end, by provider, model and outcome (waits for the provider's limits excluded)",
            m.model_call_durations.clone(),
        );
        r.register(
            "aurad_model_retries",
            "Model calls tried again, by provider, model and reason",
            m.model_retries.clone(),
        );
        r.register(
            "aurad_model_fallbacks",
            "Model calls moved down the agent's model chain, by model from, model to and reason",
            m.model_fallbacks.clone(),
        );
        r.register(
            "aurad_provider_tokens",
            "Model tokens by provider, model and direction (input, output, and cached_input: the part of input read from the provider's prompt cache)",
            m.model_tokens.clone(),
        );
        r.register(
            "aurad_provider_limit_waits",
            "Model calls that waited for their provider's shared limits, by provider",
            m.limit_waits.clone(),
        );
        r.register(
            "aurad_provider_limit_wait_seconds",
            "Seconds model calls waited for their provider's shared limits, by provider",
            m.limit_waited.clone(),
        );
        r.register(
            "aurad_provider_limit_waiting",
            "Model calls waiting now for their provider's limits, by provider (providers with limits)",
            m.limit_waiting.clone(),
        );
        r.register(
            "aurad_provider_limit_in_flight",
            "Model calls in flight now under their provider's limits, by provider (providers with limits)",
            m.limit_in_flight.clone(),
        );
        r.register(
            "aurad_channel_messages",
            "Channel updates and messages by channel and kind: in (handed to the agent), out (sent), ignored (not on the allow-list), duplicate (seen before)",
            m.channel_messages.clone(),
        );
        r.register(
            "aurad_channel_connected",
            "Whether each channel is connected to its platform (1) or not (0)",
            m.channel_connected.clone(),
        );
        Metrics { registry: r, ..m }
    }

    /// One update or message of `channel` of `kind` (`in`, `out`,
    /// `ignored`, `duplicate`).
    pub fn channel_message(&self, channel: &str, kind: &str) {
        self.channel_messages
            .get_or_create(&ChannelMessageLabels {
                channel: channel.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The channels that run now and whether each is connected; a channel
    /// removed is dropped from the gauge.
    pub fn set_channels(&self, channels: &[crate::types::ChannelStatus]) {
        let _replacing = self.mcp_guard();
        self.channel_connected.clear();
        for channel in channels {
            let up = matches!(channel.connection, crate::types::Connection::Connected);
            self.channel_connected
                .get_or_create(&ChannelLabel {
                    channel: channel.name.clone(),
                })
                .set(i64::from(up));
        }
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

    /// One attempt of a model call to `model` (`provider/model`) ended
    /// with `outcome` after `duration`.
    pub fn model_attempt(&self, model: &str, outcome: &'static str, duration: Duration) {
        let labels = CallLabels {
            provider: provider_of(model).to_string(),
            model: model.to_string(),
            outcome,
        };
        self.model_calls.get_or_create(&labels).inc();
        self.model_call_durations
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    /// Updates the tool, token, retry, fallback and limit counters from
    /// one event of `run`; other events are ignored.
    pub fn observe_event(&self, run: &mut RunEvents, event: &RunEvent) {
        match event {
            RunEvent::Started { model, .. } => run.model = model.clone(),
            RunEvent::ToolResult { name, is_error, .. } => self.tool_call(name, *is_error),
            RunEvent::Usage {
                usage,
                cost_usd,
                model,
                ..
            } => {
                self.model_call(
                    &run.agent,
                    usage.input_tokens.unwrap_or(0),
                    usage.output_tokens.unwrap_or(0),
                    *cost_usd,
                );
                let model = model.as_deref().unwrap_or(&run.model);
                for (direction, n) in [
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                    ("cached_input", usage.cached_input_tokens),
                ] {
                    self.model_tokens
                        .get_or_create(&ModelTokenLabels {
                            provider: provider_of(model).to_string(),
                            model: model.to_string(),
                            direction,
                        })
                        .inc_by(n.unwrap_or(0));
                }
            }
            RunEvent::ModelRetry { reason, .. } => {
                // A retry names no model: it is the one the run calls now.
                self.model_retries
                    .get_or_create(&RetryLabels {
                        provider: provider_of(&run.model).to_string(),
                        model: run.model.clone(),
                        reason: reason.as_str(),
                    })
                    .inc();
            }
            RunEvent::ModelFallback {
                from, to, reason, ..
            } => {
                self.model_fallbacks
                    .get_or_create(&FallbackLabels {
                        from: from.clone(),
                        to: to.clone(),
                        reason: reason.as_str(),
                    })
                    .inc();
                // The rest of the run stays on the next model.
                run.model = to.clone();
            }
            // As the gate counts a wait: at least a millisecond.
            RunEvent::LimitWait {
                provider,
                waited_ms,
            } if *waited_ms > 0 => {
                let label = ProviderLabel {
                    provider: provider.clone(),
                };
                self.limit_waits.get_or_create(&label).inc();
                self.limit_waited
                    .get_or_create(&label)
                    .inc_by(*waited_ms as f64 / 1000.0);
            }
            _ => {}
        }
    }

    /// The gauges of calls waiting and in flight, read from the gates now;
    /// a provider whose limits went away (its gate with them) disappears.
    fn read_gates(&self) {
        self.limit_waiting.clear();
        self.limit_in_flight.clear();
        // Every provider called has a gate (a 429 pauses it); only those
        // with limits have calls waiting for them.
        for gate in self.gates.0.all() {
            if gate.limits().is_empty() {
                continue;
            }
            let label = ProviderLabel {
                provider: gate.provider().to_string(),
            };
            let stats = gate.stats();
            let read = |n: &std::sync::atomic::AtomicU64| {
                i64::try_from(n.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(i64::MAX)
            };
            self.limit_waiting
                .get_or_create(&label)
                .set(read(&stats.waiting));
            self.limit_in_flight
                .get_or_create(&label)
                .set(read(&stats.in_flight));
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
        self.read_gates();
        let mut out = String::with_capacity(4096);
        prometheus_text::encode(&mut out, &self.registry)
            .expect("writing into a String cannot fail");
        out
    }
}

/// Where the limit gauges are read (a gate has nothing to print).
struct GateSource(&'static Gates);

impl std::fmt::Debug for GateSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GateSource")
    }
}

/// One run's events as the metrics read them: its agent, and the model it
/// calls now (a retry names none; a fallback moves the run to the next).
#[derive(Debug, Clone)]
pub struct RunEvents {
    agent: String,
    model: String,
}

impl RunEvents {
    /// A run of `agent` that starts on `model` (`provider/model`).
    pub fn new(agent: &str, model: &str) -> RunEvents {
        RunEvents {
            agent: agent.to_string(),
            model: model.to_string(),
        }
    }
}

/// A count as a gauge value (gauges are `i64`).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
