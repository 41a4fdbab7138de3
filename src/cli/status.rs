//! `aurad status [--json]`: where the store is and, on PostgreSQL, the
//! nodes sharing it: each node's host, pid, last heartbeat, whether it is
//! alive (heartbeat within `cluster.lease`), how many runs wait queued
//! under it and its running runs. Reads the
//! store directly, so it works with or without a running daemon. Then the
//! providers with limits and the channels, as the project's running daemon
//! reports them (the gates and connections are its own): limits, calls
//! waiting and in flight, waits and pauses; each channel's connection,
//! messages in and out, senders ignored, duplicates and last error.

use std::path::Path;

use chrono::Utc;
use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, runtime};
use crate::app::{NodeRecord, Store};
use crate::config::Diagnostic;
use crate::types::{ChannelStatus, Database, GateStatus};

/// How long the running daemon may take to report its provider gates.
const DAEMON_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON: `{"database": ..., "nodes": [...], "providers": [...],
    /// "channels": [...]}` (`providers` and `channels` null when no daemon
    /// of the project answers).
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
    let limited = settings.providers.values().any(|p| !p.limits.is_empty());
    let channels = has_channels(root);
    let report = match limited || channels {
        true => rt.block_on(daemon_report(root)),
        false => Ok(Report::default()),
    };
    let gates = report
        .as_ref()
        .map(|r| r.providers.clone())
        .map_err(Clone::clone);
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
        let body = serde_json::json!({
            "database": database.to_string(),
            "nodes": nodes,
            "providers": gates.as_ref().ok(),
            "channels": report.as_ref().ok().map(|r| &r.channels),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&body).unwrap_or_default()
        );
    } else {
        print!("{}", render(database, &nodes, Utc::now()));
        if limited {
            print!("{}", render_gates(&gates));
        }
        if channels {
            print!(
                "{}",
                render_channels(
                    &report
                        .as_ref()
                        .map(|r| r.channels.clone())
                        .map_err(Clone::clone)
                )
            );
        }
    }
    EXIT_OK
}

/// Whether the project has channel files.
fn has_channels(root: &Path) -> bool {
    std::fs::read_dir(root.join(crate::config::channels::CHANNEL_DIR)).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".yaml") || name.ends_with(".yml")
        })
    })
}

/// What the running daemon reports of itself.
#[derive(Debug, Default, serde::Deserialize)]
struct Report {
    #[serde(default)]
    providers: Vec<GateStatus>,
    #[serde(default)]
    channels: Vec<ChannelStatus>,
}

/// The provider gates and channels of the project's running daemon, from
/// its `/v1/status`; `Err` says why they are unknown.
async fn daemon_report(root: &Path) -> Result<Report, String> {
    let access = crate::app::api_access(root).map_err(|none| match none.stale.is_empty() {
        true => "no aurad serve of this project is running".to_string(),
        false => format!("no aurad serve of this project is running: {none}"),
    })?;
    let mut listen = access.listen;
    // A daemon listening on every interface answers on loopback.
    if listen.ip().is_unspecified() {
        listen.set_ip(match listen.is_ipv4() {
            true => std::net::Ipv4Addr::LOCALHOST.into(),
            false => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let url = format!("http://{listen}/v1/status");
    let client = reqwest::Client::builder()
        .timeout(DAEMON_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot create an HTTP client: {e}"))?;
    let response = client
        .get(&url)
        .bearer_auth(&access.token)
        .send()
        .await
        .map_err(|e| format!("the aurad serve at {} did not answer: {e}", access.listen))?;
    if !response.status().is_success() {
        return Err(format!(
            "the aurad serve at {} answered {}",
            access.listen,
            response.status()
        ));
    }
    response
        .json()
        .await
        .map_err(|e| format!("the aurad serve at {} sent no status: {e}", access.listen))
}

/// The lines about the channels.
pub fn render_channels(channels: &Result<Vec<ChannelStatus>, String>) -> String {
    let channels = match channels {
        Ok(channels) => channels,
        Err(why) => return format!("channels: unknown ({why})\n"),
    };
    let mut out = format!(
        "{:<16} {:<9} {:<16} {:<13} {:>5} {:>5} {:>7} {:>10}\n",
        "CHANNEL", "PLATFORM", "AGENT", "CONNECTION", "IN", "OUT", "IGNORED", "DUPLICATES"
    );
    for c in channels {
        out.push_str(&format!(
            "{:<16} {:<9} {:<16} {:<13} {:>5} {:>5} {:>7} {:>10}\n",
            c.name,
            c.platform,
            c.agent,
            c.connection.as_str(),
            c.messages_in,
            c.messages_out,
            c.ignored,
            c.duplicates
        ));
        if let crate::types::Connection::Reconnecting { reason } = &c.connection {
            out.push_str(&format!("  reconnecting: {reason}\n"));
        } else if let (Some(error), Some(at)) = (&c.last_error, c.last_error_at) {
            out.push_str(&format!(
                "  last error at {}: {error}\n",
                at.format("%Y-%m-%d %H:%M:%S UTC")
            ));
        }
    }
    out
}

/// The lines about the provider gates.
pub fn render_gates(gates: &Result<Vec<GateStatus>, String>) -> String {
    let gates = match gates {
        Ok(gates) => gates,
        Err(why) => return format!("provider limits: unknown ({why})\n"),
    };
    let mut out = format!(
        "{:<16} {:<28} {:>7} {:>9} {:>7} {:>9} {:>6}\n",
        "PROVIDER", "LIMITS", "WAITING", "IN FLIGHT", "WAITS", "WAITED", "PAUSES"
    );
    for gate in gates {
        let l = &gate.limits;
        let mut limits: Vec<String> = [
            l.concurrent.map(|n| format!("{n} at once")),
            l.requests_per_minute.map(|n| format!("{n} rpm")),
            l.tokens_per_minute.map(|n| format!("{n} tpm")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if gate.shared {
            limits.push("shared".into());
        }
        out.push_str(&format!(
            "{:<16} {:<28} {:>7} {:>9} {:>7} {:>8.1}s {:>6}\n",
            gate.provider,
            limits.join(", "),
            gate.waiting,
            gate.in_flight,
            gate.waits,
            gate.waited_seconds,
            gate.pauses
        ));
    }
    out
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
            // Short ids: the whole ids share their start (the time).
            node.running
                .iter()
                .map(|id| crate::app::run_or_agent::short_run_id(id))
                .collect::<Vec<_>>()
                .join(", ")
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
    fn channels_show_their_connection_counts_and_why_they_reconnect() {
        let channel = |name: &str, connection: crate::types::Connection| ChannelStatus {
            name: name.into(),
            platform: "telegram".into(),
            agent: "helper".into(),
            connection,
            messages_in: 3,
            messages_out: 4,
            ignored: 1,
            duplicates: 0,
            last_error: None,
            last_error_at: None,
        };
        let out = render_channels(&Ok(vec![
            channel("tg", crate::types::Connection::Connected),
            channel(
                "tg2",
                crate::types::Connection::Reconnecting {
                    reason: "getUpdates: Telegram answered 401: Unauthorized".into(),
                },
            ),
        ]));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("CHANNEL"), "{out}");
        assert!(
            lines[1].starts_with("tg ") && lines[1].contains("connected"),
            "{out}"
        );
        assert!(
            lines[1]
                .split_whitespace()
                .collect::<Vec<_>>()
                .ends_with(&["3", "4", "1", "0"]),
            "{out}"
        );
        assert_eq!(
            lines[3],
            "  reconnecting: getUpdates: Telegram answered 401: Unauthorized"
        );
        assert_eq!(
            render_channels(&Err("no aurad serve of this project is running".into())),
            "channels: unknown (no aurad serve of this project is running)\n"
        );
    }

    #[test]
    fn provider_gates_show_their_limits_and_waiting_calls() {
        let gate = GateStatus {
            provider: "openai".into(),
            limits: crate::types::GateLimits {
                concurrent: Some(4),
                requests_per_minute: Some(300),
                tokens_per_minute: None,
            },
            shared: true,
            waiting: 3,
            in_flight: 4,
            waits: 12,
            waited_seconds: 7.5,
            pauses: 1,
        };
        let text = render_gates(&Ok(vec![gate]));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("PROVIDER"), "{text}");
        assert!(lines[0].contains("IN FLIGHT"), "{text}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "openai", "4", "at", "once,", "300", "rpm,", "shared", "3", "4", "12", "7.5s", "1"
            ],
            "{text}"
        );
        let text = render_gates(&Err("no aurad serve of this project is running".into()));
        assert_eq!(
            text,
            "provider limits: unknown (no aurad serve of this project is running)\n"
        );
    }

    #[test]
    fn sqlite_is_one_node() {
        let text = render(&Database::Sqlite("/p/aurad.db".into()), &[], Utc::now());
        assert!(text.contains("SQLite /p/aurad.db (one node"), "{text}");
    }
}
