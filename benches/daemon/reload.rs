//! The reload latency (figure 1): an agent file rewritten, to the API
//! showing its new definition.

use std::time::{Duration, Instant};

use crate::process::{Daemon, Project, agent_yaml};
use crate::stats::percentile;
use crate::{Table, ms, sorted};

pub(crate) async fn reload_bench(edits: usize, table: &mut Table) {
    let agents: Vec<(String, String)> = (0..5)
        .map(|i| {
            (
                format!("agent{i}"),
                agent_yaml("mock0/m", &format!("Prompt {i}, version 0."), None),
            )
        })
        .collect();
    let project = Project::new(&[], "", &agents);
    let daemon = Daemon::start(&project).await;
    let file = project.path().join("agents/agent2.yaml");
    let mut latencies = Vec::new();
    let mut old_hash = agent_hash(&daemon).await;
    // The first two edits warm up the page cache and the watcher.
    for edit in 0..edits + 2 {
        // Let any straggling events of the previous edit pass first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let yaml = agent_yaml("mock0/m", &format!("Prompt 2, version {}.", edit + 1), None);
        let start = Instant::now();
        std::fs::write(&file, yaml).unwrap();
        let new_hash = loop {
            let hash = agent_hash(&daemon).await;
            if hash != old_hash {
                break hash;
            }
            if start.elapsed() > Duration::from_secs(10) {
                daemon.fail("the edit was not picked up within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let elapsed = start.elapsed();
        old_hash = new_hash;
        if edit >= 2 {
            latencies.push(ms(elapsed));
        }
    }
    let reloads = daemon.log_text().matches("reloaded").count();
    let latencies = sorted(latencies);
    table.row(
        "reload: agent file written -> API shows the new definition",
        "300 ms median",
        format!(
            "**{:.0} ms** median, {:.0} ms p90",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9)
        ),
        format!(
            "min {:.0} ms, max {:.0} ms, n={}, 5 agents, {} reloads logged for {} edits",
            latencies[0],
            latencies[latencies.len() - 1],
            latencies.len(),
            reloads,
            edits + 2
        ),
    );
}

pub(crate) async fn agent_hash(daemon: &Daemon) -> String {
    let agent = daemon.get_json("/v1/agents/agent2").await;
    agent["definition_hash"]
        .as_str()
        .unwrap_or_else(|| daemon.fail(&format!("no definition_hash in {agent}")))
        .to_string()
}
