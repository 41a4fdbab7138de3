//! This node of a PostgreSQL cluster: several `aurad serve` processes on
//! one database. Every tick (a third of the lease, at most 2 s) the node
//! heartbeats, reads which nodes are alive, and takes over the runs of the
//! dead ones ([`takeover::take_over`]: running runs become
//! `interrupted` and are retried per `on_interrupt`, queued ones run here,
//! pipelines resume, runs waiting for approval are adopted); the store
//! hands each run to one node. The nodes
//! table it reads is shown by `/v1/status` (cached here, so the status
//! handler stays synchronous).
//!
//! Beside that loop, [`shared_queue`] takes queued runs of busy
//! nodes into this node's free slots.
//!
//! Every node also publishes its agents' definition hashes; one that sees
//! another live node with a different definition of the same agent warns
//! (once per node, agent and definition).
//!
//! A node that stops cleanly records it (`Store::node_stopped`), so the
//! others need not wait for its lease to run out.

pub mod remote_events;
pub mod shared_queue;
pub mod takeover;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::daemon::Daemon;
use crate::registry::Snapshot;
use crate::run::owner;
use crate::store::{NodeInfo, NodeRecord};
use takeover::{Liveness, take_over};

/// The longest time between two heartbeats, whatever the lease.
const MAX_TICK: Duration = Duration::from_secs(2);

/// This process as a node: its owner text, host name, pid, version and
/// the agents of `snapshot` with their definition hashes.
pub fn this_node(snapshot: &Snapshot) -> NodeInfo {
    NodeInfo {
        id: owner::this_process().to_string(),
        host: host_name(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        agents: snapshot
            .project
            .agents
            .values()
            .map(|a| (a.name.clone(), a.hash.clone()))
            .collect(),
    }
}

/// Warns once per (node, agent, hash) about agents another live node
/// loaded with a different definition: each run uses the definition of the
/// node that claimed it, so they would behave differently by node.
#[derive(Debug, Default)]
struct Divergence {
    warned: HashSet<(String, String, String)>,
}

impl Divergence {
    fn check(&mut self, me: &NodeInfo, nodes: &[NodeRecord]) {
        for node in nodes.iter().filter(|n| n.alive && n.id != me.id) {
            for (agent, hash) in &node.agents {
                let Some(mine) = me.agents.get(agent) else {
                    continue;
                };
                if mine != hash
                    && self
                        .warned
                        .insert((node.id.clone(), agent.clone(), hash.clone()))
                {
                    tracing::warn!(
                        agent = %agent,
                        node = %node.id,
                        host = %node.host,
                        "agent `{agent}` differs on node {} ({}): definition {} there, {} here; each run uses the definition of the node that claims it, so give every node the same files",
                        node.id,
                        node.host,
                        short(hash),
                        short(mine)
                    );
                }
            }
        }
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// How often a node heartbeats and looks for dead ones: a third of the
/// lease (so two heartbeats may be lost before others take over), at most
/// [`MAX_TICK`].
pub fn tick(lease: Duration) -> Duration {
    (lease / 3).min(MAX_TICK).max(Duration::from_millis(100))
}

/// Heartbeats and takes over dead nodes' runs, and takes queued runs of
/// busy nodes into free slots ([`shared_queue`]), until `stop`.
pub async fn run(daemon: Arc<Daemon>, lease: Duration, stop: CancellationToken) {
    tokio::join!(
        heartbeat(daemon.clone(), lease, stop.clone()),
        shared_queue::run(daemon, stop)
    );
}

/// Every tick until `stop`: heartbeats, reads who is alive, takes over the
/// runs of the dead, refreshes the nodes `/v1/status` shows.
async fn heartbeat(daemon: Arc<Daemon>, lease: Duration, stop: CancellationToken) {
    let mut divergence = Divergence::default();
    let mut ticks = tokio::time::interval(tick(lease));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stop.cancelled() => return,
        }
        let node = this_node(&daemon.snapshot());
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
        match take_over(&daemon, &liveness).await {
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
            Ok(nodes) => {
                divergence.check(&node, &nodes);
                daemon.set_nodes(nodes);
            }
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
