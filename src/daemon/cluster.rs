//! This node of a PostgreSQL cluster: several `aurad serve` processes on
//! one database. Every tick (a third of the lease, at most 2 s) the node
//! heartbeats, reads which nodes are alive, and takes over the runs of the
//! dead ones ([`super::takeover::take_over`]: running runs become
//! `interrupted` and are retried per `on_interrupt`, queued ones run here,
//! pipelines resume); the store hands each run to one node. Runs a dead
//! node left waiting for approval are adopted by the next node to start. The nodes
//! table it reads is shown by `/v1/status` (cached here, so the status
//! handler stays synchronous).
//!
//! A node that stops cleanly records it (`Store::node_stopped`), so the
//! others need not wait for its lease to run out.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Daemon;
use super::owner;
use super::takeover::{Liveness, Waiting, take_over};
use crate::store::NodeInfo;

/// The longest time between two heartbeats, whatever the lease.
const MAX_TICK: Duration = Duration::from_secs(2);

/// This process as a node: its owner text, host name, pid and version.
pub fn this_node() -> NodeInfo {
    NodeInfo {
        id: owner::this_process().to_string(),
        host: host_name(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// How often a node heartbeats and looks for dead ones: a third of the
/// lease (so two heartbeats may be lost before others take over), at most
/// [`MAX_TICK`].
pub fn tick(lease: Duration) -> Duration {
    (lease / 3).min(MAX_TICK).max(Duration::from_millis(100))
}

/// Heartbeats and takes over dead nodes' runs until `stop`.
pub async fn run(daemon: Arc<Daemon>, node: NodeInfo, lease: Duration, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(tick(lease));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stop.cancelled() => return,
        }
        if let Err(e) = daemon.store.heartbeat(&node).await {
            tracing::error!(
                "cannot heartbeat (the other nodes take over this node's runs after {}s without one): {e}",
                lease.as_secs()
            );
            continue;
        }
        let liveness = match Liveness::read(&daemon.store, lease).await {
            Ok(liveness) => liveness,
            Err(e) => {
                tracing::error!("cannot read which nodes are alive: {e}");
                continue;
            }
        };
        match take_over(&daemon, &liveness, Waiting::Leave).await {
            Ok(done) if done.pipelines + done.requeued + done.interrupted > 0 => {
                tracing::info!(
                    pipelines = done.pipelines,
                    requeued = done.requeued,
                    interrupted = done.interrupted,
                    "took over the runs of a node that is gone"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::error!("cannot take over the runs of dead nodes: {e}"),
        }
        match daemon.store.nodes(lease).await {
            Ok(nodes) => daemon.set_nodes(nodes),
            Err(e) => tracing::warn!("cannot list the nodes: {e}"),
        }
    }
}

/// The machine's host name (`uname`), or `unknown`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
