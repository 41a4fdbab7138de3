//! `aurad init`: a new project that works at once. It writes `aurad.yaml`
//! (store, listen address, the chosen provider and its prices, the other
//! providers commented), `agents/hello.yaml` (runs offline with
//! `--model test` and with a key), an example skill and a `.gitignore` that
//! keeps the store out of git. The files are templates in `init/`, filled
//! with the provider's model, key and prices.
//!
//! Nothing is overwritten: every file is created with `create_new`, and all
//! are checked first so that a refusal writes nothing.
//!
//! May depend on `config` (the file names); std otherwise.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::settings::LOCK_FILE;

/// Which provider the new project's agent and prices are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Gemini,
    /// A local Ollama server through its OpenAI-compatible endpoint: no key.
    Ollama,
}

impl Provider {
    /// The model the agent uses.
    pub fn model(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai/gpt-4o-mini",
            Provider::Anthropic => "anthropic/claude-haiku-4-5",
            Provider::Gemini => "gemini/gemini-2.5-flash",
            Provider::Ollama => "ollama/llama3.2",
        }
    }

    /// The environment variable holding the key, if the provider needs one.
    pub fn key_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            Provider::Gemini => Some("GEMINI_API_KEY"),
            Provider::Ollama => None,
        }
    }

    /// The `prices:` entries: the chosen model's first, the others'
    /// commented, so switching model keeps a price.
    fn prices(self) -> String {
        // US dollars per million tokens, from each provider's price list
        // (December 2026); a local model costs nothing.
        let all = [
            (
                Provider::OpenAi,
                "{ input_per_mtok: 0.15, output_per_mtok: 0.6, cached_input_per_mtok: 0.075 }",
            ),
            (
                Provider::Anthropic,
                "{ input_per_mtok: 1, output_per_mtok: 5, cached_input_per_mtok: 0.1 }",
            ),
            (
                Provider::Gemini,
                "{ input_per_mtok: 0.3, output_per_mtok: 2.5, cached_input_per_mtok: 0.075 }",
            ),
            (
                Provider::Ollama,
                "{ input_per_mtok: 0, output_per_mtok: 0 }",
            ),
        ];
        let line = |provider: Provider, price: &str| format!("\"{}\": {price}", provider.model());
        let mut out = Vec::new();
        for (provider, price) in all {
            if provider == self {
                out.insert(0, format!("  {}", line(provider, price)));
            } else {
                out.push(format!("  # {}", line(provider, price)));
            }
        }
        out.join("\n")
    }

    /// The `providers:` block: Ollama's endpoint set for Ollama, commented
    /// examples otherwise (openai, anthropic and gemini are built in).
    fn providers(self) -> &'static str {
        match self {
            Provider::Ollama => {
                "
# Ollama's OpenAI-compatible endpoint (start it with `ollama serve`, then
# `ollama pull llama3.2`). openai, anthropic and gemini are built in.
providers:
  ollama: { kind: openai, base_url: \"http://localhost:11434/v1\" }
"
            }
            _ => {
                "
# openai, anthropic and gemini are built in (keys OPENAI_API_KEY,
# ANTHROPIC_API_KEY, GEMINI_API_KEY). Any other server speaking one of their
# formats is a provider; then `model: NAME/MODEL`.
# providers:
#   ollama: { kind: openai, base_url: \"http://localhost:11434/v1\" }
#   deepseek: { kind: openai, base_url: \"https://api.deepseek.com/v1\", api_key_env: DEEPSEEK_API_KEY }
"
            }
        }
    }

    fn key_hint(self) -> String {
        match self.key_env() {
            Some(var) => format!("export {var}=..."),
            None => "none needed; `ollama serve` running".to_string(),
        }
    }
}

/// One file `init` writes, relative to the project directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub path: PathBuf,
    /// What it is for, one line.
    pub what: &'static str,
}

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(
        "{} already has {}; aurad init never overwrites: choose another directory, or remove {}",
        .dir.display(),
        .existing.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        if .existing.len() == 1 { "it" } else { "them" }
    )]
    Exists {
        dir: PathBuf,
        existing: Vec<PathBuf>,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The files of a new project for `provider`: (relative path, contents,
/// what it is for).
fn files(provider: Provider) -> Vec<(PathBuf, String, &'static str)> {
    let settings = include_str!("init/aurad.yaml")
        .replace("{{providers}}", provider.providers())
        .replace("{{prices}}", &provider.prices());
    let agent = include_str!("init/hello.yaml")
        .replace("{{model}}", provider.model())
        .replace("{{key_hint}}", &provider.key_hint());
    let gitignore = include_str!("init/gitignore").replace("{{lock}}", LOCK_FILE);
    vec![
        (
            PathBuf::from("aurad.yaml"),
            settings,
            "settings: the store, the listen address, providers and prices",
        ),
        (
            PathBuf::from("agents/hello.yaml"),
            agent,
            "a first agent: `aurad run hello`",
        ),
        (
            PathBuf::from("skills/arithmetic/SKILL.md"),
            include_str!("init/SKILL.md").to_string(),
            "a skill: instructions the model loads when a task needs them",
        ),
        (
            PathBuf::from(".gitignore"),
            gitignore,
            "keeps the store, its WAL and the lock out of git",
        ),
    ]
}

/// Writes a new project into `dir` (created if missing). Refuses, writing
/// nothing, when any of its files already exists there.
pub fn create(dir: &Path, provider: Provider) -> Result<Vec<Created>, InitError> {
    let files = files(provider);
    let existing: Vec<PathBuf> = files
        .iter()
        .filter(|(path, _, _)| dir.join(path).symlink_metadata().is_ok())
        .map(|(path, _, _)| path.clone())
        .collect();
    if !existing.is_empty() {
        return Err(InitError::Exists {
            dir: dir.to_path_buf(),
            existing,
        });
    }
    let mut created = Vec::new();
    for (path, contents, what) in files {
        let full = dir.join(&path);
        let io = |source| InitError::Io {
            path: full.clone(),
            source,
        };
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        // create_new: a file that appeared since the check above is not
        // overwritten either.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&full)
            .map_err(io)?;
        file.write_all(contents.as_bytes()).map_err(io)?;
        created.push(Created { path, what });
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_without_writing_when_one_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        std::fs::write(dir.path().join("agents/hello.yaml"), "mine").unwrap();
        let err = create(dir.path(), Provider::OpenAi).unwrap_err();
        assert!(err.to_string().contains("agents/hello.yaml"), "{err}");
        assert!(!dir.path().join("aurad.yaml").exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("agents/hello.yaml")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn the_chosen_provider_comes_first_and_the_others_are_commented() {
        let prices = Provider::Anthropic.prices();
        let first = prices.lines().next().unwrap();
        assert!(
            first.starts_with("  \"anthropic/claude-haiku-4-5\""),
            "{prices}"
        );
        assert_eq!(prices.lines().filter(|l| l.starts_with("  #")).count(), 3);
    }
}
