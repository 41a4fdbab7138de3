//! `aurad.yaml`: optional project settings (providers, database, listen
//! address and the host names the API answers to, concurrency, shutdown
//! grace, prices, retention, the agents offered as MCP tools). Every field
//! has a default.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::bounds::{Syntax, check_text};
use super::diag::{Diagnostic, locate, locate_item, offset_to_place};
use super::duration::duration_value;
use super::prices::parse_prices;
use super::providers::{ProviderConfig, builtin_providers, parse_providers};
use super::yaml_value::yaml_diagnostic;
use crate::types::{Database, Price};

/// How long a PostgreSQL node may go without a heartbeat (`cluster.lease`).
pub const DEFAULT_CLUSTER_LEASE: Duration = Duration::from_secs(15);
const MIN_CLUSTER_LEASE: Duration = Duration::from_secs(1);
const MAX_CLUSTER_LEASE: Duration = Duration::from_secs(600);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    providers: BTreeMap<String, super::providers::RawProvider>,
    database: Option<String>,
    listen: Option<String>,
    max_concurrent_runs: Option<usize>,
    shutdown_grace: Option<Value>,
    prices: Option<Value>,
    allowed_hosts: Option<Vec<String>>,
    /// Where OpenTelemetry traces go (`config::otel`).
    otel: Option<Value>,
    retention: Option<RawRetention>,
    /// How long conversations are kept and how big they grow
    /// (`config::sessions`).
    sessions: Option<super::sessions::RawSessionLimits>,
    /// Several nodes on one PostgreSQL database (`cluster: {lease: 15s}`).
    cluster: Option<RawCluster>,
    /// aurad as an MCP server: which agents it offers as tools.
    mcp_server: Option<RawMcpServer>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    agents: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    lease: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The store: a SQLite file (absolute path; the default `aurad.db`) or
    /// a PostgreSQL database (`database: postgres://...`, or
    /// `AURAD_DATABASE_URL`, which wins).
    pub database: Database,
    /// On PostgreSQL: how long a node may go without a heartbeat before
    /// the others take over its runs (`cluster: {lease: 15s}`).
    pub cluster_lease: Duration,
    /// Configured providers plus the built-in `openai`, `anthropic` and
    /// `gemini`.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Where `aurad serve` answers the HTTP API.
    pub listen: SocketAddr,
    /// Runs executing at once, across all agents; the rest wait `queued`.
    pub max_concurrent_runs: usize,
    /// How long shutdown lets running runs finish before cancelling them.
    pub shutdown_grace: Duration,
    /// Prices per model, by `provider/model`; a model not listed has an
    /// unknown cost.
    pub prices: BTreeMap<String, Price>,
    /// Names besides the listen address and `localhost` that the API
    /// answers to in the `Host` header (a reverse proxy's name).
    pub allowed_hosts: Vec<AllowedHost>,
    /// `otel:`: export traces over OTLP/HTTP; `None`: only if the standard
    /// `OTEL_EXPORTER_OTLP_*` variables say so.
    pub otel: Option<super::otel::OtelSettings>,
    /// How long run data is kept (`retention:`).
    pub retention: Retention,
    /// How long sessions are kept and how many turns they take
    /// (`sessions:`).
    pub sessions: super::sessions::SessionLimits,
    /// `mcp_server:`: the agents `aurad mcp serve` and `/mcp` offer as
    /// tools.
    pub mcp_server: McpServerSettings,
}

/// `mcp_server:` in aurad.yaml: aurad as an MCP server (`aurad mcp serve`,
/// `/mcp` under `aurad serve`), not the MCP servers the project's agents
/// use (those are `mcp.json`'s).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpServerSettings {
    /// `agents:`, the agents offered as tools, each with where it is
    /// written (a name with no agent file is warned about there); `None`:
    /// every agent of the project.
    pub agents: Option<Vec<ExposedAgent>>,
}

impl McpServerSettings {
    /// Whether agent `name` is offered as a tool.
    pub fn exposes(&self, name: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|agents| agents.iter().any(|a| a.name == name))
    }
}

/// An entry of `mcp_server.agents`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExposedAgent {
    pub name: String,
    /// Its line and column in aurad.yaml.
    pub place: (usize, usize),
}

/// A name the API answers to: `host` (any port) or `host:port`. Hosts are
/// lowercase; an IPv6 address is written in brackets (`[::1]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    pub host: String,
    pub port: Option<u16>,
}

impl AllowedHost {
    /// Parses `host`, `host:port` or `[v6]:port` (as a `Host` header or an
    /// `allowed_hosts` entry has it); the host is lowercased. `Err` says
    /// what is wrong.
    pub fn parse(text: &str) -> Result<AllowedHost, String> {
        let text = text.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (v6, after) = rest
                .split_once(']')
                .ok_or("an IPv6 address needs its closing `]`")?;
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or("expected `:PORT` after `]`")?,
                ),
            };
            (format!("[{v6}]"), port)
        } else {
            match text.split_once(':') {
                Some((_, port)) if port.contains(':') => {
                    return Err("write an IPv6 address in brackets, e.g. [::1]:7777".into());
                }
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (text.to_string(), None),
            }
        };
        let valid_host = !host.is_empty()
            && host.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':')
            });
        if !valid_host {
            return Err("expected a host name, e.g. aurad.example.com or aurad.example.com:443 (no scheme, no path)".into());
        }
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| format!("port {p:?} is not a number from 0 to 65535"))
            })
            .transpose()?;
        Ok(AllowedHost {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// Does this entry allow `host` (lowercase) at `port`?
    pub fn allows(&self, host: &str, port: Option<u16>) -> bool {
        self.host == host && self.port.is_none_or(|p| Some(p) == port)
    }
}

/// The daemon's lock file, inside the project directory (one daemon per
/// project; `daemon::lock` holds it, the file tools refuse to touch it).
pub const LOCK_FILE: &str = ".aurad.lock";

/// The API's default address: loopback only, so no token is needed.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7777);

impl Settings {
    pub fn defaults(root: &Path) -> Settings {
        Settings {
            database: Database::Sqlite(root.join("aurad.db")),
            cluster_lease: DEFAULT_CLUSTER_LEASE,
            providers: builtin_providers(),
            listen: DEFAULT_LISTEN,
            max_concurrent_runs: 8,
            shutdown_grace: Duration::from_secs(30),
            prices: BTreeMap::new(),
            allowed_hosts: Vec::new(),
            otel: None,
            retention: Retention::default(),
            sessions: super::sessions::SessionLimits::default(),
            mcp_server: McpServerSettings::default(),
        }
    }
}

/// Parses `aurad.yaml`'s interpolated text. On errors the defaults are
/// returned along with the diagnostics.
pub fn parse_settings(root: &Path, path: &Path, text: &str) -> (Settings, Vec<Diagnostic>) {
    let mut settings = Settings::defaults(root);
    let mut diags = Vec::new();
    if let Err(d) = check_text(path, text, Syntax::Yaml, 1) {
        return (settings, vec![d]);
    }
    if text.trim().is_empty() {
        return (settings, diags);
    }
    let raw: RawSettings = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            diags.push(yaml_diagnostic(path, text, &e));
            return (settings, diags);
        }
    };
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);
    if let Some(prices) = &raw.prices {
        settings.prices = parse_prices(prices, path, text, &mut diags);
    }
    if let Some(otel) = &raw.otel {
        settings.otel = super::otel::parse_otel(otel, path, text, &mut diags);
    }
    if let Some(listen) = &raw.listen {
        match listen.trim().parse::<SocketAddr>() {
            Ok(addr) => settings.listen = addr,
            Err(_) => diags.push(err(
                &["listen"],
                format!("listen {listen:?} is not an address: write IP:PORT, e.g. 127.0.0.1:7777"),
            )),
        }
    }
    for entry in raw.allowed_hosts.iter().flatten() {
        match AllowedHost::parse(entry) {
            Ok(host) => settings.allowed_hosts.push(host),
            Err(why) => diags.push(Diagnostic::error(
                path,
                entry_place(text, entry),
                format!("allowed_hosts: {entry:?}: {why}"),
            )),
        }
    }
    match raw.max_concurrent_runs {
        Some(0) => diags.push(err(
            &["max_concurrent_runs"],
            "`max_concurrent_runs` must be at least 1".into(),
        )),
        Some(n) if n > 10_000 => diags.push(err(
            &["max_concurrent_runs"],
            format!("`max_concurrent_runs` is {n}; at most 10000"),
        )),
        Some(n) => settings.max_concurrent_runs = n,
        None => {}
    }
    if let Some(v) = &raw.shutdown_grace {
        match duration_value(v) {
            Ok(d) => settings.shutdown_grace = d,
            Err(msg) => diags.push(err(&["shutdown_grace"], format!("shutdown_grace: {msg}"))),
        }
    }
    if let Some(r) = &raw.retention {
        settings.retention = parse_retention(r, &err, &mut diags);
    }
    if let Some(s) = &raw.sessions {
        settings.sessions = super::sessions::parse_sessions(s, &err, &mut diags);
    }
    if let Some(names) = raw.mcp_server.and_then(|m| m.agents) {
        let mut agents: Vec<ExposedAgent> = Vec::with_capacity(names.len());
        for name in names {
            if agents.iter().any(|a| a.name == name) {
                continue;
            }
            let place = locate_item(text, &["mcp_server", "agents"], &name);
            agents.push(ExposedAgent { name, place });
        }
        settings.mcp_server.agents = Some(agents);
    }
    if let Some(db) = raw.database {
        if db.trim().is_empty() {
            diags.push(err(
                &["database"],
                "`database` is empty: give a file path such as aurad.db, or a PostgreSQL URL \
                 (postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
                    .into(),
            ));
        } else {
            settings.database = Database::from_setting(&db, root);
        }
    }
    if let Some(lease) = raw.cluster.as_ref().and_then(|c| c.lease.as_ref()) {
        match duration_value(lease) {
            Ok(d) if d < MIN_CLUSTER_LEASE || d > MAX_CLUSTER_LEASE => diags.push(err(
                &["cluster", "lease"],
                format!(
                    "cluster.lease is {}; give between {} and {} (a node silent that long is taken for dead)",
                    humantime::format_duration(d),
                    humantime::format_duration(MIN_CLUSTER_LEASE),
                    humantime::format_duration(MAX_CLUSTER_LEASE)
                ),
            )),
            Ok(d) => settings.cluster_lease = d,
            Err(msg) => diags.push(err(&["cluster", "lease"], format!("cluster.lease: {msg}"))),
        }
    }
    parse_providers(raw.providers, &mut settings.providers, &err, &mut diags);
    (settings, diags)
}

/// `retention:` in aurad.yaml: how long run data is kept, applied by
/// `aurad serve` in the background (`daemon::retention`). Events go first:
/// after `events` a finished run keeps its record but not its events; after
/// `runs` the run goes with everything recorded about it. Runs not
/// finished are kept whatever their age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub runs: Duration,
    pub events: Duration,
}

impl Retention {
    /// The shortest retention accepted: a bare number is seconds, and
    /// `runs: 30` deleting every run older than 30 seconds is a mistake.
    pub const MIN: Duration = Duration::from_secs(3600);
}

impl Default for Retention {
    /// A year of runs, 90 days of events.
    fn default() -> Retention {
        Retention {
            runs: Duration::from_secs(365 * 86_400),
            events: Duration::from_secs(90 * 86_400),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    runs: Option<Value>,
    events: Option<Value>,
}

fn parse_retention(
    raw: &RawRetention,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> Retention {
    let mut retention = Retention::default();
    let mut read = |key: &str, value: &Option<Value>, into: &mut Duration| {
        let Some(value) = value else { return true };
        let parsed = duration_value(value).and_then(|d| {
            if d < Retention::MIN {
                Err(format!(
                    "{} is shorter than the minimum of 1h; write e.g. 30d",
                    super::duration::format_duration(d)
                ))
            } else {
                Ok(d)
            }
        });
        match parsed {
            Ok(d) => {
                *into = d;
                true
            }
            Err(msg) => {
                diags.push(err(&["retention", key], format!("retention.{key}: {msg}")));
                false
            }
        }
    };
    let runs_ok = read("runs", &raw.runs, &mut retention.runs);
    let events_ok = read("events", &raw.events, &mut retention.events);
    if raw.events.is_none() && retention.events > retention.runs {
        // Only `runs` given, shorter than the default for events.
        retention.events = retention.runs;
    }
    if runs_ok && events_ok && retention.events > retention.runs {
        diags.push(err(
            &["retention", "events"],
            format!(
                "retention.events ({}) is longer than retention.runs ({}): events are pruned \
                 first, with their run at the latest; make `events` at most `runs`",
                super::duration::format_duration(retention.events),
                super::duration::format_duration(retention.runs)
            ),
        ));
    }
    retention
}

/// Where the `allowed_hosts` entry `entry` is written: its first
/// occurrence after the key, else the key's value.
fn entry_place(text: &str, entry: &str) -> (usize, usize) {
    text.find("allowed_hosts:")
        .and_then(|start| text[start..].find(entry).map(|at| start + at))
        .map_or_else(
            || locate(text, &["allowed_hosts"]),
            |at| offset_to_place(text, at),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderKind;

    #[test]
    fn defaults_and_custom_provider() {
        let root = Path::new("/p");
        let text = "providers:\n  ollama: { kind: openai, base_url: \"http://localhost:11434/v1\" }\ndatabase: data/x.db\n";
        let (s, d) = parse_settings(root, Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.database, Database::Sqlite("/p/data/x.db".into()));
        assert_eq!(
            s.providers["ollama"].base_url.as_deref(),
            Some("http://localhost:11434/v1")
        );
        assert!(s.providers.contains_key("openai"));
    }

    #[test]
    fn vendor_kinds_default_to_their_endpoints_and_key_variables() {
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), "");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.providers["anthropic"].kind, ProviderKind::Anthropic);
        assert_eq!(
            s.providers["gemini"].api_key_env.as_deref(),
            Some("GEMINI_API_KEY")
        );
        let text = "providers:\n  claude: { kind: anthropic }\n  gateway: { kind: gemini, base_url: \"http://127.0.0.1:9/g\" }\n";
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        let claude = &s.providers["claude"];
        assert_eq!(
            (claude.kind, claude.base_url.as_deref()),
            (ProviderKind::Anthropic, None)
        );
        assert_eq!(claude.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        // A gateway has a key only when it names the variable.
        assert_eq!(s.providers["gateway"].api_key_env, None);
    }

    #[test]
    fn allowed_hosts_are_names_with_optional_ports() {
        let text = "allowed_hosts: [\"Aurad.Example.com\", \"proxy.lan:8443\", \"[::1]:7777\"]\n";
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            s.allowed_hosts,
            [
                AllowedHost {
                    host: "aurad.example.com".into(),
                    port: None
                },
                AllowedHost {
                    host: "proxy.lan".into(),
                    port: Some(8443)
                },
                AllowedHost {
                    host: "[::1]".into(),
                    port: Some(7777)
                },
            ]
        );
        assert!(s.allowed_hosts[0].allows("aurad.example.com", Some(1)));
        assert!(s.allowed_hosts[1].allows("proxy.lan", Some(8443)));
        assert!(!s.allowed_hosts[1].allows("proxy.lan", None));
        let text = "allowed_hosts:\n  - ok.example\n  - \"https://x.example/\"\n  - \"h:99999\"\n  - \"::1\"\n";
        let (_, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        let d: Vec<_> = d.iter().map(|d| d.to_string()).collect();
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d[0].starts_with("aurad.yaml:3:6: allowed_hosts: \"https://x.example/\""),
            "{d:?}"
        );
        assert!(d[1].contains("is not a number"), "{d:?}");
        assert!(d[2].contains("in brackets"), "{d:?}");
    }

    #[test]
    fn retention_defaults_reads_durations_and_locates_bad_values() {
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), "");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.retention, Retention::default());
        assert_eq!(s.retention.events, Duration::from_secs(90 * 86_400));
        let text = "retention: { runs: 30d, events: 7d }\n";
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            (s.retention.runs, s.retention.events),
            (
                Duration::from_secs(30 * 86_400),
                Duration::from_secs(7 * 86_400)
            )
        );
        // `runs` alone, shorter than the default for events, takes events with it.
        let (s, d) = parse_settings(
            Path::new("/p"),
            Path::new("aurad.yaml"),
            "retention:\n  runs: 2h\n",
        );
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.retention.events, Duration::from_secs(7200));
        let text = "max_concurrent_runs: 2\nretention:\n  runs: soon\n  events: 30\n";
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        let d: Vec<_> = d.iter().map(|d| d.to_string()).collect();
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("aurad.yaml:3:9: retention.runs: invalid duration \"soon\""),
            "{d:?}"
        );
        assert!(
            d[1].starts_with(
                "aurad.yaml:4:11: retention.events: 30s is shorter than the minimum of 1h"
            ),
            "{d:?}"
        );
        assert_eq!(s.retention, Retention::default());
        let text = "retention: { runs: 7d, events: 30d }\n";
        let (_, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].to_string()
                .contains("retention.events (30days) is longer than retention.runs (7days)"),
            "{d:?}"
        );
        let (_, d) = parse_settings(
            Path::new("/p"),
            Path::new("aurad.yaml"),
            "retention: { keep: 1d }\n",
        );
        assert!(d[0].to_string().contains("unknown field `keep`"), "{d:?}");
    }

    #[test]
    fn bad_kind_and_later_fields_are_errors() {
        let text =
            "providers:\n  x:\n    kind: cohere\n    base_url: http://a\nlisten: 0.0.0.0:x\n";
        let (_, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        let d: Vec<_> = d.iter().map(|d| d.to_string()).collect();
        assert!(
            d.iter()
                .any(|m| m.starts_with("aurad.yaml:5:9: listen \"0.0.0.0:x\" is not an address")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|m| m.starts_with("aurad.yaml:3:11: unknown provider kind \"cohere\"")),
            "{d:?}"
        );
    }

    #[test]
    fn mcp_server_agents_are_read_with_their_places() {
        let root = Path::new("/p");
        let (s, d) = parse_settings(root, Path::new("aurad.yaml"), "listen: 127.0.0.1:1\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.mcp_server.agents, None);
        assert!(s.mcp_server.exposes("anything"));
        let text = "mcp_server:\n  agents:\n    - writer\n    - sum\n    - writer\n";
        let (s, d) = parse_settings(root, Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        let agents = s.mcp_server.agents.clone().unwrap();
        let listed: Vec<(&str, (usize, usize))> =
            agents.iter().map(|a| (a.name.as_str(), a.place)).collect();
        assert_eq!(listed, [("writer", (3, 7)), ("sum", (4, 7))]);
        assert!(s.mcp_server.exposes("sum"));
        assert!(!s.mcp_server.exposes("other"));
        let (_, d) = parse_settings(root, Path::new("aurad.yaml"), "mcp_server: {tools: [a]}\n");
        assert!(
            d.iter()
                .any(|d| d.to_string().contains("unknown field `tools`")),
            "{d:?}"
        );
    }
}
