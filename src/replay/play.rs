//! Drives one run through the engine with the parts it is given (a
//! scripted provider and scripted tools, or a real provider for
//! `aurad test --update`) and keeps every event it emits, in order.

use tokio_util::sync::CancellationToken;

use crate::engine::approval::ApprovalGate;
use crate::engine::{self, Models, Parts, RunOutcome, RunSpec};
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

/// Runs `spec` with `provider` and `tools`: no store, no daily budget;
/// `approvals` answers calls that wait for a person (`None`: none waits).
pub async fn play(
    spec: &RunSpec,
    provider: &dyn Provider,
    tools: &ToolSet,
    approvals: Option<&dyn ApprovalGate>,
    redactor: &Redactor,
    retry: RetryPolicy,
) -> Played {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let parts = Parts {
        models: Models::single(&spec.model, &spec.model_name, provider, spec.price),
        tools,
        retry,
        spending: None,
        redactor,
        sub_runs: None,
        approvals,
    };
    let outcome = engine::run(spec, parts, CancellationToken::new(), tx).await;
    let mut events = Vec::new();
    while let Some(event) = rx.recv().await {
        events.push(event);
    }
    Played { outcome, events }
}
