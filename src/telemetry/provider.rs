//! A model provider wrapped so each call (each attempt, when retried) is a
//! `chat` span under its run's span: model, provider, request parameters,
//! token usage and finish reason; a failed call sets the span's error
//! status with its (redacted) message.

use std::sync::Arc;

use futures::future::BoxFuture;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::redact::Redactor;

use super::spans::{first_line, provider_name, set_usage};

/// `inner`, with a span per call.
pub struct TracedProvider {
    inner: Arc<dyn Provider>,
    /// The run span.
    parent: Context,
    /// `gen_ai.provider.name`.
    provider: String,
    redactor: Arc<Redactor>,
}

impl TracedProvider {
    /// `inner` traced under `parent`; `model` is `provider/model` as the
    /// agent names it.
    pub fn wrap(
        inner: Arc<dyn Provider>,
        parent: Context,
        model: &str,
        redactor: Arc<Redactor>,
    ) -> Arc<dyn Provider> {
        let provider = model.split_once('/').map_or(model, |(p, _)| p);
        Arc::new(TracedProvider {
            inner,
            parent,
            provider: provider_name(provider).to_string(),
            redactor,
        })
    }
}

impl Provider for TracedProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        let Some(tracer) = super::tracer() else {
            return self.inner.stream(request, on_delta);
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.request.model", request.model.clone()),
            KeyValue::new("gen_ai.provider.name", self.provider.clone()),
            // The attribute's name before semantic conventions 1.37, which
            // many backends still read.
            KeyValue::new("gen_ai.system", self.provider.clone()),
        ];
        if let Some(t) = request.temperature {
            attributes.push(KeyValue::new("gen_ai.request.temperature", f64::from(t)));
        }
        if let Some(n) = request.max_tokens {
            attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(n)));
        }
        let span = tracer
            .span_builder(format!("chat {}", request.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer, &self.parent);
        // Dropped with the call (a cancelled run): the span ends then.
        let cx = Context::new().with_span(span);
        Box::pin(async move {
            let result = self.inner.stream(request, on_delta).await;
            let span = cx.span();
            match &result {
                Ok(turn) => {
                    set_usage(&span, turn.usage.input_tokens, turn.usage.output_tokens);
                    if let Some(n) = turn.usage.cached_input_tokens {
                        span.set_attribute(KeyValue::new(
                            "gen_ai.usage.cache_read.input_tokens",
                            n as i64,
                        ));
                    }
                    if let Some(reason) = &turn.finish_reason {
                        span.set_attribute(KeyValue::new(
                            "gen_ai.response.finish_reasons",
                            opentelemetry::Value::Array(
                                vec![opentelemetry::StringValue::from(reason.clone())].into(),
                            ),
                        ));
                    }
                }
                Err(e) => {
                    span.set_attribute(KeyValue::new("error.type", error_type(e)));
                    let message = self.redactor.redact(&e.to_string()).into_owned();
                    span.set_status(Status::error(first_line(&message)));
                }
            }
            span.end();
            result
        })
    }
}

/// `error.type`: the HTTP status where there is one, else the kind.
fn error_type(e: &ProviderError) -> String {
    match e {
        ProviderError::Status { status, .. } => status.to_string(),
        ProviderError::GaveUp { last, .. } => error_type(last),
        ProviderError::Connect(_) => "connection".into(),
        ProviderError::Cut { .. } => "stream_cut".into(),
        ProviderError::Stream(_) => "bad_stream".into(),
        ProviderError::Config(_) => "config".into(),
    }
}
