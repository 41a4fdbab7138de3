//! Reading the project's files: `${ENV}` interpolation, the `Raw*` serde
//! shapes, conversion into validated types, and diagnostics with places.
//! Loading never stops at the first problem: every file is read and every
//! problem reported. Depends on `types` only.

pub mod after;
mod after_graph;
pub mod agent;
pub mod agent_name;
pub mod approval;
pub mod bounds;
pub mod cases;
pub mod channels;
pub mod diag;
pub mod duration;
pub mod interp;
pub mod limits;
pub mod mcp;
pub mod model_chain;
pub mod otel;
pub mod plugins;
mod prices;
pub mod private;
pub mod providers;
mod schema;
pub mod sessions;
pub mod settings;
pub mod skills;
pub mod steps;
pub mod suggest;
pub mod triggers;
pub mod watch;
pub mod yaml_value;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use after::{AfterOutcome, AfterTrigger};
pub use agent::{Agent, HistoryMode, Limits, MemoryConfig, SkillsChoice, SkillsMode};
pub use diag::{Diagnostic, Severity};
pub use providers::{ProviderConfig, ProviderKind, ProviderLimits, ToolCallMode};
pub use settings::Settings;
pub use triggers::{
    OnInterrupt, OnOverlap, ScheduleEntry, Triggers, WebhookConfig, WebhookSignature,
};
pub use watch::WatchTrigger;

/// Looks up an environment variable; passed in so tests need no global state.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The validated project. Agents with errors are left out (their
/// diagnostics say why).
#[derive(Debug, Clone)]
pub struct Project {
    pub root: PathBuf,
    pub settings: Settings,
    pub agents: BTreeMap<String, Agent>,
    /// Tool plugins of `tools.d/` (those without errors).
    pub plugins: Vec<plugins::PluginConfig>,
    /// MCP servers of `mcp.json` (those without errors).
    pub mcp_servers: Vec<mcp::McpServerConfig>,
    /// Channels of `channels/` (those without errors).
    pub channels: Vec<channels::ChannelConfig>,
    /// The environment variables whose values `${VAR}` put into some file
    /// (names only): their values are redacted as secrets.
    pub substituted: BTreeSet<String>,
}

#[derive(Debug)]
pub struct Loaded {
    pub project: Project,
    pub diagnostics: Vec<Diagnostic>,
}

impl Loaded {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Loads `aurad.yaml` and every agent.
pub fn load(root: &Path, env: EnvLookup) -> Loaded {
    let recording = interp::RecordingLookup::new(env);
    let mut loaded = load_all(root, &|name| recording.lookup(name));
    loaded.project.substituted = recording.names();
    loaded
}

fn load_all(root: &Path, env: EnvLookup) -> Loaded {
    let (settings, mut diagnostics) = load_settings(root, env);
    let mut agents = BTreeMap::new();
    for (name, file) in yaml_files(root, "agents", "agent", &mut diagnostics) {
        let (agent, diags) = load_agent_file(root, &file, &name, env);
        diagnostics.extend(diags);
        if let Some(agent) = agent {
            agents.insert(name, agent);
        }
    }
    let names = agent_names(root);
    after_graph::check_after(&mut agents, &names, &mut diagnostics);
    diagnostics.extend(unknown_exposed_agents(&settings, &names));
    let (channels, channel_diags) = channels::load_channels(root, env, &names);
    diagnostics.extend(channel_diags);
    let mut loaded = with_tools(root, settings, agents, diagnostics, env);
    loaded.project.channels = channels;
    loaded
}

/// A warning for each name of `mcp_server.agents` with no agent file:
/// that tool is not offered. A warning, not an error: a name left behind
/// by a renamed agent must not stop the daemon's schedules.
fn unknown_exposed_agents(settings: &Settings, names: &[String]) -> Vec<Diagnostic> {
    let listed = settings.mcp_server.agents.iter().flatten();
    listed
        .filter(|a| !names.contains(&a.name))
        .map(|a| {
            let known = if names.is_empty() {
                "there are no agents in agents/".to_string()
            } else {
                format!("the agents are: {}", names.join(", "))
            };
            Diagnostic::warning(
                Path::new("aurad.yaml"),
                a.place,
                format!(
                    "mcp_server.agents: there is no agent `{}` (no agents/{}.yaml), so no such MCP tool is offered; {known}",
                    a.name, a.name
                ),
            )
        })
        .collect()
}

/// Loads `aurad.yaml` and the one agent `name` (with the agents it calls
/// through `agents:`), for commands that need only it. The agent is absent from the project when it has errors or no file.
pub fn load_one(root: &Path, name: &str, env: EnvLookup) -> Loaded {
    let recording = interp::RecordingLookup::new(env);
    let mut loaded = load_agent(root, name, &|name| recording.lookup(name));
    loaded.project.substituted = recording.names();
    loaded
}

/// Loads agent `name` and the agents it needs: those it calls through
/// `agents:` and, when it is a pipeline, those its steps run; theirs in turn.
fn load_agent(root: &Path, name: &str, env: EnvLookup) -> Loaded {
    let (settings, mut diagnostics) = load_settings(root, env);
    let mut agents = BTreeMap::new();
    let mut wanted = vec![name.to_string()];
    let mut tried = std::collections::BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if !tried.insert(name.clone()) {
            continue;
        }
        for ext in ["yaml", "yml"] {
            let file = root.join("agents").join(format!("{name}.{ext}"));
            if file.is_file() {
                let (agent, diags) = load_agent_file(root, &file, &name, env);
                diagnostics.extend(diags);
                if let Some(agent) = agent {
                    wanted.extend(agent.agents.iter().cloned());
                    if let Some(pipeline) = &agent.steps {
                        wanted.extend(pipeline.agents().map(|(_, a)| a.to_string()));
                    }
                    agents.insert(name.clone(), agent);
                }
                break;
            }
        }
    }
    with_tools(root, settings, agents, diagnostics, env)
}

/// Completes a load with `tools.d/` and `mcp.json`.
fn with_tools(
    root: &Path,
    settings: Settings,
    agents: BTreeMap<String, Agent>,
    mut diagnostics: Vec<Diagnostic>,
    env: EnvLookup,
) -> Loaded {
    let (plugins, plugin_diags) = plugins::load_plugins(root, env);
    let (mcp_servers, mcp_diags) = mcp::load_mcp(root, env);
    diagnostics.extend(plugin_diags);
    diagnostics.extend(mcp_diags);
    Loaded {
        project: Project {
            root: root.to_path_buf(),
            settings,
            agents,
            plugins,
            mcp_servers,
            channels: Vec::new(),
            substituted: BTreeSet::new(),
        },
        diagnostics,
    }
}

/// The names of the agent files present, valid or not.
pub fn agent_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("agents"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| !cases::is_test_file(p))
                .filter_map(|p| yaml_stem(&p))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.dedup();
    names
}

/// The `*.yaml` and `*.yml` files of `root/dir`, sorted, with their names
/// (the file stems). A name given by two files is an error naming both
/// (`what` says what the files define); the first one is kept. No directory
/// means no files.
pub(crate) fn yaml_files(
    root: &Path,
    dir: &str,
    what: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(String, PathBuf)> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(root.join(dir)) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| match not_a_file(p) {
                None => true,
                Some(what) => {
                    if yaml_stem(p).is_some() {
                        diagnostics.push(Diagnostic::error(
                            &relative(root, p),
                            (0, 0),
                            format!(
                                "this is {what}, not a file, so it is skipped; make it a regular YAML file or remove it"
                            ),
                        ));
                    }
                    false
                }
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            diagnostics.push(Diagnostic::error(
                Path::new(dir),
                (0, 0),
                format!("cannot read the directory: {e}"),
            ));
            Vec::new()
        }
    };
    files.sort();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut named = Vec::new();
    for file in files {
        let Some(name) = yaml_stem(&file) else {
            continue;
        };
        // `agents/NAME.test.yaml` holds tests of NAME, not an agent.
        if dir == "agents" && cases::is_test_file(&file) {
            continue;
        }
        let rel = relative(root, &file);
        if let Some(first) = seen.get(&name) {
            diagnostics.push(Diagnostic::error(
                &rel,
                (0, 0),
                format!(
                    "{what} `{name}` is also defined by {}; keep one of the two files",
                    first.display()
                ),
            ));
            continue;
        }
        seen.insert(name.clone(), rel);
        named.push((name, file));
    }
    named
}

/// What `path` is when it is no regular file (its links followed), as a
/// phrase; `None` for a regular file.
fn not_a_file(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(meta) => {
            let kind = meta.file_type();
            if kind.is_file() {
                None
            } else if kind.is_dir() {
                Some("a directory")
            } else if kind.is_fifo() {
                Some("a named pipe (FIFO)")
            } else if kind.is_block_device() || kind.is_char_device() {
                Some("a device")
            } else if kind.is_socket() {
                Some("a socket")
            } else {
                Some("something other than a regular file")
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            Some("a symbolic link that loops (it leads back to itself)")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some("a symbolic link to a missing file")
        }
        Err(_) => Some("unreadable (its type cannot be read)"),
    }
}

fn yaml_stem(file: &Path) -> Option<String> {
    let ext = file.extension()?.to_str()?;
    if !matches!(ext, "yaml" | "yml") {
        return None;
    }
    Some(file.file_stem()?.to_str()?.to_string())
}

/// Loads `aurad.yaml` alone (defaults when it is absent).
pub fn load_settings(root: &Path, env: EnvLookup) -> (Settings, Vec<Diagnostic>) {
    let file = root.join("aurad.yaml");
    let rel = PathBuf::from("aurad.yaml");
    let (mut settings, diags) = match read_interpolated(&file, &rel, env, interp::Escape::Yaml) {
        Ok(None) => (Settings::defaults(root), Vec::new()),
        Ok(Some((text, _))) => settings::parse_settings(root, &rel, &text),
        Err(diags) => (Settings::defaults(root), diags),
    };
    // The environment names the database over the file (a secret kept
    // out of the project, or one file shared by nodes of several databases).
    if let Some(url) = env("AURAD_DATABASE_URL").filter(|u| !u.trim().is_empty()) {
        settings.database = crate::types::Database::from_setting(url.trim(), root);
    }
    (settings, diags)
}

fn load_agent_file(
    root: &Path,
    file: &Path,
    name: &str,
    env: EnvLookup,
) -> (Option<Agent>, Vec<Diagnostic>) {
    let rel = relative(root, file);
    if !agent_name::valid_name(name) {
        return (
            None,
            vec![Diagnostic::error(
                &rel,
                (0, 0),
                format!(
                    "agent name {name:?} (the file name) must match [a-z0-9][a-z0-9_-]*; rename the file"
                ),
            )],
        );
    }
    match read_interpolated(file, &rel, env, interp::Escape::Yaml) {
        Ok(None) => (
            None,
            vec![Diagnostic::error(
                &rel,
                (0, 0),
                "the file disappeared while loading",
            )],
        ),
        Ok(Some((text, hash))) => agent::parse_agent(name, &rel, &text, hash),
        Err(diags) => (None, diags),
    }
}

/// Reads a file (bounded, see [`bounds`]), drops a byte-order mark, turns
/// CRLF into LF and interpolates it. `Ok(None)`: the file does not exist.
/// Returns the text and the SHA-256 of the bytes as written.
pub(crate) fn read_interpolated(
    file: &Path,
    rel: &Path,
    env: EnvLookup,
    escape: interp::Escape,
) -> Result<Option<(String, String)>, Vec<Diagnostic>> {
    let bytes = match bounds::read_bounded(file, rel) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(d) => return Err(vec![d]),
    };
    let hash = hex::encode(Sha256::digest(&bytes));
    let text = bounds::decode(bytes, rel).map_err(|d| vec![d])?;
    interp::interpolate_with(&text, env, escape)
        .map(|t| Some((t, hash)))
        .map_err(|errors| {
            errors
                .into_iter()
                .map(|e| Diagnostic::error(rel, (e.line, e.column), e.message))
                .collect()
        })
}

fn relative(root: &Path, file: &Path) -> PathBuf {
    file.strip_prefix(root).unwrap_or(file).to_path_buf()
}
