//! `aurad init [DIR]`: write a new project (see [`crate::app::init`]) and
//! say what to do next. Needs no project.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::{EXIT_CONFIG, EXIT_OK};
use crate::app::init::{self, Provider};

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to create the project (made if missing); default: `--dir`, else
    /// the current directory.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The provider the agent and the prices are written for.
    #[arg(long, value_enum, default_value_t = ProviderArg::Openai)]
    pub provider: ProviderArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    /// OpenAI (OPENAI_API_KEY), gpt-4o-mini.
    Openai,
    /// Anthropic (ANTHROPIC_API_KEY), claude-haiku-4-5.
    Anthropic,
    /// Google Gemini (GEMINI_API_KEY), gemini-2.5-flash.
    Gemini,
    /// A local Ollama server, llama3.2; no key.
    Ollama,
}

impl From<ProviderArg> for Provider {
    fn from(arg: ProviderArg) -> Provider {
        match arg {
            ProviderArg::Openai => Provider::OpenAi,
            ProviderArg::Anthropic => Provider::Anthropic,
            ProviderArg::Gemini => Provider::Gemini,
            ProviderArg::Ollama => Provider::Ollama,
        }
    }
}

pub fn run(global_dir: Option<&Path>, args: &InitArgs) -> i32 {
    let dir = args.dir.as_deref().or(global_dir).unwrap_or(Path::new("."));
    let provider = Provider::from(args.provider);
    let created = match init::create(dir, provider) {
        Ok(created) => created,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_CONFIG;
        }
    };
    println!("created a project in {}:", dir.display());
    let width = created
        .iter()
        .map(|c| c.path.as_os_str().len())
        .max()
        .unwrap_or(0);
    for c in &created {
        println!("  {:width$}  {}", c.path.display(), c.what);
    }
    let mut next: Vec<(String, String)> = Vec::new();
    if dir != Path::new(".") {
        next.push((format!("cd {}", dir.display()), String::new()));
    }
    next.push((
        "aurad run hello --model test".into(),
        "offline, no key: the built-in test model".into(),
    ));
    match provider.key_env() {
        Some(var) => next.push((format!("export {var}=..."), "your key; then:".into())),
        None => next.push((
            "ollama pull llama3.2".into(),
            "with `ollama serve` running; then:".into(),
        )),
    }
    next.push(("aurad run hello".into(), provider.model().into()));
    next.push((
        "aurad doctor".into(),
        "what this machine can do, what is missing".into(),
    ));
    next.push((
        "aurad serve".into(),
        "schedules, the API and the dashboard".into(),
    ));
    println!("next:");
    let width = next.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    for (command, why) in next {
        if why.is_empty() {
            println!("  {command}");
        } else {
            println!("  {command:width$}  # {why}");
        }
    }
    EXIT_OK
}
