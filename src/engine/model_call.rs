//! One model call of the loop, along the agent's model chain: each model
//! is called (through its provider's shared limits, with retries) until
//! one answers, and the call moves on to the next model only for a reason
//! the chain names. Nothing of the turn has run when it moves on: the
//! engine runs a turn's tools only once its answer has ended whole, so a
//! fallback re-sends no side effect. Once a model of the chain answered
//! for a fallback, the rest of the run stays on it: flapping between two
//! providers would lose each one's prompt cache at every call.

use std::sync::Arc;
use std::time::Duration;

use crate::llm::limits::ProviderGate;
use crate::llm::retry::{Gated, RetryPolicy, stream_gated_until};
use crate::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::types::{FallbackReason, Price, RunEvent};

use super::emit::retry_events;
use super::{End, LoopState};

/// One model of a chain, resolved.
pub struct ModelRoute<'a> {
    /// `provider/model` as the agent names it.
    pub model: String,
    /// The model name sent to the provider.
    pub model_name: String,
    pub provider: &'a dyn Provider,
    /// Its price; `None`: its calls' cost is unknown.
    pub price: Option<Price>,
    /// Its provider's shared limits; `None`: it has none.
    pub gate: Option<Arc<ProviderGate>>,
}

/// The models a run may call, in order, and when it moves down them.
pub struct Models<'a> {
    /// Never empty: the first is the agent's `model`.
    pub routes: Vec<ModelRoute<'a>>,
    /// The reasons a call moves on to the next model.
    pub fallback_on: Vec<FallbackReason>,
    /// Attempts each model but the last gets before the call moves on.
    pub attempts: u32,
}

impl<'a> Models<'a> {
    /// One model, no fallback, no limits.
    pub fn single(
        model: &str,
        model_name: &str,
        provider: &'a dyn Provider,
        price: Option<Price>,
    ) -> Models<'a> {
        Models {
            routes: vec![ModelRoute {
                model: model.to_string(),
                model_name: model_name.to_string(),
                provider,
                price,
                gate: None,
            }],
            fallback_on: Vec::new(),
            attempts: 1,
        }
    }
}

/// Why `err` (the last error of a model's attempts) moves a call down the
/// chain, if it is a reason the chain could name.
pub fn fallback_reason(err: &ProviderError) -> Option<FallbackReason> {
    match err {
        ProviderError::GaveUp { last, .. } => fallback_reason(last),
        ProviderError::Connect(_) | ProviderError::Cut { .. } => Some(FallbackReason::Unreachable),
        ProviderError::Status {
            status, message, ..
        } => match status {
            429 => Some(FallbackReason::RateLimited),
            408 => Some(FallbackReason::Unreachable),
            s if *s >= 500 => Some(FallbackReason::ServerError),
            400 | 413 | 422 if too_long(message) => Some(FallbackReason::ContextLength),
            _ => None,
        },
        ProviderError::Stream(message) if too_long(message) => Some(FallbackReason::ContextLength),
        ProviderError::Stream(_) | ProviderError::Config(_) => None,
    }
}

/// Whether a provider's error message says the request is longer than the
/// model's context window, as OpenAI (`context_length_exceeded`, "maximum
/// context length"), Anthropic ("prompt is too long"), Gemini ("input token
/// count ... exceeds the maximum") and the OpenAI-compatible local servers
/// word it.
fn too_long(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "prompt is too long",
        "input is too long",
        "too many tokens",
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|p| m.contains(p))
}

impl LoopState<'_> {
    /// Calls the run's current model with `request`, moving down the chain
    /// as its reasons say; the answer and the index of the model that gave
    /// it. The caller's cancellation and timeout stop it as
    /// [`End::Stopped`].
    pub(super) async fn call_model(
        &mut self,
        mut request: ChatRequest,
    ) -> Result<(ModelTurn, usize), End> {
        let models = &self.parts.models;
        loop {
            let index = self.model_index;
            let route = &models.routes[index];
            let last = index + 1 == models.routes.len();
            request.model = route.model_name.clone();
            // A model with a fallback gets a few attempts; the last one
            // retries within the run's time, as a single model does.
            let policy = match last {
                true => self.parts.retry.clone(),
                false => RetryPolicy {
                    max_attempts: models.attempts,
                    ..self.parts.retry.clone()
                },
            };
            let events = self.events.clone();
            let mut on_delta = move |d: Delta| {
                let _ = events.send(match d {
                    Delta::Text(text) => RunEvent::TextDelta { text },
                    Delta::Reasoning(text) => RunEvent::ReasoningDelta { text },
                });
            };
            let mut on_retry = retry_events(self.events.clone());
            let waits = self.events.clone();
            let mut on_wait = |waited: Duration| {
                if let Some(gate) = &route.gate {
                    let _ = waits.send(RunEvent::LimitWait {
                        provider: gate.provider().to_string(),
                        waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                    });
                }
            };
            let gated = route.gate.as_ref().map(|gate| Gated {
                gate,
                on_wait: &mut on_wait,
            });
            // Retries and waits for the limits spend the run's own time.
            let call = stream_gated_until(
                route.provider,
                gated,
                &request,
                &policy,
                self.clock.deadline(),
                &mut on_delta,
                &mut on_retry,
            );
            let result = tokio::select! {
                biased;
                _ = self.token.cancelled() => return Err(End::Stopped),
                result = call => result,
            };
            let err = match result {
                Ok(turn) => return Ok((turn, index)),
                Err(err) => err,
            };
            let reason = fallback_reason(&err).filter(|r| models.fallback_on.contains(r));
            match reason {
                Some(reason) if !last => {
                    let next = &models.routes[index + 1];
                    let _ = self.events.send(RunEvent::ModelFallback {
                        from: route.model.clone(),
                        to: next.model.clone(),
                        reason,
                        error: err.to_string(),
                    });
                    self.model_index = index + 1;
                }
                _ => {
                    let who = match models.routes.len() {
                        1 => String::new(),
                        _ => format!(" ({})", route.model),
                    };
                    return Err(End::Failed(format!("model call failed{who}: {err}")));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::CutKind;

    fn status(status: u16, message: &str) -> ProviderError {
        ProviderError::Status {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    #[test]
    fn errors_are_sorted_into_the_chains_reasons() {
        let cases = [
            (
                ProviderError::Connect("refused".into()),
                Some(FallbackReason::Unreachable),
            ),
            (
                ProviderError::cut(CutKind::Idle, "x"),
                Some(FallbackReason::Unreachable),
            ),
            (status(503, "overloaded"), Some(FallbackReason::ServerError)),
            (status(529, "overloaded"), Some(FallbackReason::ServerError)),
            (status(429, "slow down"), Some(FallbackReason::RateLimited)),
            (
                status(400, "This model's maximum context length is 8192 tokens"),
                Some(FallbackReason::ContextLength),
            ),
            (
                status(400, "prompt is too long: 210000 tokens > 200000 maximum"),
                Some(FallbackReason::ContextLength),
            ),
            (status(400, "invalid temperature"), None),
            (status(401, "bad key"), None),
            (ProviderError::Config("no key".into()), None),
            (
                ProviderError::GaveUp {
                    last: Box::new(status(500, "boom")),
                    why: "no attempts left".into(),
                },
                Some(FallbackReason::ServerError),
            ),
        ];
        for (err, want) in cases {
            assert_eq!(fallback_reason(&err), want, "{err}");
        }
    }
}
