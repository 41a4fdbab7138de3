//! Builds the immutable [`Snapshot`] a run works from: the validated project,
//! the tools it can reach and the providers its agents name, with the
//! cross-checks that need more than one file (tool allow-lists against known
//! tools, models against providers). May depend on `config`, `llm`, `tools`.

use std::sync::Arc;

use crate::config::diag::locate;
use crate::config::settings::{DEFAULT_OPENAI_BASE_URL, LATER_PROVIDERS};
use crate::config::{Agent, Diagnostic, EnvLookup, Loaded, Project, ProviderKind, Settings};
use crate::llm::Provider;
use crate::llm::openai::OpenAiProvider;
use crate::llm::test_model::TestModel;
use crate::tools::ToolRegistry;

/// Everything a run needs, fixed at load time.
#[derive(Clone)]
pub struct Snapshot {
    pub project: Project,
    pub tools: ToolRegistry,
}

/// Builds the snapshot and adds the cross-file diagnostics to `loaded`'s.
/// Agents with cross-file errors are removed from the snapshot.
pub fn build(loaded: Loaded) -> (Snapshot, Vec<Diagnostic>) {
    let Loaded {
        mut project,
        mut diagnostics,
    } = loaded;
    let tools = ToolRegistry::builtin();
    let mut broken = Vec::new();
    for agent in project.agents.values() {
        let diags = check_agent(agent, &project.settings, &tools);
        if diags.iter().any(Diagnostic::is_error) {
            broken.push(agent.name.clone());
        }
        diagnostics.extend(diags);
    }
    for name in broken {
        project.agents.remove(&name);
    }
    (Snapshot { project, tools }, diagnostics)
}

/// Checks what one agent refers to: its provider and its tools.
pub fn check_agent(agent: &Agent, settings: &Settings, tools: &ToolRegistry) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    if let Err(message) = check_model(&agent.model, settings) {
        diags.push(Diagnostic::error(
            &agent.path,
            locate(&agent.text, &["model"]),
            message,
        ));
    }
    for pattern in tools.unmatched(&agent.tools) {
        let known: Vec<&str> = tools.names().collect();
        let place = locate(&agent.text, &["tools"]);
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
    diags
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
    if LATER_PROVIDERS.contains(&provider) {
        Err(format!(
            "provider `{provider}` is not supported yet in this build; use an OpenAI-compatible provider ({})",
            known.join(", ")
        ))
    } else {
        Err(format!(
            "unknown provider `{provider}` in model {model:?}; known providers: {} (add others under `providers:` in aurad.yaml)",
            known.join(", ")
        ))
    }
}

/// Builds the provider for `model`, returning it and the model name to send.
pub fn provider_for(
    model: &str,
    settings: &Settings,
    env: EnvLookup,
) -> Result<(Arc<dyn Provider>, String), String> {
    check_model(model, settings)?;
    if model == "test" {
        return Ok((Arc::new(TestModel), "test".into()));
    }
    let (name, model_name) = model.split_once('/').expect("checked above");
    let config = &settings.providers[name];
    match config.kind {
        ProviderKind::OpenAi => {
            let base_url = config
                .base_url
                .clone()
                .or_else(|| (name == "openai").then(|| env("OPENAI_BASE_URL")).flatten())
                .unwrap_or_else(|| DEFAULT_OPENAI_BASE_URL.to_string());
            let api_key = config
                .api_key_env
                .as_deref()
                .and_then(env)
                .filter(|k| !k.is_empty());
            if api_key.is_none() && base_url == DEFAULT_OPENAI_BASE_URL {
                let var = config.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
                return Err(format!(
                    "{var} is not set: export your API key, or try the agent offline with `--model test`"
                ));
            }
            let mut builder = reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .read_timeout(std::time::Duration::from_secs(300));
            if base_url.starts_with("http://") {
                // A plain-HTTP endpoint (Ollama, vLLM, a local proxy) never
                // needs TLS: skip loading the system's root certificates,
                // which costs milliseconds at every start.
                builder = builder.tls_certs_only(std::iter::empty());
            }
            let client = builder
                .build()
                .map_err(|e| format!("cannot create the HTTP client: {e}"))?;
            Ok((
                Arc::new(OpenAiProvider::new(base_url, api_key, client)),
                model_name.to_string(),
            ))
        }
    }
}
