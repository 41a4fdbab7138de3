//! The approval decisions of a recording, given back to the engine as its
//! approval gate: a call that waited for a person in the recorded run gets
//! the same decision at once (approved: its recorded result; denied: the
//! same denial text), and nobody is asked.

use std::sync::Mutex;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use crate::engine::approval::{ApprovalGate, Checkpoint, NoDecision};
use crate::types::RunEvent;
use crate::types::approval::{ApprovalRequest, DecidedBy, Decision};

/// One recorded decision.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    call_id: String,
    tool: String,
    approved: bool,
    by: DecidedBy,
    reason: Option<String>,
}

/// The recorded decisions, each given once.
#[derive(Debug, Default)]
pub struct RecordedApprovals {
    decisions: Mutex<Vec<Option<Recorded>>>,
    tools: Vec<String>,
}

impl RecordedApprovals {
    /// The `approval_decided` events of `events`; `None` when there are
    /// none (the run asked nobody).
    pub fn from_events<'a>(
        events: impl IntoIterator<Item = &'a RunEvent>,
    ) -> Option<RecordedApprovals> {
        let decisions: Vec<Recorded> = events
            .into_iter()
            .filter_map(|e| match e {
                RunEvent::ApprovalDecided {
                    id,
                    name,
                    approved,
                    by,
                    reason,
                } => Some(Recorded {
                    call_id: id.clone(),
                    tool: name.clone(),
                    approved: *approved,
                    by: *by,
                    reason: reason.clone(),
                }),
                _ => None,
            })
            .collect();
        if decisions.is_empty() {
            return None;
        }
        let mut tools: Vec<String> = decisions.iter().map(|d| d.tool.clone()).collect();
        tools.sort();
        tools.dedup();
        Some(RecordedApprovals {
            decisions: Mutex::new(decisions.into_iter().map(Some).collect()),
            tools,
        })
    }
}

impl ApprovalGate for RecordedApprovals {
    fn required(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }

    fn request<'a>(
        &'a self,
        _request: &'a ApprovalRequest,
        _checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<DateTime<Utc>, String>> {
        Box::pin(async { Ok(Utc::now()) })
    }

    fn decision<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, Result<Decision, NoDecision>> {
        Box::pin(async move {
            let mut decisions = self
                .decisions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let slot = decisions
                .iter()
                .position(|d| d.as_ref().is_some_and(|d| d.call_id == request.call_id))
                .or_else(|| {
                    decisions
                        .iter()
                        .position(|d| d.as_ref().is_some_and(|d| d.tool == request.tool))
                });
            let recorded = slot.and_then(|i| decisions[i].take()).ok_or_else(|| {
                NoDecision::Failed(format!(
                    "the recording has no approval decision for this call of `{}`",
                    request.tool
                ))
            })?;
            Ok(Decision {
                approved: recorded.approved,
                reason: recorded.reason,
                by: recorded.by,
                at: Utc::now(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_recorded_denial_is_given_back_once() {
        let events = vec![RunEvent::ApprovalDecided {
            id: "c1".into(),
            name: "bash".into(),
            approved: false,
            by: DecidedBy::Cli,
            reason: Some("not now".into()),
        }];
        let gate = RecordedApprovals::from_events(&events).unwrap();
        assert!(gate.required("bash"));
        assert!(!gate.required("read_file"));
        let request = ApprovalRequest {
            call_id: "c1".into(),
            tool: "bash".into(),
            arguments: "{}".into(),
        };
        let decision = gate.decision(&request).await.unwrap();
        assert!(!decision.approved);
        assert_eq!(decision.denial_text(), "denied by a person: not now");
        assert!(matches!(
            gate.decision(&request).await,
            Err(NoDecision::Failed(_))
        ));
        assert!(RecordedApprovals::from_events(&[]).is_none());
    }
}
