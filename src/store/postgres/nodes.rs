//! The `nodes` table: heartbeats, clean stops, and which nodes are alive
//! (heartbeat within the lease, by the database's clock).

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Postgres, pg};
use crate::store::StoreError;
use crate::store::nodes::{NodeInfo, NodeRecord};

impl Postgres {
    pub(crate) async fn heartbeat(&self, node: NodeInfo) -> Result<(), StoreError> {
        self.with_client(move |client| async move {
            let statement = client
                .prepare_cached(
                    "INSERT INTO nodes (id, host, pid, version, started_at, heartbeat_at, agents)
                     VALUES ($1, $2, $3, $4, now(), now(), $5)
                     ON CONFLICT (id) DO UPDATE
                        SET heartbeat_at = now(), stopped_at = NULL, host = EXCLUDED.host,
                            version = EXCLUDED.version, agents = EXCLUDED.agents",
                )
                .await
                .map_err(pg("preparing the heartbeat"))?;
            client
                .execute(
                    &statement,
                    &[
                        &node.id,
                        &node.host,
                        &i64::from(node.pid),
                        &node.version,
                        &serde_json::to_string(&node.agents).unwrap_or_else(|_| "{}".into()),
                    ],
                )
                .await
                .map_err(pg("recording a heartbeat"))?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn node_stopped(&self, id: String) -> Result<(), StoreError> {
        self.with_client(move |client| async move {
            client
                .execute(
                    "UPDATE nodes SET stopped_at = now(), heartbeat_at = now() WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(pg("recording a node's stop"))?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn live_nodes(&self, lease: Duration) -> Result<HashSet<String>, StoreError> {
        let lease = lease.as_secs_f64();
        self.with_client(move |client| async move {
            let statement = client
                .prepare_cached(
                    "SELECT id FROM nodes
                     WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => $1)",
                )
                .await
                .map_err(pg("preparing the live nodes query"))?;
            let rows = client
                .query(&statement, &[&lease])
                .await
                .map_err(pg("reading the live nodes"))?;
            Ok(rows.iter().map(|row| row.get::<_, String>(0)).collect())
        })
        .await
    }

    pub(crate) async fn nodes(&self, lease: Duration) -> Result<Vec<NodeRecord>, StoreError> {
        let lease = lease.as_secs_f64();
        self.with_client(move |client| async move {
            let rows = client
                .query(
                    "SELECT n.id, n.host, n.pid, n.version, n.started_at, n.heartbeat_at,
                            n.stopped_at,
                            n.stopped_at IS NULL
                              AND n.heartbeat_at > now() - make_interval(secs => $1),
                            ARRAY(SELECT r.id FROM runs r
                                  WHERE r.owner = n.id AND r.state = 'running'
                                  ORDER BY r.created_at),
                            n.agents,
                            (SELECT count(*) FROM runs r
                             WHERE r.owner = n.id AND r.state = 'queued')
                     FROM nodes n
                     WHERE n.heartbeat_at > now() - interval '1 day'
                     ORDER BY n.started_at, n.id",
                    &[&lease],
                )
                .await
                .map_err(pg("listing the nodes"))?;
            rows.iter()
                .map(|row| {
                    let pid: i64 = row.get(2);
                    Ok(NodeRecord {
                        id: row.get(0),
                        host: row.get(1),
                        pid: u32::try_from(pid).unwrap_or(0),
                        version: row.get(3),
                        started_at: row.get::<_, DateTime<Utc>>(4),
                        heartbeat_at: row.get::<_, DateTime<Utc>>(5),
                        stopped_at: row.get(6),
                        alive: row.get(7),
                        running: row.get(8),
                        // Written by this code as a JSON map; anything else
                        // reads as no agents (it only feeds a warning).
                        agents: serde_json::from_str(row.get::<_, &str>(9)).unwrap_or_default(),
                        queued: u64::try_from(row.get::<_, i64>(10)).unwrap_or(0),
                    })
                })
                .collect()
        })
        .await
    }
}
