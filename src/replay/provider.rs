//! A [`Provider`] that answers from a list of model turns, in order, and
//! touches no network. Asked for more turns than it holds, it fails the
//! call (not retried): the run asked the model for a turn the recording
//! does not have, which the comparison reports.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;

use crate::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};

/// Answers from recorded or scripted turns.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    turns: Mutex<VecDeque<ModelTurn>>,
    total: usize,
    asked: AtomicUsize,
}

impl ScriptedProvider {
    pub fn new(turns: Vec<ModelTurn>) -> ScriptedProvider {
        ScriptedProvider {
            total: turns.len(),
            turns: Mutex::new(turns.into()),
            asked: AtomicUsize::new(0),
        }
    }

    /// How many model calls were made, answered or not.
    pub fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Provider for ScriptedProvider {
    fn stream<'a>(
        &'a self,
        _request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
            let next = self
                .turns
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop_front();
            let Some(turn) = next else {
                return Err(ProviderError::Stream(format!(
                    "no recorded answer for model turn {n}: the recording has {} turn(s)",
                    self.total
                )));
            };
            if !turn.reasoning.is_empty() {
                on_delta(Delta::Reasoning(turn.reasoning.clone()));
            }
            if !turn.text.is_empty() {
                on_delta(Delta::Text(turn.text.clone()));
            }
            Ok(turn)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_in_order_then_fails() {
        let provider = ScriptedProvider::new(vec![ModelTurn {
            text: "one".into(),
            ..ModelTurn::default()
        }]);
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: None,
        };
        let mut seen = Vec::new();
        let mut on_delta = |d: Delta| seen.push(d);
        let turn = provider.stream(&request, &mut on_delta).await.unwrap();
        assert_eq!(turn.text, "one");
        let err = provider.stream(&request, &mut on_delta).await.unwrap_err();
        assert!(err.to_string().contains("model turn 2"), "{err}");
        assert!(!err.is_retryable());
        assert_eq!(provider.asked(), 2);
        assert_eq!(seen, vec![Delta::Text("one".into())]);
    }
}
