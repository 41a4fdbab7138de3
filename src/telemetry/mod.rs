//! What aurad tells operators: the daemon's Prometheus [`metrics`] (model
//! calls counted by a wrapped provider, [`MeteredProvider`]), the provider
//! gates as status shows them ([`provider_gates`]), and
//! OpenTelemetry traces of runs, following the GenAI semantic conventions:
//! one trace per run (sub-runs and pipeline step runs of this process join
//! their parent's), an `invoke_agent` span for the run, a `chat` span per
//! model call and an `execute_tool` span per tool call. Exported over
//! OTLP/HTTP (protobuf) when `otel:` is in `aurad.yaml` or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set; otherwise [`install`] sets nothing up and every hook is a no-op
//! (one atomic load).
//!
//! The spans are built from what the daemon sees: the run's (redacted)
//! `RunEvent`s, its model provider, wrapped ([`TracedProvider`]), and its
//! tool set, observed (`tools::CallObserver`). The engine knows nothing of
//! this module. May depend on `config` (the settings), `llm` (the provider
//! trait) and `tools` (the call observer).

mod gates;
mod metered;
pub mod metrics;
mod provider;
mod spans;
mod target;
mod tool_spans;

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::config::otel::OtelSettings;

pub use gates::provider_gates;
pub use metered::MeteredProvider;
pub use provider::TracedProvider;
pub use spans::{ParentLink, RunInfo, RunTrace};
pub use target::ModelTarget;

/// The exporting pipeline, set up once per process by [`install`].
struct Pipeline {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

static PIPELINE: OnceLock<Pipeline> = OnceLock::new();

/// The tracer, when traces are exported.
fn tracer() -> Option<&'static SdkTracer> {
    PIPELINE.get().map(|p| &p.tracer)
}

/// Whether traces are exported in this process.
pub fn enabled() -> bool {
    PIPELINE.get().is_some()
}

/// Where traces go, when they go anywhere: `otel:` of `aurad.yaml`, else
/// the standard variables (read by the exporter itself). `OTEL_SDK_DISABLED=true`
/// or `OTEL_TRACES_EXPORTER=none` turn both off.
fn wanted(settings: Option<&OtelSettings>, env: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    !disabled
        && (settings.is_some()
            || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// Sets up the OTLP exporter when traces are wanted (see [`wanted`]);
/// `Ok(false)` when they are not: then nothing is built (no client, no
/// thread). The batch exporter runs on one thread of its own, so
/// [`shutdown`] may block any thread but that one. `Err` says why the
/// exporter could not be built (never with a header's value).
pub fn install(
    settings: Option<&OtelSettings>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<bool, String> {
    if !wanted(settings, env) {
        return Ok(false);
    }
    if PIPELINE.get().is_some() {
        return Ok(true);
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(settings) = settings {
        builder = builder
            .with_endpoint(settings.traces_endpoint.clone())
            .with_headers(settings.headers.clone().into_iter().collect());
    }
    let exporter = builder
        .build()
        .map_err(|e| format!("cannot set up the OTLP trace exporter: {e}"))?;
    let service = settings
        .and_then(|s| s.service_name.clone())
        .or_else(|| env("OTEL_SERVICE_NAME").filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "aurad".to_string());
    let resource = Resource::builder()
        .with_service_name(service)
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::TokioCurrentThread)
            .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("aurad");
    let _ = PIPELINE.set(Pipeline { provider, tracer });
    Ok(true)
}

/// Exports every span ended so far and stops the exporter, waiting at most
/// `timeout` (a collector that does not answer must not hold the process:
/// the spans still unsent are then lost, with a warning). Blocks: call it
/// outside the async runtime's worker threads (in `spawn_blocking`, or
/// after `block_on` returns). A no-op when nothing was installed.
pub fn shutdown(timeout: Duration) {
    let Some(pipeline) = PIPELINE.get() else {
        return;
    };
    let provider = pipeline.provider.clone();
    let (done, finished) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("otel-shutdown".into())
        .spawn(move || {
            let _ = done.send(provider.shutdown_with_timeout(timeout));
        });
    if spawned.is_err() {
        tracing::warn!("cannot start a thread to send the last traces; they are lost");
        return;
    }
    match finished.recv_timeout(timeout) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("exporting the last traces failed: {e}"),
        Err(_) => tracing::warn!(
            "the trace collector did not answer within {timeout:?}; the last traces are lost"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_only_with_an_endpoint_and_not_disabled() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let settings = OtelSettings {
            traces_endpoint: "http://127.0.0.1:1/v1/traces".into(),
            headers: Default::default(),
            service_name: None,
        };
        assert!(!wanted(None, &env(&[])));
        assert!(!wanted(None, &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(wanted(
            None,
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318")])
        ));
        assert!(wanted(
            None,
            &env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x/v1/traces")])
        ));
        assert!(wanted(Some(&settings), &env(&[])));
        assert!(!wanted(
            Some(&settings),
            &env(&[("OTEL_SDK_DISABLED", "true")])
        ));
        assert!(!wanted(
            Some(&settings),
            &env(&[("OTEL_TRACES_EXPORTER", "none")])
        ));
    }
}
