//! Where a run meets `telemetry`: a [`RunSink`] that feeds the run's trace
//! every event it passes on, the run's providers wrapped so their model
//! calls are spans (and counted in the daemon's metrics, when the sink has
//! them), and its tool set told to trace each call. Without an exporter
//! and metrics these are plain pass-throughs.

use std::sync::Arc;

use crate::llm::Provider;
use crate::redact::Redactor;
use crate::registry::sub_agents::agent_tool_name;
use crate::store::RunParent;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::{
    MeteredProvider, ModelTarget, ParentLink, RunInfo, RunTrace, TracedProvider,
};
use crate::tools::ToolSet;
use crate::types::{RunEvent, Trigger};

use super::events::RunSink;
use super::prepare::PreparedModel;

/// `inner`, with the run's trace fed each event.
pub(super) struct TracedSink<'a> {
    inner: &'a mut dyn RunSink,
    trace: Option<RunTrace>,
}

/// What a run's trace is started with.
pub(super) struct TracedRun<'a> {
    pub run_id: &'a str,
    pub agent: &'a str,
    pub model: &'a str,
    pub trigger: Trigger,
    pub parent: Option<&'a RunParent>,
    pub resumed: bool,
}

impl<'a> TracedSink<'a> {
    pub fn new(inner: &'a mut dyn RunSink, run: TracedRun<'_>) -> TracedSink<'a> {
        // A run called as a tool (`agents:`) sits under that tool call's
        // span; a pipeline step's run under its step.
        let trace = RunTrace::start(RunInfo {
            run_id: run.run_id,
            agent: run.agent,
            model: run.model,
            trigger: run.trigger,
            parent: run.parent.map(|p| ParentLink {
                run_id: &p.run_id,
                via_tool: (run.trigger == Trigger::Agent).then(|| agent_tool_name(run.agent)),
            }),
            resumed: run.resumed,
        });
        TracedSink { inner, trace }
    }

    /// `tools`, with a span per call when the run is traced.
    pub fn tools(&self, tools: ToolSet, redactor: &Arc<Redactor>) -> ToolSet {
        match &self.trace {
            Some(trace) => tools.with_observer(trace.tools(redactor.clone())),
            None => tools,
        }
    }

    /// The provider of `model`, with a span per model call when the run
    /// is traced and counted in the metrics when the sink has them.
    pub fn provider(&self, model: &PreparedModel, redactor: &Arc<Redactor>) -> Arc<dyn Provider> {
        let provider = match self.inner.metrics() {
            Some(metrics) => MeteredProvider::wrap(model.provider.clone(), metrics, &model.model),
            None => model.provider.clone(),
        };
        let target = ModelTarget {
            model: &model.model,
            endpoint: model
                .endpoint
                .as_ref()
                .map(|(wire, url)| (*wire, url.as_str())),
        };
        match &self.trace {
            Some(trace) => {
                trace.model(&target);
                TracedProvider::wrap(provider, trace.context(), &target, redactor.clone())
            }
            None => provider,
        }
    }
}

impl RunSink for TracedSink<'_> {
    fn event(&mut self, seq: i64, event: &RunEvent) {
        if let Some(trace) = &mut self.trace {
            trace.event(event);
        }
        self.inner.event(seq, event);
    }

    fn committed(&mut self, last_seq: i64) {
        self.inner.committed(last_seq);
    }

    fn metrics(&self) -> Option<Arc<Metrics>> {
        self.inner.metrics()
    }
}
