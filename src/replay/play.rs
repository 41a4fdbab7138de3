//! Drives one run through the engine with the parts it is given (a
//! scripted provider and scripted tools, or a real provider for
//! `aurad test --update`) and keeps every event it emits, in order.

use tokio_util::sync::CancellationToken;

use crate::engine::{self, Parts, RunOutcome, RunSpec};
use crate::llm::Provider;
use crate::llm::retry::RetryPolicy;
use crate::redact::Redactor;
use crate::tools::ToolSet;
use crate::types::RunEvent;

use super::trace::Trace;

/// A run played to its end.
#[derive(Debug, Clone)]
pub struct Played {
    pub outcome: RunOutcome,
    pub events: Vec<RunEvent>,
}

impl Played {
    pub fn trace(&self) -> Trace {
        Trace::from_events(&self.events)
    }
}

/// Runs `spec` with `provider` and `tools`: no store, no approvals (a call
/// that waited for a person then runs as recorded), no daily budget.
pub async fn play(
    spec: &RunSpec,
    provider: &dyn Provider,
    tools: &ToolSet,
    redactor: &Redactor,
    retry: RetryPolicy,
) -> Played {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let parts = Parts {
        provider,
        tools,
        retry,
        spending: None,
        redactor,
        sub_runs: None,
        approvals: None,
    };
    let outcome = engine::run(spec, parts, CancellationToken::new(), tx).await;
    let mut events = Vec::new();
    while let Some(event) = rx.recv().await {
        events.push(event);
    }
    Played { outcome, events }
}
