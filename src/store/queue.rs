//! The run queue the nodes of a cluster share. A node that accepts a run
//! (API, webhook, trigger) with no free slot claims it `queued` under its
//! own name; any node with a free slot may take it over and start it
//! under its name in one step ([`Store::claim_queued`]); the node that
//! queued it then finds it no longer queued under its name
//! ([`Store::start_run`] checks the owner), so a run starts once. On PostgreSQL the claim skips rows another node is
//! claiming (`FOR UPDATE SKIP LOCKED`), and a run queued anywhere wakes the
//! idle nodes ([`Store::signals`], LISTEN/NOTIFY), as does a cancel request
//! for a run another node runs ([`Store::request_cancel`]).
//!
//! On SQLite (one daemon) the same operations work on the one file; there
//! is nobody to signal.

use tokio::sync::broadcast;

use super::{Backend, RunRecord, Store, StoreError};

/// What one node tells the others through the store (PostgreSQL's
/// LISTEN/NOTIFY): no data of its own, only a reason to look at the store
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterSignal {
    /// A run was claimed `queued` somewhere (or the listener reconnected
    /// and may have missed one): a node with a free slot may take it.
    Queued,
    /// Someone asked to cancel this run: the node running it cancels it.
    Cancel(String),
    /// A node took this queued run over: the node that queued it stops
    /// waiting to start it (and follows its events in the store).
    Taken(String),
    /// New events of this run were stored (or it ended): whoever follows it
    /// from another node reads the store now instead of at its next poll.
    Events(String),
}

/// A queued run taken over by [`Store::claim_queued`], started.
#[derive(Debug, Clone, PartialEq)]
pub struct TakenRun {
    /// As stored now: `running` under its new owner.
    pub run: RunRecord,
    /// The template variables it was accepted with
    /// ([`super::NewRun::template_context`]), to render its templates.
    pub template_context: Option<String>,
}

impl Store {
    /// Takes over at most `limit` runs queued under another owner than
    /// `owner`, oldest first, and starts them: each becomes `owner`'s and
    /// `running` (started now, committed with `synchronous=FULL`), so the
    /// caller runs it at once, and is announced ([`ClusterSignal::Taken`]).
    /// Rows another node is taking at the same moment are skipped, never
    /// waited for.
    /// Only runs of the `agents` named (the ones `owner` loaded); never
    /// runs started by another run (they belong to their parent's process),
    /// nor scheduled fires of the `pinned` agents (`on_overlap: queue`: such
    /// a fire waits behind the agent's earlier run on the node that fired
    /// it).
    pub async fn claim_queued(
        &self,
        owner: &str,
        limit: usize,
        agents: &[String],
        pinned: &[String],
    ) -> Result<Vec<TakenRun>, StoreError> {
        if limit == 0 || agents.is_empty() {
            return Ok(Vec::new());
        }
        route!(self.claim_queued(owner, limit, agents, pinned))
    }

    /// Records `cancelled` (with `reason`) a run still `queued` under
    /// `owner`; false (and no change) when it is not: it started, ended, or
    /// another node took it.
    pub async fn cancel_queued(
        &self,
        id: &str,
        owner: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        route!(self.cancel_queued(id, owner, reason))
    }

    /// The runs of `agent` in flight (queued, running or waiting for
    /// approval) under another owner than `owner`, oldest first: what
    /// `on_overlap` weighs beside this node's own runs.
    pub async fn in_flight_elsewhere(
        &self,
        agent: &str,
        owner: &str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        route!(self.in_flight_elsewhere(agent, owner))
    }

    /// Asks the node running run `id` to cancel it ([`ClusterSignal::Cancel`]
    /// to every node), and keeps the request with the run until it ends
    /// ([`Store::cancels_requested`]), for a node that misses the signal.
    /// Nothing on SQLite, whose runs all run in one daemon.
    pub async fn request_cancel(&self, id: &str) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(db) => db.request_cancel(id.to_string()).await,
        }
    }

    /// The runs someone asked to cancel ([`Store::request_cancel`]) that
    /// have not ended: how a node finds a request whose notification it
    /// missed. Empty on SQLite.
    pub async fn cancels_requested(&self) -> Result<Vec<String>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(Vec::new()),
            Backend::Postgres(db) => db.cancels_requested().await,
        }
    }

    /// The signals of the other nodes, from now on; `None` on SQLite. On
    /// PostgreSQL one connection listens for the whole process (opened by
    /// the first call), reconnecting after a failure, and sends
    /// [`ClusterSignal::Queued`] after each reconnection: a signal may have
    /// been missed meanwhile.
    pub fn signals(&self) -> Option<broadcast::Receiver<ClusterSignal>> {
        match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.signals()),
        }
    }
}
