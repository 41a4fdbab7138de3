//! `aurad completions SHELL`: print the completion script clap_complete
//! generates from the command definitions, so it never lags behind them.
//! Needs no project.
//!
//! Depends on the clap definitions in `cli` only.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{Cli, EXIT_FAILED, EXIT_OK};

#[derive(Debug, Args)]
#[command(after_help = "Install, e.g.:\n  \
    bash: aurad completions bash > ~/.local/share/bash-completion/completions/aurad\n  \
    zsh:  aurad completions zsh > ~/.zfunc/_aurad   (with `fpath+=~/.zfunc` before compinit)\n  \
    fish: aurad completions fish > ~/.config/fish/completions/aurad.fish")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, powershell or elvish.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: &CompletionsArgs) -> i32 {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "aurad", &mut script);
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &script) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("error: cannot write the completion script: {e}");
            EXIT_FAILED
        }
    }
}
