//! Builds the immutable [`Snapshot`] a run works from: the validated project,
//! the tools it can reach (built-in, `tools.d` plugins, MCP servers) and the
//! providers its agents name, with the cross-checks that need more than one
//! file (tool allow-lists against known tools, name collisions, models
//! against providers), and the redactor of the secrets it knows
//! ([`secrets`]). A file with errors leaves out only the item it defines
//! ([`skipped`]); an agent that needs a left-out item is left out too.
//! May depend on `config`, `llm`, `tools`, `mcp`, `skills`.

pub mod ceiling;
mod executed;
mod pipelines;
pub mod secrets;
pub mod skipped;
pub mod sub_agents;
pub mod warnings;

use std::sync::{Arc, OnceLock};

use crate::config::diag::{locate, locate_item};
use crate::config::mcp::{McpServerConfig, McpTransport};
use crate::config::providers::{DEFAULT_OPENAI_BASE_URL, ToolCallMode};
use crate::config::{Agent, Diagnostic, EnvLookup, Loaded, Project, ProviderKind, Settings};
use crate::llm::Provider;
use crate::llm::anthropic::{self, AnthropicProvider};
use crate::llm::gemini::{self, GeminiProvider};
use crate::llm::openai::OpenAiProvider;
use crate::llm::openai_responses::{OpenAiResponsesProvider, requires_responses_api};
use crate::llm::test_model::TestModel;
use crate::llm::text_tools::TextTools;
use crate::mcp::McpManager;
use crate::redact::Redactor;
use crate::tools::builtin::{ProtectedPaths, database_files};
use crate::tools::plugin::PluginTool;
use crate::tools::{ToolRegistry, glob_could_extend};
use skipped::{ItemKind, LoadedNames, SkippedItem};

/// Everything a run needs, fixed at load time.
#[derive(Clone)]
pub struct Snapshot {
    pub project: Project,
    pub tools: ToolRegistry,
    /// Skills of `skills/` (those without errors).
    pub skills: Vec<crate::skills::Skill>,
    /// The HTTP clients of the model providers, shared by every run.
    pub http: Arc<HttpClients>,
    /// Replaces the secrets this snapshot knows by `[redacted:NAME]`.
    pub redactor: Arc<Redactor>,
    /// What the load left out because of errors, and the agents kept at
    /// their last good version, in kind and name order.
    pub skipped: Vec<SkippedItem>,
    /// When the files were read.
    pub loaded_at: chrono::DateTime<chrono::Utc>,
    /// The files sandboxed tool processes may not write wherever they are:
    /// the SQLite store and what `tools.d` and `mcp.json` run
    /// (`tools::sandbox::Sandbox::protecting`).
    pub protected_files: Arc<[std::path::PathBuf]>,
}

/// HTTP clients for the model providers, each made on first use and then
/// shared by every run of the snapshot, so runs reuse connections (and TLS
/// sessions) to a provider instead of opening their own.
#[derive(Default)]
pub struct HttpClients {
    /// For plain-HTTP endpoints (Ollama, vLLM, a local proxy): no root
    /// certificates to load, which costs milliseconds at every start.
    plain: OnceLock<reqwest::Client>,
    tls: OnceLock<reqwest::Client>,
}

impl HttpClients {
    /// The client for requests to `base_url`.
    pub fn for_url(&self, base_url: &str) -> Result<reqwest::Client, String> {
        let plain = base_url.starts_with("http://");
        let cell = if plain { &self.plain } else { &self.tls };
        if let Some(client) = cell.get() {
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(300));
        if plain {
            builder = builder.tls_certs_only(std::iter::empty());
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot create the HTTP client: {e}"))?;
        // Two runs racing here each build one; the first stored wins.
        Ok(cell.get_or_init(|| client).clone())
    }
}

/// Builds the snapshot and adds the cross-file diagnostics to `loaded`'s.
/// Agents with cross-file errors are removed from the snapshot, and so are
/// agents that need a skipped skill, plugin or MCP server (their error
/// names it and where its error is). `Snapshot::skipped` lists what the
/// errors left out.
pub fn build(loaded: Loaded, env: EnvLookup) -> (Snapshot, Vec<Diagnostic>) {
    let loaded_at = chrono::Utc::now();
    let Loaded {
        mut project,
        mut diagnostics,
    } = loaded;
    let lock_file = project.root.join(crate::config::settings::LOCK_FILE);
    let executed = executed::executed_files(&project);
    let database = project.settings.database.sqlite_path();
    // What sandboxed processes may not write wherever it is: the store
    // (with its journal files) and what the daemon runs.
    let protected_files: Arc<[std::path::PathBuf]> = database
        .into_iter()
        .flat_map(database_files)
        .chain(executed.iter().cloned())
        .collect();
    let protected = match database {
        Some(database) => ProtectedPaths::new(database, lock_file),
        None => ProtectedPaths::lock_only(lock_file),
    }
    .executing(executed);
    // A server that asks for a sandbox this system cannot enforce is left
    // out (never started unconfined), as an agent asking for one is.
    project.mcp_servers.retain(|server| {
        let McpTransport::Stdio { sandbox, .. } = &server.transport else {
            return true;
        };
        match crate::tools::sandbox::check_available(*sandbox) {
            Ok(()) => true,
            Err(message) => {
                diagnostics.push(Diagnostic::error(
                    &server.source,
                    (server.line, server.column),
                    format!("server `{}`: sandbox: {message}", server.name),
                ));
                false
            }
        }
    });
    let mut tools = ToolRegistry::builtin(protected);
    for plugin in &project.plugins {
        let tool = PluginTool::new(plugin.clone(), &project.root);
        if let Err(message) = tools.add(Arc::new(tool)) {
            diagnostics.push(Diagnostic::error(&plugin.path, (1, 1), message));
        }
    }
    let (skills, skill_diags) = crate::skills::load_skills(&project.root);
    diagnostics.extend(skill_diags);
    let items = skipped::skipped_items(&project.root, &diagnostics, &loaded_names(&project));
    let refs = Refs {
        settings: &project.settings,
        tools: &tools,
        servers: &project.mcp_servers,
        skills: &skills,
        skipped: &items,
    };
    let mut broken = Vec::new();
    for agent in project.agents.values() {
        let diags = check_agent(agent, &refs, env);
        if diags.iter().any(Diagnostic::is_error) {
            broken.push(agent.name.clone());
        }
        diagnostics.extend(diags);
    }
    for agent in project.agents.values() {
        let diags = pipelines::check_pipeline(agent, &project.agents, &tools);
        if diags.iter().any(Diagnostic::is_error) {
            broken.push(agent.name.clone());
        }
        diagnostics.extend(diags);
    }
    for name in broken {
        project.agents.remove(&name);
    }
    diagnostics.extend(sub_agents::check_sub_agents(&mut project.agents, &tools));
    let skipped = skipped::skipped_items(&project.root, &diagnostics, &loaded_names(&project));
    let redactor = secrets::redactor(&project, env, &secrets::process_env());
    // Log lines are redacted process-wide, so with every snapshot's secrets.
    crate::redact::add_to_logs(&redactor);
    (
        Snapshot {
            project,
            tools,
            skills,
            http: Arc::new(HttpClients::default()),
            redactor: Arc::new(redactor),
            skipped,
            loaded_at,
            protected_files,
        },
        diagnostics,
    )
}

fn loaded_names(project: &Project) -> LoadedNames<'_> {
    LoadedNames {
        mcp_servers: project
            .mcp_servers
            .iter()
            .map(|s| s.name.as_str())
            .collect(),
    }
}

/// Keeps, for each agent whose file has errors now, the version `previous`
/// served, if it still checks against this snapshot's settings, tools,
/// skills and MCP servers; it is then marked stale in `skipped`. Returns
/// the errors of the last good versions that no longer fit (those agents
/// stay absent).
pub fn keep_last_good(
    snapshot: &mut Snapshot,
    previous: &Snapshot,
    env: EnvLookup,
) -> Vec<Diagnostic> {
    let mut unfit = Vec::new();
    let mut kept = Vec::new();
    for item in &snapshot.skipped {
        if item.kind != ItemKind::Agent || snapshot.project.agents.contains_key(&item.name) {
            continue;
        }
        let Some(old) = previous.project.agents.get(&item.name) else {
            continue;
        };
        let refs = Refs {
            settings: &snapshot.project.settings,
            tools: &snapshot.tools,
            servers: &snapshot.project.mcp_servers,
            skills: &snapshot.skills,
            skipped: &snapshot.skipped,
        };
        let diags = check_agent(old, &refs, env);
        if diags.iter().any(Diagnostic::is_error) {
            unfit.extend(diags.into_iter().map(|d| Diagnostic {
                message: format!(
                    "the last good version of agent `{}` no longer fits, so it is absent: {}",
                    old.name, d.message
                ),
                ..d
            }));
        } else {
            kept.push(old.clone());
        }
    }
    if kept.is_empty() {
        return unfit;
    }
    for agent in kept {
        if let Some(item) = snapshot
            .skipped
            .iter_mut()
            .find(|i| i.kind == ItemKind::Agent && i.name == agent.name)
        {
            item.stale = true;
        }
        snapshot.project.agents.insert(agent.name.clone(), agent);
    }
    // The kept versions may hold values of variables this load did not read.
    let substituted = previous.project.substituted.iter().cloned();
    snapshot.project.substituted.extend(substituted);
    let redactor = secrets::redactor(&snapshot.project, env, &secrets::process_env());
    crate::redact::add_to_logs(&redactor);
    snapshot.redactor = Arc::new(redactor);
    unfit
}

/// What an agent's references are checked against.
pub struct Refs<'a> {
    pub settings: &'a Settings,
    /// Built-in and plugin tools (MCP tools are known once connected).
    pub tools: &'a ToolRegistry,
    pub servers: &'a [McpServerConfig],
    pub skills: &'a [crate::skills::Skill],
    /// What the load left out: an agent that needs one of them fails.
    pub skipped: &'a [SkippedItem],
}

/// Checks what one agent refers to: its provider, its tools and its
/// skills. Needing a skipped item is an error naming it and its error.
pub fn check_agent(agent: &Agent, refs: &Refs, env: EnvLookup) -> Vec<Diagnostic> {
    let Refs {
        settings,
        tools,
        servers,
        ..
    } = *refs;
    let mut diags = Vec::new();
    if let Err(message) = crate::tools::sandbox::check_available(agent.sandbox) {
        diags.push(Diagnostic::error(
            &agent.path,
            locate(&agent.text, &["sandbox"]),
            format!("sandbox: {message}"),
        ));
    }
    let chain = std::iter::once(&agent.model).chain(agent.fallback.iter().flat_map(|f| &f.models));
    for model in chain.filter(|_| agent.steps.is_none()) {
        let place = match &agent.fallback {
            Some(_) => locate_item(&agent.text, &["model"], model),
            None => locate(&agent.text, &["model"]),
        };
        if let Err(message) = check_model(model, settings) {
            diags.push(Diagnostic::error(&agent.path, place, message));
            continue;
        }
        if agent.limits.max_cost_usd_per_day.is_some()
            && model != "test"
            && !settings.prices.contains_key(model)
        {
            diags.push(Diagnostic::error(
                &agent.path,
                locate(&agent.text, &["limits", "max_cost_usd_per_day"]),
                format!(
                    "limits.max_cost_usd_per_day needs the price of {model:?}: add it under `prices` in aurad.yaml, e.g. prices: {{ {model:?}: {{ input_per_mtok: 0.15, output_per_mtok: 0.6 }} }}"
                ),
            ));
        }
        if let Some((provider, _)) = model.split_once('/')
            && provider != "openai"
            && let Some(var) = settings
                .providers
                .get(provider)
                .and_then(|p| p.api_key_env.as_ref())
            && env(var).is_none_or(|v| v.is_empty())
        {
            diags.push(Diagnostic::warning(
                &agent.path,
                place,
                format!("{var} is not set: runs of this agent will fail until it is (api_key_env of provider `{provider}`)"),
            ));
        }
    }
    if agent.memory.tools {
        for name in ["memory_save", "memory_search", "memory_delete"] {
            if let Some(other) = tools.get(name)
                && agent
                    .tools
                    .iter()
                    .any(|p| crate::tools::glob_match(p, name))
            {
                diags.push(Diagnostic::error(
                    &agent.path,
                    locate(&agent.text, &["memory", "tools"]),
                    format!(
                        "`memory.tools: true` adds `{name}`, but `tools:` also allows {} of that name; rename it or narrow the allow-list",
                        other.source()
                    ),
                ));
            }
        }
    }
    let load_skill = crate::skills::catalog::LOAD_SKILL;
    if agent.skills_mode == crate::config::SkillsMode::Catalog
        && agent.skills != crate::config::SkillsChoice::None
        && let Some(other) = tools.get(load_skill)
        && agent
            .tools
            .iter()
            .any(|p| crate::tools::glob_match(p, load_skill))
    {
        diags.push(Diagnostic::error(
            &agent.path,
            locate(&agent.text, &["skills"]),
            format!(
                "skills are offered as a catalog, which adds `{load_skill}`, but `tools:` also allows {} of that name; rename it, narrow the allow-list or write `skills: {{ mode: inject }}`",
                other.source()
            ),
        ));
    }
    for pattern in tools.unmatched(&agent.tools) {
        // MCP tools are known only once their server is connected.
        if servers
            .iter()
            .any(|s| glob_could_extend(pattern, &format!("{}_", s.name)))
        {
            continue;
        }
        let place = locate(&agent.text, &["tools"]);
        if let Some(item) = refs.skipped.iter().find(|i| provides_tool(i, pattern)) {
            diags.push(Diagnostic::error(
                &agent.path,
                place,
                format!(
                    "tools: {pattern:?} needs a tool of {}; fix it or remove {pattern:?}",
                    item.reason()
                ),
            ));
            continue;
        }
        let known: Vec<&str> = tools.names().collect();
        if pattern.contains(['*', '?']) {
            diags.push(Diagnostic::warning(
                &agent.path,
                place,
                format!("tools: {pattern:?} matches no tool yet"),
            ));
        } else {
            diags.push(Diagnostic::error(
                &agent.path,
                place,
                format!(
                    "tools: unknown tool {pattern:?}; known tools: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    if let crate::config::SkillsChoice::Named(names) = &agent.skills {
        for name in names {
            if refs.skills.iter().any(|s| &s.name == name) {
                continue;
            }
            // The name's own place, in the short form or under `use:`.
            let place = locate_item(&agent.text, &["skills"], name);
            let skipped = refs
                .skipped
                .iter()
                .find(|i| i.kind == ItemKind::Skill && &i.name == name);
            let message = match skipped {
                Some(item) => format!("skills: {name:?} needs {}; fix it", item.reason()),
                None => {
                    let known: Vec<&str> = refs.skills.iter().map(|s| s.name.as_str()).collect();
                    format!(
                        "skills: no skill named {name:?} in skills/, .agents/skills/ or .claude/skills/ (skills: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    )
                }
            };
            diags.push(Diagnostic::error(&agent.path, place, message));
        }
    }
    diags
}

/// Whether `pattern` (an allow-list entry that matches no loaded tool)
/// asks for a tool the skipped `item` would have offered: a plugin's one
/// tool, a server's `<server>_*` tools, any MCP tool of a whole skipped
/// MCP file.
fn provides_tool(item: &SkippedItem, pattern: &str) -> bool {
    match item.kind {
        ItemKind::Plugin => crate::tools::glob_match(pattern, &item.name),
        ItemKind::McpServer => glob_could_extend(pattern, &format!("{}_", item.name)),
        // MCP tools are `<server>_<tool>`.
        ItemKind::McpFile => pattern.contains(['_', '*', '?']),
        ItemKind::Agent | ItemKind::Skill | ItemKind::Channel => false,
    }
}

/// Checks that `model` (`provider/model` or `test`) names a usable provider.
pub fn check_model(model: &str, settings: &Settings) -> Result<(), String> {
    if model == "test" {
        return Ok(());
    }
    let Some((provider, _)) = model.split_once('/') else {
        return Err(format!(
            "model {model:?} must be `provider/model` or `test`"
        ));
    };
    if settings.providers.contains_key(provider) {
        return Ok(());
    }
    let mut known: Vec<&str> = settings.providers.keys().map(String::as_str).collect();
    known.push("test");
    Err(format!(
        "unknown provider `{provider}` in model {model:?}; known providers: {} (add others under `providers:` in aurad.yaml)",
        known.join(", ")
    ))
}

/// Builds the provider for `model`, returning it and the model name to send.
pub fn provider_for(
    model: &str,
    settings: &Settings,
    http: &HttpClients,
    env: EnvLookup,
) -> Result<(Arc<dyn Provider>, String), String> {
    check_model(model, settings)?;
    if model == "test" {
        return Ok((Arc::new(TestModel), "test".into()));
    }
    let Some((name, model_name)) = model.split_once('/') else {
        return Err(format!(
            "model {model:?} must be `provider/model` (e.g. openai/gpt-4o-mini) or `test`"
        ));
    };
    let config = &settings.providers[name];
    let vendor_url = vendor_url(config.kind);
    let base_url = base_url_of(name, config, env);
    let api_key = config
        .api_key_env
        .as_deref()
        .and_then(env)
        .filter(|k| !k.is_empty());
    if api_key.is_none()
        && let Some(var) = key_required(name, config, &base_url)
    {
        return Err(if base_url == vendor_url {
            format!(
                "{var} is not set: export your API key, or try the agent offline with `--model test`"
            )
        } else {
            format!(
                "{var} is not set (the api_key_env of provider `{name}` in aurad.yaml): export the key"
            )
        });
    }
    let client = http.for_url(&base_url)?;
    let provider: Arc<dyn Provider> = match wire_for(config.kind, &base_url, model_name) {
        ProviderKind::OpenAi => Arc::new(OpenAiProvider::new(
            base_url,
            api_key,
            client,
            config.prompt_caching,
        )),
        ProviderKind::OpenAiResponses => Arc::new(OpenAiResponsesProvider::new(
            base_url,
            api_key,
            client,
            config.prompt_caching,
        )),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(
            base_url,
            api_key,
            client,
            config.prompt_caching,
        )),
        // Gemini caches by itself (the cached tokens are read from its
        // answers); its explicit `cachedContents` are not used.
        ProviderKind::Gemini => Arc::new(GeminiProvider::new(base_url, api_key, client)),
    };
    let provider: Arc<dyn Provider> = match config.tool_calls {
        ToolCallMode::Native => provider,
        // Tools described in the prompt, calls read from the answer text.
        ToolCallMode::Text => Arc::new(TextTools::new(provider)),
    };
    Ok((provider, model_name.to_string()))
}

/// The variable provider `name` cannot run without, if any: its
/// `api_key_env`, unless it is a built-in provider pointed at another
/// server than its vendor's (a local OpenAI-compatible server through
/// `OPENAI_BASE_URL` may need no key).
fn key_required<'a>(
    name: &str,
    config: &'a crate::config::ProviderConfig,
    base_url: &str,
) -> Option<&'a str> {
    let var = config.api_key_env.as_deref()?;
    (base_url == vendor_url(config.kind) || name != config.kind.as_str()).then_some(var)
}

/// The key variable the runs of `model` (`provider/model`) need set here,
/// as [`provider_for`] requires it: `None` for `test`, unknown providers
/// and providers that need no key. Names only; the value is never read
/// out.
pub fn key_variable<'a>(model: &str, settings: &'a Settings, env: EnvLookup) -> Option<&'a str> {
    let (name, _) = model.split_once('/')?;
    let config = settings.providers.get(name)?;
    key_required(name, config, &base_url_of(name, config, env))
}

/// The default base URL of a provider of `kind`.
fn vendor_url(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => DEFAULT_OPENAI_BASE_URL,
        ProviderKind::Anthropic => anthropic::DEFAULT_BASE_URL,
        ProviderKind::Gemini => gemini::DEFAULT_BASE_URL,
    }
}

/// Where provider `name` is reached: its `base_url`, else (the built-in
/// `openai`) `OPENAI_BASE_URL`, else its vendor's.
fn base_url_of(name: &str, config: &crate::config::ProviderConfig, env: EnvLookup) -> String {
    config
        .base_url
        .clone()
        .or_else(|| (name == "openai").then(|| env("OPENAI_BASE_URL")).flatten())
        .unwrap_or_else(|| vendor_url(config.kind).to_string())
}

/// The wire format `model` (`provider/model`) is asked in and the base URL
/// its provider is reached at, as [`provider_for`] builds it: what traces
/// name the provider and the server by. `None` for `test` and unknown
/// providers.
pub fn endpoint_for(
    model: &str,
    settings: &Settings,
    env: EnvLookup,
) -> Option<(ProviderKind, String)> {
    let (name, model_name) = model.split_once('/')?;
    let config = settings.providers.get(name)?;
    let base_url = base_url_of(name, config, env);
    Some((wire_for(config.kind, &base_url, model_name), base_url))
}

/// The wire format a provider of `kind` at `base_url` speaks for `model`:
/// its kind's, except that OpenAI's own endpoint serves some models on the
/// Responses API only ([`requires_responses_api`]), and a provider of kind
/// `openai` pointed there asks them in that format. Another server of
/// kind `openai` is taken at its word: it speaks chat completions.
fn wire_for(kind: ProviderKind, base_url: &str, model: &str) -> ProviderKind {
    let at_openai = base_url.trim_end_matches('/') == DEFAULT_OPENAI_BASE_URL;
    match kind {
        ProviderKind::OpenAi if at_openai && requires_responses_api(model) => {
            ProviderKind::OpenAiResponses
        }
        other => other,
    }
}

/// The MCP servers whose tools (`<server>_<tool>`) an allow-list can reach,
/// so a run starts only those.
pub fn servers_for(patterns: &[String], servers: &[McpServerConfig]) -> Vec<McpServerConfig> {
    servers
        .iter()
        .filter(|s| {
            let prefix = format!("{}_", s.name);
            patterns.iter().any(|p| glob_could_extend(p, &prefix))
        })
        .cloned()
        .collect()
}

/// Starts `servers` and adds their tools to the snapshot. Name collisions
/// (between MCP tools, or with built-in and plugin tools) are errors naming
/// both; the colliding MCP tool is left out.
pub async fn connect_mcp(
    snapshot: &mut Snapshot,
    servers: Vec<McpServerConfig>,
) -> (McpManager, Vec<Diagnostic>) {
    // Where each server stands in mcp.json, by the namespaced tool names it
    // contributes, so a name collision points at its server.
    let places: std::collections::HashMap<String, (usize, usize)> = servers
        .iter()
        .map(|s| (s.name.clone(), (s.line, s.column)))
        .collect();
    // Every server comes from the one MCP file of the project.
    let source = servers
        .first()
        .map_or_else(|| "mcp.json".into(), |s| s.source.clone());
    let manager = McpManager::start(servers).await;
    let place_of_tool: std::collections::HashMap<String, (usize, usize)> = manager
        .status()
        .into_iter()
        .flat_map(|status| {
            let place = places.get(&status.name).copied().unwrap_or((0, 0));
            status.tools.into_iter().map(move |(name, _)| (name, place))
        })
        .collect();
    let mcp_json = source.as_path();
    let mut diagnostics: Vec<Diagnostic> = manager
        .conflicts()
        .into_iter()
        .map(|c| Diagnostic::error(mcp_json, (0, 0), c))
        .collect();
    for tool in manager.tools() {
        let place = place_of_tool
            .get(&tool.spec().name)
            .copied()
            .unwrap_or((0, 0));
        if let Err(message) = snapshot.tools.add(tool) {
            diagnostics.push(Diagnostic::error(mcp_json, place, message));
        }
    }
    (manager, diagnostics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_at_its_own_endpoint_asks_responses_only_models_in_their_format() {
        let openai = "https://api.openai.com/v1/";
        assert_eq!(
            wire_for(ProviderKind::OpenAi, openai, "o3-pro"),
            ProviderKind::OpenAiResponses
        );
        assert_eq!(
            wire_for(ProviderKind::OpenAi, DEFAULT_OPENAI_BASE_URL, "gpt-5-codex"),
            ProviderKind::OpenAiResponses
        );
        assert_eq!(
            wire_for(ProviderKind::OpenAi, openai, "gpt-4o-mini"),
            ProviderKind::OpenAi,
            "a model served on chat completions stays there"
        );
        assert_eq!(
            wire_for(ProviderKind::OpenAi, "http://localhost:11434/v1", "o3-pro"),
            ProviderKind::OpenAi,
            "another server of kind openai speaks chat completions"
        );
        assert_eq!(
            wire_for(ProviderKind::OpenAiResponses, "http://gw/v1", "gpt-4o"),
            ProviderKind::OpenAiResponses
        );
        assert_eq!(
            wire_for(ProviderKind::Anthropic, openai, "o3-pro"),
            ProviderKind::Anthropic
        );
    }
}
