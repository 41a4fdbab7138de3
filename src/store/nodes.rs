//! The nodes sharing one store. On PostgreSQL several `aurad serve`
//! processes (and one-shot `aurad run`s) use one database; each heartbeats
//! a row of `nodes`, and one silent for longer than the lease is dead: the
//! others take over its runs. A node's id is its owner text (the one it
//! writes into the runs it claims, `daemon::owner`), so a run's owner names
//! its node. SQLite is one machine's file: it has no node rows, and a run's
//! owner is checked as a process of that machine instead.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Backend, Store, StoreError};
use crate::types::timestamp;

/// What a node says of itself when it heartbeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its owner text (`daemon::owner::this_process`).
    pub id: String,
    pub host: String,
    pub pid: u32,
    /// The aurad version it runs.
    pub version: String,
    /// Each agent it loaded, by name, with its definition hash.
    pub agents: BTreeMap<String, String>,
}

/// A node as the store knows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRecord {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
    #[serde(serialize_with = "timestamp::millis")]
    pub started_at: DateTime<Utc>,
    #[serde(serialize_with = "timestamp::millis")]
    pub heartbeat_at: DateTime<Utc>,
    /// When it stopped cleanly; `None` while it runs (or died).
    #[serde(serialize_with = "timestamp::millis_opt")]
    pub stopped_at: Option<DateTime<Utc>>,
    /// Heartbeat within the lease and not stopped.
    pub alive: bool,
    /// The runs it owns in state `running`, oldest first.
    pub running: Vec<String>,
    /// How many runs wait `queued` under it (for a free slot there, or for
    /// another node to take them).
    pub queued: u64,
    /// Each agent it loaded, with its definition hash.
    pub agents: BTreeMap<String, String>,
}

impl Store {
    /// Whether several processes may share this store as nodes
    /// (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(&*self.backend, Backend::Postgres(_))
    }

    /// Records that `node` is alive now (the database's clock, so nodes'
    /// clocks need not agree); the first heartbeat registers it. Nothing on
    /// SQLite.
    pub async fn heartbeat(&self, node: &NodeInfo) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(db) => db.heartbeat(node.clone()).await,
        }
    }

    /// Records that node `id` stopped cleanly (its runs were finished or
    /// handed back first). Nothing on SQLite.
    pub async fn node_stopped(&self, id: &str) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(db) => db.node_stopped(id.to_string()).await,
        }
    }

    /// The ids of the nodes that heartbeat within `lease` and did not stop;
    /// `None` on SQLite, where liveness is a process check on the machine.
    pub async fn live_nodes(&self, lease: Duration) -> Result<Option<HashSet<String>>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => db.live_nodes(lease).await.map(Some),
        }
    }

    /// The nodes known (those stopped or silent for more than a day are
    /// left out), oldest first, with their running runs; empty on SQLite.
    pub async fn nodes(&self, lease: Duration) -> Result<Vec<NodeRecord>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(Vec::new()),
            Backend::Postgres(db) => db.nodes(lease).await,
        }
    }
}
