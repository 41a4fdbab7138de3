//! Shell completion. `aurad completions SHELL` prints the shell's
//! registration of clap_complete's dynamic engine: the shell then asks
//! `aurad` itself (`COMPLETE=SHELL aurad -- aurad run he`, answered by
//! [`complete_if_asked`] before anything else runs) for each completion, so
//! it offers the project's agent names and run ids as they are now, and
//! the commands and options as this binary defines them. `--static` prints
//! the former self-contained script (commands and options only). Needs no
//! project.
//!
//! Depends on the clap definitions in `cli` and `app::complete`.

use std::ffi::OsStr;
use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
use clap_complete::{CompleteEnv, Shell};

use super::{Cli, EXIT_FAILED, EXIT_OK};
use crate::app::complete::{self, Choice};

/// The variable that asks `aurad` for completions.
const VAR: &str = "COMPLETE";

#[derive(Debug, Args)]
#[command(
    after_help = "Install (the shell then asks aurad for each completion, so agent names \
    and run ids are the project's as they are now):\n  \
    bash: echo 'source <(aurad completions bash)' >> ~/.bashrc\n  \
    zsh:  echo 'source <(aurad completions zsh)' >> ~/.zshrc\n  \
    fish: aurad completions fish > ~/.config/fish/completions/aurad.fish"
)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, powershell or elvish.
    #[arg(value_enum)]
    pub shell: Shell,
    /// Print a self-contained script instead: commands and options only,
    /// no agent names or run ids, and it does not follow a newer aurad.
    #[arg(long = "static")]
    pub static_script: bool,
}

/// Answers the shell's completion request (`COMPLETE=SHELL aurad -- ...`)
/// and exits; returns at once when the process was not started for one.
pub fn complete_if_asked() {
    CompleteEnv::with_factory(Cli::command).var(VAR).complete();
}

pub fn run(args: &CompletionsArgs) -> i32 {
    let mut script = Vec::new();
    let written = if args.static_script {
        clap_complete::generate(args.shell, &mut Cli::command(), "aurad", &mut script);
        Ok(())
    } else {
        registration(args.shell, &mut script)
    };
    let written =
        written.and_then(|()| std::io::Write::write_all(&mut std::io::stdout().lock(), &script));
    match written {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("error: cannot write the completion script: {e}");
            EXIT_FAILED
        }
    }
}

/// What `COMPLETE=SHELL aurad` prints: the shell code that calls this
/// binary (by the name or path it was started with) for completions.
fn registration(shell: Shell, out: &mut Vec<u8>) -> std::io::Result<()> {
    let completer: &dyn EnvCompleter = match shell {
        Shell::Bash => &Bash,
        Shell::Elvish => &Elvish,
        Shell::Fish => &Fish,
        Shell::PowerShell => &Powershell,
        Shell::Zsh => &Zsh,
        other => {
            return Err(std::io::Error::other(format!(
                "no dynamic completion for {other}: use --static"
            )));
        }
    };
    // As clap_complete does: a relative path is made absolute, a bare name
    // is left to the shell's PATH.
    let started_as = PathBuf::from(std::env::args_os().next().unwrap_or_else(|| "aurad".into()));
    let program = if started_as.components().count() > 1 {
        std::env::current_dir()
            .map(|dir| dir.join(&started_as))
            .unwrap_or(started_as)
    } else {
        started_as
    };
    completer.write_registration(VAR, "aurad", "aurad", &program.to_string_lossy(), out)
}

/// Completes an agent's name (`aurad run`, `trigger`, `chat`, `test`,
/// `--agent`).
pub(super) fn agents() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        candidates(complete::agents(&project_dir(), &current.to_string_lossy()))
    })
}

/// Completes a run (its short id, or its whole id once its start is
/// typed) or an agent's name (`aurad logs`, `replay`).
pub(super) fn runs_or_agents() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        let current = current.to_string_lossy();
        let root = project_dir();
        let mut found = complete::runs(&root, &current);
        found.extend(complete::agents(&root, &current));
        candidates(found)
    })
}

/// Completes a run (`aurad approve`).
pub(super) fn runs() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        candidates(complete::runs(&project_dir(), &current.to_string_lossy()))
    })
}

fn candidates(choices: Vec<Choice>) -> Vec<CompletionCandidate> {
    choices
        .into_iter()
        .map(|c| CompletionCandidate::new(c.word).help(Some(c.help.into())))
        .collect()
}

/// The project the line being completed names with `--dir`, else the
/// current directory.
fn project_dir() -> PathBuf {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut dir = None;
    for (i, arg) in args.iter().enumerate() {
        if arg == "--dir" {
            dir = args.get(i + 1).cloned();
        } else if let Some(value) = arg.strip_prefix("--dir=") {
            dir = Some(value.to_string());
        }
    }
    PathBuf::from(dir.unwrap_or_else(|| ".".to_string()))
}
