//! A model provider wrapped so each call (each attempt, when retried) is
//! counted in the daemon's metrics by its outcome, with its latency. It
//! sits inside the provider's limits (the wait for them is not the
//! provider's latency) and is told nothing by the engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};

use super::metrics::Metrics;

/// `inner`, counted in `metrics`.
pub struct MeteredProvider {
    inner: Arc<dyn Provider>,
    metrics: Arc<Metrics>,
    /// `provider/model` as the agent names it.
    model: String,
}

impl MeteredProvider {
    pub fn wrap(inner: Arc<dyn Provider>, metrics: Arc<Metrics>, model: &str) -> Arc<dyn Provider> {
        Arc::new(MeteredProvider {
            inner,
            metrics,
            model: model.to_string(),
        })
    }
}

/// Counts an attempt when it ends, or as `cancelled` when it is dropped
/// before (the run was cancelled or timed out mid-call).
struct Attempt<'a> {
    provider: &'a MeteredProvider,
    started: Instant,
    outcome: Option<&'static str>,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or("cancelled");
        let elapsed: Duration = self.started.elapsed();
        self.provider
            .metrics
            .model_attempt(&self.provider.model, outcome, elapsed);
    }
}

impl Provider for MeteredProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let mut attempt = Attempt {
                provider: self,
                started: Instant::now(),
                outcome: None,
            };
            let result = self.inner.stream(request, on_delta).await;
            attempt.outcome = Some(match &result {
                Ok(_) => "ok",
                Err(e) => outcome(e),
            });
            result
        })
    }
}

/// The outcome label of a failed attempt: bounded, by kind.
pub(super) fn outcome(e: &ProviderError) -> &'static str {
    match e {
        ProviderError::Status { status: 429, .. } => "rate_limited",
        ProviderError::Status { status, .. } if *status >= 500 => "server_error",
        ProviderError::Status { .. } => "client_error",
        ProviderError::GaveUp { last, .. } => outcome(last),
        ProviderError::Connect(_) => "unreachable",
        ProviderError::Cut { .. } => "stream_cut",
        ProviderError::Stream(_) => "bad_stream",
        ProviderError::Config(_) => "config",
    }
}
