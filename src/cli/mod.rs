//! The command line: clap definitions, one file per command, exit codes,
//! and the log set-up (redacted log lines on stderr). The only module that
//! prints.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "the command line is the one module that prints"
)]

/// `println!` with every secret the process knows redacted
/// ([`crate::redact::for_logs`]: the environment's credentials and what
/// the loaded configuration substituted): for commands that print
/// configuration, whose values may hold an interpolated `${VAR}`.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", crate::redact::for_logs().redact(&format!($($arg)*)))
    };
}

/// `eprintln!` with the known secrets redacted, as [`say!`].
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", crate::redact::for_logs().redact(&format!($($arg)*)))
    };
}

mod agents;
mod approve;
mod backup;
mod chat;
mod completions;
mod dashboard;
mod doctor;
mod follow;
mod init;
mod mcp;
mod memory;
mod prune;
mod render;
mod replay;
mod run;
mod runs;
mod serve;
mod service;
mod skills;
mod status;
mod steps;
mod table;
mod test;
mod tools;
mod trigger;
mod validate;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use crate::app;
use crate::config::Diagnostic;

pub const EXIT_OK: i32 = 0;
/// The run ended in any state but `succeeded`, or a command failed.
pub const EXIT_FAILED: i32 = 1;
/// Bad configuration or usage.
pub const EXIT_CONFIG: i32 = 2;
/// Cancelled by Ctrl-C.
pub const EXIT_CANCELLED: i32 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "aurad",
    version,
    about = "Runs LLM agents declared in files",
    propagate_version = true
)]
pub struct Cli {
    /// Project root (holds agents/, aurad.yaml); default: the current directory.
    #[arg(long, global = true, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// How log lines on stderr look: `human` (default) or `json` (one
    /// object per line). RUST_LOG sets what is logged.
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log more: `-v` info (what `aurad serve` logs), `-vv` debug, `-vvv`
    /// trace. Without it only `aurad serve` logs info; the other commands
    /// log warnings and errors. RUST_LOG overrides both.
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The shape of the log lines written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Readable lines, coloured on a terminal.
    Human,
    /// One JSON object per line.
    Json,
}

impl Command {
    /// Whether the command only reads the project and the store and
    /// prints: it starts no tool, MCP server or daemon, so a closed stdout
    /// may end it (see `main.rs`).
    pub fn starts_no_process(&self) -> bool {
        match self {
            Command::Init(_)
            | Command::Validate
            | Command::Doctor(_)
            | Command::Agents(_)
            | Command::Runs(_)
            | Command::Logs(_)
            | Command::Approve(_)
            | Command::Memory(_)
            | Command::Skills(_)
            | Command::Status(_)
            | Command::Dashboard(_)
            | Command::Service(_)
            | Command::Backup(_)
            | Command::Completions(_) => true,
            Command::Run(_)
            | Command::Chat(_)
            | Command::Serve(_)
            | Command::Trigger(_)
            | Command::Replay(_)
            | Command::Test(_)
            | Command::Mcp(_)
            | Command::Tools(_) => false,
        }
    }
}

impl Cli {
    /// The log filter used when RUST_LOG is unset: `info` for the daemon,
    /// warnings for the other commands; each `-v` one level more. Below
    /// `-vv` only aurad's own lines: a dependency's internal ones (rmcp's
    /// raw `reqwest::Error` beside aurad's located message) are noise.
    pub fn default_log_filter(&self) -> &'static str {
        let base = match self.command {
            Command::Serve(_) => 1,
            _ => 0,
        };
        match base.max(self.verbose) {
            0 => "aurad=warn",
            1 => "aurad=info",
            2 => "debug",
            _ => "trace",
        }
    }
}

/// Whether to colour output written to a terminal: yes unless `NO_COLOR`
/// is set to a non-empty value (no-color.org: "when present and not an
/// empty string").
pub fn colour_allowed(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new project: aurad.yaml, a first agent, a skill, a .gitignore.
    Init(init::InitArgs),
    /// Run one agent now and stream it to the terminal.
    Run(run::RunArgs),
    /// Talk with an agent: a conversation kept as a session (`--continue`, `--session ID`).
    Chat(chat::ChatArgs),
    /// Check every file of the project and print all problems.
    Validate,
    /// What this machine and project can do and what is wrong, each with its fix.
    Doctor(doctor::DoctorArgs),
    /// Run the daemon: schedules, the HTTP API, hot reload, until SIGINT or SIGTERM.
    Serve(serve::ServeArgs),
    /// List the agents with their schedules, next fire, last run and backoff.
    Agents(agents::AgentsArgs),
    /// Ask the running daemon (`aurad serve`) to start a run of an agent.
    Trigger(trigger::TriggerArgs),
    /// List stored runs, newest first.
    Runs(runs::RunsArgs),
    /// Replay a stored run's events; `--follow` waits for the rest.
    Logs(runs::LogsArgs),
    /// Re-execute a stored run with its recorded answers and report where it diverges.
    Replay(replay::ReplayArgs),
    /// Run the regression cases of agents/NAME.test.yaml offline.
    Test(test::TestArgs),
    /// Approve (or --deny) the tool call a run waits on; no run: list them.
    Approve(approve::ApproveArgs),
    /// Connect the MCP servers of mcp.json and show their state and tools;
    /// `mcp serve`: offer the project's agents as MCP tools on stdio.
    Mcp(mcp::McpArgs),
    /// List every tool (built-in, tools.d, MCP) with its source and schema.
    Tools(tools::ToolsArgs),
    /// List, search, add, forget and import long-term memories.
    Memory(memory::MemoryArgs),
    /// List skills and show which would match an input.
    Skills(skills::SkillsArgs),
    /// Where the store is and, on PostgreSQL, the nodes sharing it.
    Status(status::StatusArgs),
    /// The dashboard's address with the token that lets the browser in.
    Dashboard(dashboard::DashboardArgs),
    /// Print (or --install) a systemd unit that runs `aurad serve` for this project.
    Service(service::ServiceArgs),
    /// Copy the project's SQLite store to FILE, consistent while `aurad serve` writes.
    Backup(backup::BackupArgs),
    /// Print the shell code that completes aurad (bash, zsh, fish, powershell, elvish):
    /// commands, options, agent names and run ids.
    Completions(completions::CompletionsArgs),
}

/// Logs go to stderr: readable lines (coloured on a terminal) or, with
/// `--log-format json`, one JSON object per line. RUST_LOG overrides the
/// command's default filter. Every line is redacted: the secrets of the
/// process environment from the start, those of each loaded project as it
/// loads (see `crate::redact`).
pub fn init_tracing(cli: &Cli) {
    use std::io::IsTerminal;
    crate::redact::add_to_logs(&crate::app::process_redactor());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(RedactedLog(std::io::stderr));
    match cli.log_format.unwrap_or(LogFormat::Human) {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder
            .with_ansi(colour_allowed(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .init(),
    }
}

/// A log writer whose output has every known secret redacted. The fmt
/// layer writes each log line with one `write_all`, so a secret is never
/// split across two writes.
#[derive(Debug, Clone, Copy)]
pub struct RedactedLog<M>(pub M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for RedactedLog<M>
{
    type Writer = RedactedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedWriter(self.0.make_writer())
    }
}

/// One log line's writer (see [`RedactedLog`]).
pub struct RedactedWriter<W>(W);

impl<W: std::io::Write> std::io::Write for RedactedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let redactor = crate::redact::for_logs();
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(redactor.redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

pub use completions::complete_if_asked;

/// Parses the arguments, runs the command, returns the exit code.
pub fn run(cli: Cli) -> i32 {
    // Needs no project.
    match &cli.command {
        Command::Completions(args) => return completions::run(args),
        Command::Init(args) => return init::run(cli.dir.as_deref(), args),
        _ => {}
    }
    let root = match project_root(cli.dir.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_CONFIG;
        }
    };
    match cli.command {
        Command::Serve(args) => serve::run(&root, args),
        Command::Backup(args) => backup::run(&root, args),
        Command::Service(args) => service::run(&root, args, cli.log_format),
        Command::Agents(args) => agents::run(&root, args),
        Command::Trigger(args) => trigger::run(&root, args),
        Command::Run(args) => run::run(&root, args),
        Command::Chat(args) => chat::run(&root, args),
        Command::Validate => validate::run(&root),
        Command::Runs(args) => runs::list(&root, args),
        Command::Logs(args) => runs::logs(&root, args),
        Command::Replay(args) => replay::run(&root, args),
        Command::Test(args) => test::run(&root, args),
        Command::Approve(args) => approve::run(&root, args),
        Command::Mcp(args) => mcp::run(&root, args),
        Command::Tools(args) => tools::tools(&root, args),
        Command::Memory(args) => memory::run(&root, args),
        Command::Skills(args) => skills::run(&root, args),
        Command::Status(args) => status::run(&root, args),
        Command::Dashboard(args) => dashboard::run(&root, args),
        Command::Doctor(args) => doctor::run(&root, args),
        Command::Completions(_) | Command::Init(_) => {
            unreachable!("answered before the project is read")
        }
    }
}

fn project_root(dir: Option<&Path>) -> Result<PathBuf, String> {
    let dir = dir.unwrap_or(Path::new("."));
    let root = dir
        .canonicalize()
        .map_err(|e| format!("project directory {}: {e}", dir.display()))?;
    if !root.is_dir() {
        return Err(format!(
            "project directory {} is not a directory",
            dir.display()
        ));
    }
    Ok(root)
}

/// `--input`: the text itself, or with `-` all of stdin. A read error is
/// printed; the caller exits with [`EXIT_CONFIG`].
fn read_input(arg: Option<&str>) -> Result<Option<String>, ()> {
    match arg {
        Some("-") => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|e| {
                eprintln!("error: cannot read the input from stdin: {e}");
            })?;
            Ok(Some(text))
        }
        other => Ok(other.map(str::to_string)),
    }
}

fn print_diagnostics(diagnostics: &[Diagnostic]) {
    let mut sorted: Vec<&Diagnostic> = diagnostics.iter().collect();
    sorted.sort_by(|a, b| (&a.path, a.line, a.column).cmp(&(&b.path, b.line, b.column)));
    for d in sorted {
        say_err!("{d}");
    }
}

/// Prints what concerns agent `name` of `diagnostics` (see
/// [`app::for_agent`]) and counts the other errors in one warning line.
/// Returns whether an error stops the agent.
fn print_for_agent(diagnostics: Vec<Diagnostic>, name: &str) -> bool {
    let report = app::for_agent(diagnostics, name);
    show_for_agent(&report, name);
    report.stops
}

/// Prints `report`, the diagnostics of a project as they concern agent
/// `name`.
fn show_for_agent(report: &app::ForAgent, name: &str) {
    print_diagnostics(&report.shown);
    if report.unrelated > 0 {
        eprintln!(
            "warning: {} error(s) in files `{name}` does not use (`aurad validate` lists them)",
            report.unrelated,
        );
    }
}

/// The single-threaded runtime a command needs for async work, or `None`
/// after saying why it could not start.
fn runtime() -> Option<tokio::runtime::Runtime> {
    app::runtime()
        .map_err(|message| eprintln!("error: {message}"))
        .ok()
}

/// Opens the project's store, or says why not (printing the errors of
/// `aurad.yaml` when that is why).
fn open_store(root: &Path) -> Result<app::Store, String> {
    app::open_store(root).map_err(|e| {
        if let app::OpenError::Settings(diagnostics) = &e {
            print_diagnostics(diagnostics);
        }
        e.to_string()
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use clap::Parser;

    use super::{Cli, RedactedLog, colour_allowed};
    use crate::redact::{Redactor, add_to_logs};

    /// A log destination the test can read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_are_redacted_in_both_formats() {
        let secret = "writer-\"quoted\"-secret\\9";
        add_to_logs(&Redactor::new([(
            "LOG_WRITER_SECRET".to_string(),
            secret.to_string(),
        )]));
        let log = |json: bool| {
            let captured = Captured::default();
            let sink = captured.clone();
            let writer = RedactedLog(move || sink.clone());
            let builder = tracing_subscriber::fmt()
                .with_writer(writer)
                .with_ansi(false);
            let emit = || tracing::warn!(shown = %secret, debugged = ?secret, "said {secret}");
            if json {
                tracing::subscriber::with_default(builder.json().finish(), emit);
            } else {
                tracing::subscriber::with_default(builder.finish(), emit);
            }
            let bytes = captured.0.lock().unwrap().clone();
            String::from_utf8(bytes).unwrap()
        };
        for (format, text) in [("human", log(false)), ("json", log(true))] {
            assert_eq!(
                text.matches("[redacted:LOG_WRITER_SECRET]").count(),
                3,
                "{format}: {text}"
            );
            assert!(!text.contains("quoted"), "{format}: {text}");
        }
    }

    #[test]
    fn no_color_counts_only_when_not_empty() {
        use std::ffi::OsStr;
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(true, Some(OsStr::new("0"))));
        assert!(!colour_allowed(false, None));
    }

    #[test]
    fn info_logs_only_under_serve_or_with_verbose() {
        let filter = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            cli.default_log_filter()
        };
        assert_eq!(filter(&["aurad", "serve"]), "aurad=info");
        assert_eq!(filter(&["aurad", "validate"]), "aurad=warn");
        assert_eq!(filter(&["aurad", "run", "a"]), "aurad=warn");
        assert_eq!(filter(&["aurad", "mcp"]), "aurad=warn");
        assert_eq!(filter(&["aurad", "run", "a", "-v"]), "aurad=info");
        assert_eq!(filter(&["aurad", "-vv", "validate"]), "debug");
        assert_eq!(filter(&["aurad", "serve", "-vv"]), "debug");
        assert_eq!(filter(&["aurad", "serve", "-vvvv"]), "trace");
    }
}
