//! What a run's end sets off under `aurad serve`: a run of every agent
//! whose `after:` names the ended run's agent with a matching outcome
//! (through the supervisor like any run: overlap policy, concurrency cap,
//! and claimed with the ended run's id so each follow-up starts at most
//! once), and for a run started by a file (`watch:`) that succeeded, the
//! move of the file to `move_to`.
//!
//! Depends on the supervisor, the snapshot, the store and the watch's file
//! moves.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::supervisor::{OnRunEnd, RunEnded, SubmitError, Supervisor};
use super::watch::{blocking, move_processed};
use crate::registry::Snapshot;
use crate::run::RunRequest;
use crate::run::template::TriggerVars;
use crate::store::TriggerClaim;
use crate::types::{RunState, Trigger};

/// The follow-ups of runs under `aurad serve`, looked up in the snapshot
/// current when each run ends.
pub(super) struct FollowUps {
    pub(super) snapshots: watch::Receiver<Arc<Snapshot>>,
}

impl OnRunEnd for FollowUps {
    fn ended<'a>(&'a self, supervisor: &'a Arc<Supervisor>, ended: RunEnded) -> BoxFuture<'a, ()> {
        let snapshot = self.snapshots.borrow().clone();
        Box::pin(async move {
            let RunEnded {
                run_id,
                agent,
                state,
                origin,
            } = ended;
            follow_up(supervisor, snapshot, &run_id, &agent, state, origin).await
        })
    }
}

async fn follow_up(
    supervisor: &Arc<Supervisor>,
    snapshot: Arc<Snapshot>,
    run_id: &str,
    agent: &str,
    state: RunState,
    origin: Option<TriggerVars>,
) {
    if let Some(TriggerVars::Watch { path, content_hash }) = &origin
        && state == RunState::Succeeded
        && let Some(move_to) = snapshot
            .project
            .agents
            .get(agent)
            .and_then(|a| a.triggers.watch.as_ref())
            .and_then(|w| w.move_to.as_ref())
    {
        let moved = {
            let (root, path, hash, to) = (
                snapshot.project.root.clone(),
                path.clone(),
                content_hash.clone(),
                move_to.clone(),
            );
            blocking("moving a processed file", move || {
                move_processed(&root, &path, &hash, &to)
            })
            .await
            .unwrap_or_else(|| Err(std::io::Error::other("moving the file failed")))
        };
        match moved {
            Ok(Some(to)) => {
                tracing::info!(run = %run_id, file = %path, to = %to.display(), "processed file moved (watch.move_to)")
            }
            Ok(None) => {
                tracing::info!(run = %run_id, file = %path, "file changed or went away during its run; not moved")
            }
            Err(e) => {
                tracing::error!(run = %run_id, file = %path, "cannot move the processed file: {e}")
            }
        }
    }
    start_followers(supervisor, &snapshot, run_id, agent, state).await;
}

/// Submits the follow-ups of run `run_id` of `agent`, ended in `state`.
async fn start_followers(
    supervisor: &Arc<Supervisor>,
    snapshot: &Arc<Snapshot>,
    run_id: &str,
    agent: &str,
    state: RunState,
) {
    let followers: Vec<&crate::config::Agent> = snapshot
        .project
        .agents
        .values()
        .filter(|a| {
            a.triggers
                .after
                .iter()
                .any(|t| t.agent == agent && t.on.matches(state))
        })
        .collect();
    if followers.is_empty() {
        return;
    }
    let output = match supervisor.store().get_run(run_id).await {
        Ok(Some(run)) => run.output.unwrap_or_default(),
        Ok(None) => String::new(),
        Err(e) => {
            tracing::error!(run = %run_id, "cannot read the run's output for its follow-ups: {e}");
            String::new()
        }
    };
    for follower in followers {
        let request = RunRequest {
            origin: Some(TriggerVars::After {
                agent: agent.to_string(),
                run_id: run_id.to_string(),
                state,
                output: output.clone(),
            }),
            claim: Some(TriggerClaim::After {
                after_run_id: run_id.to_string(),
            }),
            ..RunRequest::new(&follower.name, Trigger::After)
        };
        let overlap = Some(follower.triggers.on_overlap);
        match supervisor.submit(snapshot.clone(), request, overlap).await {
            Ok(run) => {
                tracing::info!(run = %run_id, follow_up = %run.id, agent = %follower.name, state = %run.state, "run ended; follow-up started (after:)")
            }
            Err(SubmitError::AlreadyTriggered) => {
                tracing::debug!(run = %run_id, agent = %follower.name, "follow-up started already")
            }
            Err(SubmitError::ShuttingDown) => {
                tracing::warn!(run = %run_id, agent = %follower.name, "run ended during shutdown: its follow-up (after:) is not started")
            }
            Err(e) => {
                tracing::error!(run = %run_id, agent = %follower.name, "cannot start the follow-up run (after:): {e}")
            }
        }
    }
}
