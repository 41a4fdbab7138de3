//! Several real `aurad serve` nodes on one PostgreSQL database, for the
//! cluster tests: each node has a project directory of its own with the
//! same files (as nodes on several machines with the same checkout would),
//! the `test` model (offline), and `AURAD_DATABASE_URL` naming the test's
//! database.

use std::net::SocketAddr;

use serde_json::Value;

use super::postgres::TestDatabase;
use super::serve::{Serve, free_port, http_get};

/// The lease the test clusters run with: short, so takeover is quick.
pub const LEASE: &str = "3s";

/// A project directory for one node: `aurad.yaml` with its own port, the
/// lease and its `max_concurrent_runs`, and `agents` (name, yaml), plus
/// the plugins `nap` (sleeps 30 s) and `doze` (sleeps 2 s).
pub fn node_project(
    agents: &[(String, String)],
    max_concurrent_runs: usize,
) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        root.join("aurad.yaml"),
        format!("listen: {addr}\nshutdown_grace: 5s\nmax_concurrent_runs: {max_concurrent_runs}\ncluster:\n  lease: {LEASE}\n"),
    )
    .unwrap();
    std::fs::create_dir(root.join("agents")).unwrap();
    for (name, yaml) in agents {
        std::fs::write(root.join(format!("agents/{name}.yaml")), yaml).unwrap();
    }
    std::fs::create_dir(root.join("tools.d")).unwrap();
    std::fs::write(
        root.join("tools.d/nap.yaml"),
        "description: Sleeps for a while.\nparameters:\n  type: object\n  properties:\n    seconds: { type: integer, examples: [30] }\n  required: [seconds]\ncommand: [\"./nap.sh\"]\ntimeout: 120s\n",
    )
    .unwrap();
    let script = root.join("tools.d/nap.sh");
    std::fs::write(&script, "#!/usr/bin/env bash\nsleep 30\necho rested\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        root.join("tools.d/doze.yaml"),
        "description: Dozes for two seconds.\nparameters:\n  type: object\n  properties: {}\ncommand: [\"./doze.sh\"]\ntimeout: 60s\n",
    )
    .unwrap();
    let script = root.join("tools.d/doze.sh");
    std::fs::write(&script, "#!/usr/bin/env bash\nsleep 2\necho awake\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, addr)
}

/// Starts `n` nodes on `db` with the same `agents`, 16 slots each.
pub fn cluster(
    db: &TestDatabase,
    n: usize,
    agents: &[(String, String)],
) -> Vec<(tempfile::TempDir, Serve)> {
    cluster_with(db, &vec![16; n], agents)
}

/// Starts a node per entry of `slots` (its `max_concurrent_runs`) on `db`
/// with the same `agents`.
pub fn cluster_with(
    db: &TestDatabase,
    slots: &[usize],
    agents: &[(String, String)],
) -> Vec<(tempfile::TempDir, Serve)> {
    slots
        .iter()
        .map(|&slots| {
            let (dir, addr) = node_project(agents, slots);
            let serve = Serve::start_with_env(
                dir.path(),
                addr,
                &[],
                &[("AURAD_DATABASE_URL", db.url.as_str())],
            );
            (dir, serve)
        })
        .collect()
}

pub fn get_json(addr: SocketAddr, path: &str) -> Option<Value> {
    match http_get(addr, path) {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

pub fn logs(nodes: &[(tempfile::TempDir, Serve)]) -> String {
    logs_of(nodes, 0..nodes.len())
}

/// The logs of the nodes numbered `which`, each under its number.
pub fn logs_of(
    nodes: &[(tempfile::TempDir, Serve)],
    which: impl IntoIterator<Item = usize>,
) -> String {
    which
        .into_iter()
        .map(|i| format!("--- node {i}\n{}", nodes[i].1.log()))
        .collect()
}

/// Waits until no run in `db` is queued or running.
pub fn wait_all_ended(db: &TestDatabase, nodes: &[(tempfile::TempDir, Serve)]) {
    super::serve::poll(
        "every run to finish",
        || logs(nodes),
        || {
            let open = db.count("SELECT count(*) FROM runs WHERE state IN ('queued', 'running')");
            (open == 0).then_some(())
        },
    );
}
