//! A model provider wrapped so each call (each attempt, when retried) is a
//! `chat` span under its run's span: model, provider (by the wire format it
//! speaks: a provider named `ollama` of kind `openai` is `openai`), the
//! server it is reached at, request parameters, the answer's id and model,
//! token usage and finish reason; a failed call sets the span's error
//! status with its (redacted) message.

use std::sync::Arc;

use futures::future::BoxFuture;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::redact::Redactor;

use super::spans::{first_line, set_usage};
use super::target::ModelTarget;

/// `server.address` and `server.port` of `base_url` (the port its scheme
/// implies when it names none).
fn server_attributes(base_url: &str) -> Vec<KeyValue> {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(host) = url.host_str() {
        // An IPv6 host comes bracketed; the attribute wants the address.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        out.push(KeyValue::new("server.address", host.to_string()));
    }
    if let Some(port) = url.port_or_known_default() {
        out.push(KeyValue::new("server.port", i64::from(port)));
    }
    out
}

/// A temperature as written: an `f32` such as 0.3 widened to `f64` would
/// export as 0.30000001192092896, so it goes through its shortest decimal
/// form.
pub(super) fn as_written(value: f32) -> f64 {
    value.to_string().parse::<f64>().unwrap_or(f64::from(value))
}

/// `inner`, with a span per call.
pub struct TracedProvider {
    inner: Arc<dyn Provider>,
    /// The run span.
    parent: Context,
    /// `gen_ai.provider.name`.
    provider: String,
    /// `server.address` and `server.port`, where known.
    server: Vec<KeyValue>,
    redactor: Arc<Redactor>,
}

impl TracedProvider {
    /// `inner` traced under `parent`.
    pub fn wrap(
        inner: Arc<dyn Provider>,
        parent: Context,
        target: &ModelTarget<'_>,
        redactor: Arc<Redactor>,
    ) -> Arc<dyn Provider> {
        Arc::new(TracedProvider {
            inner,
            parent,
            provider: target.provider_name(),
            server: target
                .endpoint
                .map_or_else(Vec::new, |(_, url)| server_attributes(url)),
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
        attributes.extend(self.server.iter().cloned());
        if let Some(t) = request.temperature {
            attributes.push(KeyValue::new("gen_ai.request.temperature", as_written(t)));
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
                    if let Some(id) = &turn.response_id {
                        span.set_attribute(KeyValue::new("gen_ai.response.id", id.clone()));
                    }
                    if let Some(model) = &turn.response_model {
                        span.set_attribute(KeyValue::new("gen_ai.response.model", model.clone()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderKind;
    use crate::telemetry::target::wire_name;

    #[test]
    fn the_provider_is_named_by_its_wire_and_the_server_by_its_url() {
        let alias = ModelTarget {
            model: "ollama/llama3",
            endpoint: Some((ProviderKind::OpenAi, "http://127.0.0.1:11434/v1")),
        };
        assert_eq!(alias.provider_name(), "openai");
        let responses = ModelTarget {
            model: "openai/o3-pro",
            endpoint: Some((ProviderKind::OpenAiResponses, "https://api.openai.com/v1")),
        };
        assert_eq!(responses.provider_name(), "openai");
        for (kind, want) in [
            (ProviderKind::Anthropic, "anthropic"),
            (ProviderKind::Gemini, "gcp.gemini"),
        ] {
            assert_eq!(wire_name(kind), want);
        }
        let test = ModelTarget {
            model: "test",
            endpoint: None,
        };
        assert_eq!(test.provider_name(), "test");
        assert_eq!(
            server_attributes("http://127.0.0.1:11434/v1"),
            [
                KeyValue::new("server.address", "127.0.0.1"),
                KeyValue::new("server.port", 11434_i64)
            ]
        );
        assert_eq!(
            server_attributes("https://api.anthropic.com"),
            [
                KeyValue::new("server.address", "api.anthropic.com"),
                KeyValue::new("server.port", 443_i64)
            ]
        );
        assert_eq!(
            server_attributes("http://[::1]:8080/"),
            [
                KeyValue::new("server.address", "::1"),
                KeyValue::new("server.port", 8080_i64)
            ]
        );
    }

    #[test]
    fn temperatures_are_exported_as_written() {
        assert_eq!(as_written(0.3), 0.3);
        assert_eq!(as_written(0.7), 0.7);
        assert_eq!(as_written(1.0), 1.0);
        assert_ne!(f64::from(0.3_f32), 0.3, "the widening this avoids");
    }
}
