//! `aurad status [--json]`: where the store is and, on PostgreSQL, the
//! nodes sharing it: each node's host, pid, last heartbeat, whether it is
//! alive (heartbeat within `cluster.lease`), how many runs wait queued
//! under it and its running runs. Reads the
//! store directly, so it works with or without a running daemon.

use std::path::Path;

use chrono::Utc;
use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, runtime};
use crate::app::{NodeRecord, Store};
use crate::config::Diagnostic;
use crate::types::Database;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON: `{"database": ..., "nodes": [...]}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(root: &Path, args: StatusArgs) -> i32 {
    let (settings, diagnostics) = crate::config::load_settings(root, &crate::config::process_env);
    if diagnostics.iter().any(Diagnostic::is_error) {
        super::print_diagnostics(&diagnostics);
        eprintln!("error: aurad.yaml has errors");
        return EXIT_FAILED;
    }
    let database = &settings.database;
    let store = match Store::connect(database) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("error: database {database}: {e}");
            return EXIT_FAILED;
        }
    };
    let Some(rt) = runtime() else {
        return EXIT_FAILED;
    };
    let nodes = rt.block_on(store.nodes(settings.cluster_lease));
    drop(rt);
    let closed = store.close();
    let nodes = match nodes {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("error: cannot list the nodes: {e}");
            return EXIT_FAILED;
        }
    };
    if let Err(e) = closed {
        eprintln!("error: closing the database: {e}");
        return EXIT_FAILED;
    }
    if args.json {
        let body = serde_json::json!({ "database": database.to_string(), "nodes": nodes });
        println!(
            "{}",
            serde_json::to_string_pretty(&body).unwrap_or_default()
        );
    } else {
        print!("{}", render(database, &nodes, Utc::now()));
    }
    EXIT_OK
}

/// The lines `aurad status` prints.
pub fn render(database: &Database, nodes: &[NodeRecord], now: chrono::DateTime<Utc>) -> String {
    let mut out = String::new();
    match database {
        Database::Sqlite(path) => {
            out.push_str(&format!(
                "database: SQLite {} (one node: the `aurad serve` of this project)\n",
                path.display()
            ));
            return out;
        }
        Database::Postgres(url) => out.push_str(&format!("database: PostgreSQL {url}\n")),
    }
    if nodes.is_empty() {
        out.push_str("nodes: none has heartbeat in the last day\n");
        return out;
    }
    out.push_str(&format!(
        "{:<6} {:<20} {:>8} {:>14} {:>7}  {}\n",
        "ALIVE", "HOST", "PID", "HEARTBEAT", "QUEUED", "RUNNING"
    ));
    for node in nodes {
        let age = (now - node.heartbeat_at).num_milliseconds().max(0) as f64 / 1000.0;
        let alive = match (node.alive, node.stopped_at) {
            (true, _) => "yes",
            (false, Some(_)) => "stopped",
            (false, None) => "no",
        };
        let running = if node.running.is_empty() {
            "-".to_string()
        } else {
            node.running.join(", ")
        };
        out.push_str(&format!(
            "{alive:<6} {:<20} {:>8} {:>12.1}s {:>7}  {running}\n",
            node.host, node.pid, age, node.queued
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(alive: bool, stopped: bool, running: &[&str]) -> NodeRecord {
        let now = Utc::now();
        NodeRecord {
            id: "pid:1 boot b start 1".into(),
            host: "box".into(),
            pid: 1,
            version: "0.1.0".into(),
            started_at: now,
            heartbeat_at: now - chrono::Duration::seconds(4),
            stopped_at: stopped.then_some(now),
            alive,
            running: running.iter().map(|r| r.to_string()).collect(),
            queued: 2,
            agents: Default::default(),
        }
    }

    #[test]
    fn nodes_are_listed_with_the_password_masked() {
        let url = crate::types::DatabaseUrl::new("postgres://u:secret@db/aurad");
        let text = render(
            &Database::Postgres(url),
            &[
                node(true, false, &["r1", "r2"]),
                node(false, false, &[]),
                node(false, true, &[]),
            ],
            Utc::now(),
        );
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("postgres://u:***@db/aurad"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[2].starts_with("yes") && lines[2].ends_with("r1, r2"),
            "{text}"
        );
        assert!(lines[3].starts_with("no "), "{text}");
        assert!(lines[4].starts_with("stopped"), "{text}");
        assert!(lines[2].contains("4.0s"), "{text}");
        assert!(lines[1].contains("QUEUED"), "{text}");
        assert!(lines[2].contains(" 2  r1, r2"), "the queued count: {text}");
    }

    #[test]
    fn sqlite_is_one_node() {
        let text = render(&Database::Sqlite("/p/aurad.db".into()), &[], Utc::now());
        assert!(text.contains("SQLite /p/aurad.db (one node"), "{text}");
    }
}
