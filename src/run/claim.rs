//! A run's claim still being committed while the run starts
//! ([`super::execute`]: `aurad run`, agents called as tools,
//! pipeline steps; and the daemon's runs that start at once and are no
//! scheduled fire, webhook delivery or trigger, whose exactly-once claim
//! must decide first). The claim's `synchronous=FULL` commit overlaps the
//! first model call instead of delaying it; nothing that needs the run's
//! row comes before the claim is durable:
//! - the first model answer is handed to the engine only then, so no tool
//!   runs and no second call is made for a run that is not recorded (a
//!   model call has no side effect; it is sent again if it must be);
//! - the run's events and its final state are written only then (the
//!   runner waits on [`PendingClaim::wait`]), so they never reach a
//!   PostgreSQL connection before the row does.
//!
//! A claim that fails ends the run at its first model answer, and the
//! claim's error is the run's result.
//!
//! May depend on `store`, `llm`, `futures` and `tokio`.

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::llm::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::store::{NewRun, RunRecord, Store, StoreError};

/// The claim of one run, committing on a task of its own; every clone
/// waits for the same commit.
#[derive(Clone)]
pub struct PendingClaim(Shared<BoxFuture<'static, Result<RunRecord, StoreError>>>);

impl PendingClaim {
    /// Starts claiming `run` at once (the write is queued before anything
    /// else the run writes).
    pub fn start(store: &Store, run: NewRun) -> PendingClaim {
        let store = store.clone();
        let task = tokio::spawn(async move { store.claim_run(run).await });
        let claimed = async move {
            task.await.unwrap_or_else(|e| {
                Err(StoreError::Invalid(format!(
                    "the task claiming the run ended early: {e}"
                )))
            })
        };
        PendingClaim(claimed.boxed().shared())
    }

    /// Waits until the claim is durable, or returns why it failed.
    pub async fn wait(&self) -> Result<(), StoreError> {
        self.record().await.map(drop)
    }

    /// The claimed run's record, once durable.
    pub async fn record(&self) -> Result<RunRecord, StoreError> {
        self.0.clone().await
    }

    /// `provider`, whose answers are handed over only once the claim is
    /// durable (at once from then on).
    pub fn gate(&self, provider: Arc<dyn Provider>) -> Arc<dyn Provider> {
        Arc::new(AfterClaim {
            inner: provider,
            claim: self.clone(),
        })
    }
}

/// See [`PendingClaim::gate`].
struct AfterClaim {
    inner: Arc<dyn Provider>,
    claim: PendingClaim,
}

impl Provider for AfterClaim {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let claimed = self.claim.wait().map(|claimed| {
                claimed.map_err(|e| {
                    // Not retried: the run cannot go on unrecorded.
                    ProviderError::Config(format!("the run could not be recorded: {e}"))
                })
            });
            let (turn, ()) =
                futures::future::try_join(self.inner.stream(request, on_delta), claimed).await?;
            Ok(turn)
        })
    }
}
