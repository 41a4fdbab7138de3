//! The spans of one run, built from its events as they happen: the run's
//! `invoke_agent` span (its end: state, usage, cost, error status), a span
//! per pipeline step attempt, approvals and model retries as span events.
//! Model calls and tool calls are timed where they happen
//! (`provider.rs`, `tool_spans.rs`). Runs open in this process are
//! remembered by id, so a sub-run or a step run starts under its parent's
//! span (the tool call that started it, when it can be told).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::redact::Redactor;
use crate::tools::CallObserver;
use crate::types::{RunEvent, RunState, StepState, Trigger};

use super::target::ModelTarget;
use super::tool_spans::TracedTools;

/// What a run span says about its run.
pub struct RunInfo<'a> {
    pub run_id: &'a str,
    pub agent: &'a str,
    /// `provider/model` as the agent names it (`pipeline` for a pipeline).
    pub model: &'a str,
    pub trigger: Trigger,
    pub parent: Option<ParentLink<'a>>,
    /// The run goes on after waiting for approval (its start was traced by
    /// an earlier process or span).
    pub resumed: bool,
}

/// The run that started this one.
pub struct ParentLink<'a> {
    pub run_id: &'a str,
    /// The tool through which the parent called this run (`agent_NAME`),
    /// whose open span becomes the run span's parent; `None`: a pipeline
    /// step run, under the step's span when exactly one is open.
    pub via_tool: Option<String>,
}

/// Spans still open of a run traced in this process.
struct OpenRun {
    run: Context,
    /// Open tool spans: call id, tool name, span.
    tools: Vec<(String, String, Context)>,
    /// Open pipeline step spans, by step name and item index.
    steps: Vec<((String, Option<usize>), Context)>,
}

static OPEN: LazyLock<Mutex<HashMap<String, OpenRun>>> = LazyLock::new(Default::default);

fn open_runs() -> std::sync::MutexGuard<'static, HashMap<String, OpenRun>> {
    OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The traced part of one run: created with [`RunTrace::start`] (`None`
/// when traces are not exported), fed every event, ended by the run's
/// `finished` event or, for a run suspended while it waits for approval,
/// when dropped.
pub struct RunTrace {
    run_id: String,
    /// `provider/model` as the agent names it.
    model: String,
    run: Context,
    ended: bool,
}

impl RunTrace {
    pub fn start(info: RunInfo<'_>) -> Option<RunTrace> {
        let tracer = super::tracer()?;
        let parent = info
            .parent
            .as_ref()
            .and_then(|link| parent_context(link))
            .unwrap_or_default();
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", info.agent.to_string()),
            KeyValue::new("gen_ai.conversation.id", info.run_id.to_string()),
            KeyValue::new("aurad.run.id", info.run_id.to_string()),
            KeyValue::new("aurad.run.trigger", info.trigger.as_str()),
            KeyValue::new("aurad.run.model", info.model.to_string()),
        ];
        // `gen_ai.provider.name` comes with the model's provider
        // ([`RunTrace::model`]): it names the wire format, which the name
        // here does not tell.
        if let Some((_, model)) = info.model.split_once('/') {
            attributes.push(KeyValue::new("gen_ai.request.model", model.to_string()));
        }
        if let Some(link) = &info.parent {
            attributes.push(KeyValue::new(
                "aurad.run.parent_id",
                link.run_id.to_string(),
            ));
        }
        if info.resumed {
            attributes.push(KeyValue::new("aurad.run.resumed", true));
        }
        let span = tracer
            .span_builder(format!("invoke_agent {}", info.agent))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        let run = Context::new().with_span(span);
        open_runs().insert(
            info.run_id.to_string(),
            OpenRun {
                run: run.clone(),
                tools: Vec::new(),
                steps: Vec::new(),
            },
        );
        Some(RunTrace {
            run_id: info.run_id.to_string(),
            model: info.model.to_string(),
            run,
            ended: false,
        })
    }

    /// A model of the run's chain: the first one (the agent's own) names
    /// the run span's provider.
    pub fn model(&self, target: &ModelTarget<'_>) {
        if target.model == self.model {
            let name = target.provider_name();
            let span = self.run.span();
            span.set_attribute(KeyValue::new("gen_ai.provider.name", name.clone()));
            span.set_attribute(KeyValue::new("gen_ai.system", name));
        }
    }

    /// The run span's context: the parent of its model calls' spans.
    pub fn context(&self) -> Context {
        self.run.clone()
    }

    /// What tells the run's tool set to trace each call.
    pub fn tools(&self, redactor: Arc<Redactor>) -> Arc<dyn CallObserver> {
        Arc::new(TracedTools {
            run_id: self.run_id.clone(),
            parent: self.run.clone(),
            redactor,
        })
    }

    /// Opens, annotates or ends spans for `event`.
    pub fn event(&mut self, event: &RunEvent) {
        let Some(tracer) = super::tracer() else {
            return;
        };
        match event {
            RunEvent::ApprovalRequested { id, name, .. } => {
                self.run.span().add_event(
                    "aurad.approval.requested",
                    vec![
                        KeyValue::new("gen_ai.tool.call.id", id.clone()),
                        KeyValue::new("gen_ai.tool.name", name.clone()),
                    ],
                );
            }
            RunEvent::ApprovalDecided {
                id, approved, by, ..
            } => {
                self.run.span().add_event(
                    "aurad.approval.decided",
                    vec![
                        KeyValue::new("gen_ai.tool.call.id", id.clone()),
                        KeyValue::new("aurad.approval.approved", *approved),
                        KeyValue::new("aurad.approval.by", by.as_str()),
                    ],
                );
            }
            RunEvent::SkillsActivated { skills, how } => {
                self.run.span().add_event(
                    "aurad.skills.activated",
                    vec![
                        KeyValue::new("aurad.skills.how", how.to_string()),
                        KeyValue::new("aurad.skills.names", skills.join(",")),
                    ],
                );
            }
            RunEvent::ModelRetry {
                attempt,
                error,
                reason,
                ..
            } => {
                self.run.span().add_event(
                    "aurad.model.retry",
                    vec![
                        KeyValue::new("aurad.retry.attempt", i64::from(*attempt)),
                        KeyValue::new("aurad.retry.reason", reason.as_str()),
                        KeyValue::new("aurad.retry.error", error.clone()),
                    ],
                );
            }
            RunEvent::ModelFallback {
                from,
                to,
                reason,
                error,
            } => {
                // The chat spans of both models are there; this says why
                // the run moved from one to the other.
                self.run.span().add_event(
                    "aurad.model.fallback",
                    vec![
                        KeyValue::new("aurad.fallback.from", from.clone()),
                        KeyValue::new("aurad.fallback.to", to.clone()),
                        KeyValue::new("aurad.fallback.reason", reason.as_str()),
                        KeyValue::new("aurad.fallback.error", first_line(error)),
                    ],
                );
            }
            RunEvent::LimitWait {
                provider,
                waited_ms,
            } => {
                self.run.span().add_event(
                    "aurad.limit.wait",
                    vec![
                        KeyValue::new("aurad.limit.provider", provider.clone()),
                        KeyValue::new(
                            "aurad.limit.waited_ms",
                            i64::try_from(*waited_ms).unwrap_or(i64::MAX),
                        ),
                    ],
                );
            }
            RunEvent::StepStarted {
                step,
                index,
                attempt,
            } => {
                let mut attributes = vec![
                    KeyValue::new("aurad.step.name", step.clone()),
                    KeyValue::new("aurad.step.attempt", i64::from(*attempt)),
                ];
                if let Some(index) = index {
                    attributes.push(KeyValue::new("aurad.step.index", *index as i64));
                }
                let span = tracer
                    .span_builder(format!("step {step}"))
                    .with_kind(SpanKind::Internal)
                    .with_attributes(attributes)
                    .start_with_context(tracer, &self.run);
                if let Some(open) = open_runs().get_mut(&self.run_id) {
                    open.steps
                        .push(((step.clone(), *index), Context::new().with_span(span)));
                }
            }
            RunEvent::StepFinished {
                step,
                index,
                state,
                error,
                usage,
                cost_usd,
                child_run_id,
                ..
            } => {
                let key = (step.clone(), *index);
                let cx = open_runs().get_mut(&self.run_id).and_then(|open| {
                    let at = open.steps.iter().position(|(k, _)| *k == key)?;
                    Some(open.steps.remove(at).1)
                });
                if let Some(cx) = cx {
                    let span = cx.span();
                    span.set_attribute(KeyValue::new("aurad.step.state", state.as_str()));
                    set_usage(&span, usage.input_tokens, usage.output_tokens);
                    if let Some(cost) = cost_usd {
                        span.set_attribute(KeyValue::new("aurad.cost_usd", *cost));
                    }
                    if let Some(child) = child_run_id {
                        span.set_attribute(KeyValue::new("aurad.step.run_id", child.clone()));
                    }
                    if *state == StepState::Failed || error.is_some() {
                        span.set_attribute(KeyValue::new("error.type", "step_failed"));
                        span.set_status(Status::error(first_line(
                            error.as_deref().unwrap_or("failed"),
                        )));
                    }
                    span.end();
                }
            }
            RunEvent::Finished {
                state,
                reason,
                usage,
                cost_usd,
                ..
            } => {
                let span = self.run.span();
                span.set_attribute(KeyValue::new("aurad.run.state", state.as_str()));
                set_usage(&span, usage.input_tokens, usage.output_tokens);
                if let Some(cost) = cost_usd {
                    span.set_attribute(KeyValue::new("aurad.cost_usd", *cost));
                }
                if is_error(*state) {
                    span.set_attribute(KeyValue::new("error.type", state.as_str()));
                    span.set_status(Status::error(first_line(
                        reason.as_deref().unwrap_or(state.as_str()),
                    )));
                }
                self.end();
            }
            _ => {}
        }
    }

    /// Ends the spans still open (a run suspended while it waits for
    /// approval, or cut short) and the run span; forgets the run.
    fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let open = open_runs().remove(&self.run_id);
        if let Some(open) = open {
            for (_, _, cx) in open.tools {
                cx.span().end();
            }
            for (_, cx) in open.steps {
                cx.span().end();
            }
        }
        self.run.span().end();
    }
}

impl Drop for RunTrace {
    fn drop(&mut self) {
        if !self.ended {
            // No `finished`: the run waits for approval in the store (a
            // later span goes on with it), or its recording failed.
            self.run
                .span()
                .add_event("aurad.run.unfinished", Vec::new());
            self.end();
        }
    }
}

/// Where a child run's span goes: under the parent's open span of the tool
/// that called it, else under the parent's only open step span (a step
/// run), else under the parent's run span; `None` when the parent is not
/// traced in this process (the child starts a trace of its own).
fn parent_context(link: &ParentLink<'_>) -> Option<Context> {
    let open = open_runs();
    let parent = open.get(link.run_id)?;
    let by_tool = link.via_tool.as_deref().and_then(|tool| {
        parent
            .tools
            .iter()
            .find(|(_, name, _)| name == tool)
            .map(|(_, _, cx)| cx.clone())
    });
    let by_step = || match parent.steps.as_slice() {
        [(_, cx)] if link.via_tool.is_none() => Some(cx.clone()),
        _ => None,
    };
    Some(
        by_tool
            .or_else(by_step)
            .unwrap_or_else(|| parent.run.clone()),
    )
}

/// Remembers the open span of tool call `id` of run `run_id` (a sub-run
/// started by it goes under it).
pub(super) fn open_tool(run_id: &str, id: &str, name: &str, cx: Context) {
    if let Some(open) = open_runs().get_mut(run_id) {
        open.tools.push((id.to_string(), name.to_string(), cx));
    }
}

/// Forgets the span of tool call `id` of run `run_id`.
pub(super) fn close_tool(run_id: &str, id: &str) {
    if let Some(open) = open_runs().get_mut(run_id) {
        open.tools.retain(|(call, _, _)| call != id);
    }
}

/// Token counts, where known.
pub(super) fn set_usage(
    span: &opentelemetry::trace::SpanRef<'_>,
    input: Option<u64>,
    output: Option<u64>,
) {
    if let Some(n) = input {
        span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(n) = output {
        span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", n as i64));
    }
}

/// Ends that are errors in a trace: a cancelled run is not one.
fn is_error(state: RunState) -> bool {
    !matches!(state, RunState::Succeeded | RunState::Cancelled)
}

/// A status description: the first line, at most 200 characters.
pub(super) fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}
