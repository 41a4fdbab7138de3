//! An `execute_tool` span per tool call, timed by the run's tool set
//! itself (`tools::CallObserver`): from just before the call runs to its
//! outcome, so the spans sit exactly between the model calls around them.
//! An error outcome sets the span's error status with its (redacted) first
//! line.

use std::sync::Arc;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::redact::Redactor;
use crate::tools::{CallObserver, CallWatch, ToolOutcome};
use crate::types::ToolCall;

use super::spans::{close_tool, first_line, open_tool};

/// Traces the tool calls of one run under its span.
pub(super) struct TracedTools {
    pub run_id: String,
    pub parent: Context,
    pub redactor: Arc<Redactor>,
}

impl CallObserver for TracedTools {
    fn start(&self, call: &ToolCall) -> Box<dyn CallWatch> {
        let Some(tracer) = super::tracer() else {
            return Box::new(Unwatched);
        };
        let span = tracer
            .span_builder(format!("execute_tool {}", call.name))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", call.name.clone()),
                KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
                KeyValue::new("gen_ai.tool.type", "function"),
            ])
            .start_with_context(tracer, &self.parent);
        let cx = Context::new().with_span(span);
        open_tool(&self.run_id, &call.id, &call.name, cx.clone());
        Box::new(ToolWatch {
            run_id: self.run_id.clone(),
            call_id: call.id.clone(),
            cx,
            redactor: self.redactor.clone(),
            ended: false,
        })
    }
}

struct Unwatched;

impl CallWatch for Unwatched {
    fn end(self: Box<Self>, _: &ToolOutcome) {}
}

/// One call's open span; ended by its outcome, or when dropped (the call
/// was cancelled).
struct ToolWatch {
    run_id: String,
    call_id: String,
    cx: Context,
    redactor: Arc<Redactor>,
    ended: bool,
}

impl ToolWatch {
    fn finish(&mut self) {
        if !self.ended {
            self.ended = true;
            close_tool(&self.run_id, &self.call_id);
            self.cx.span().end();
        }
    }
}

impl CallWatch for ToolWatch {
    fn end(mut self: Box<Self>, outcome: &ToolOutcome) {
        if outcome.is_error {
            let span = self.cx.span();
            span.set_attribute(KeyValue::new("error.type", "tool_error"));
            let message = self.redactor.redact(&outcome.output).into_owned();
            span.set_status(Status::error(first_line(&message)));
        }
        self.finish();
    }
}

impl Drop for ToolWatch {
    fn drop(&mut self) {
        self.finish();
    }
}
