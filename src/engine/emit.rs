//! The events the loop sends besides a turn's own: those that open a run
//! (started, skills, memories) and one per retry of a model call.

use tokio::sync::mpsc::UnboundedSender;

use crate::llm::retry::RetryNotice;
use crate::types::RunEvent;

use super::RunSpec;

/// The events that open a run: started, skills, memories.
pub(super) fn announce(spec: &RunSpec, events: &UnboundedSender<RunEvent>) {
    let _ = events.send(RunEvent::Started {
        run_id: spec.run_id.clone(),
        agent: spec.agent.clone(),
        model: spec.model.clone(),
        trigger: spec.trigger,
        definition_hash: spec.definition_hash.clone(),
        input: spec.input.clone(),
    });
    if let Some(skills) = &spec.skills {
        let _ = events.send(RunEvent::SkillsActivated {
            skills: skills.names.clone(),
            how: skills.how,
        });
    }
    if let Some(memory) = spec.memory.as_ref().filter(|m| !m.memories.is_empty()) {
        let _ = events.send(RunEvent::MemoryRecalled {
            namespace: memory.namespace.clone(),
            memories: memory.memories.clone(),
        });
    }
}

/// Each retry of a model call as a `model_retry` event on `events`.
pub(super) fn retry_events(
    events: UnboundedSender<RunEvent>,
) -> impl FnMut(&RetryNotice<'_>) + Send {
    move |retry: &RetryNotice<'_>| {
        let _ = events.send(RunEvent::ModelRetry {
            attempt: retry.attempt,
            delay_ms: retry.delay.as_millis() as u64,
            error: retry.error.to_string(),
            reason: retry.reason,
            discarded_output: retry.discarded_output,
        });
    }
}
