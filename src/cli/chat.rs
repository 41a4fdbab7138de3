//! `aurad chat AGENT`: a conversation with an agent in the terminal. Each
//! message is a turn of a stored session (`app::chat`): the answer streams,
//! reasoning dimmed, tool calls and results compact; a call waiting for
//! approval is asked about inline; Ctrl-C stops the turn, not the chat;
//! Ctrl-D or `/exit` leaves. Line editing and history come from rustyline;
//! a line ending with `\` goes on on the next line. Without a terminal
//! (a pipe), each line is a message and only the answers go to stdout, so
//! a chat can be scripted.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use clap::Args;
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Editor, Helper, completion::Completer, highlight::Highlighter, hint::Hinter};

use super::render::{Renderer, format_cost, format_usage, one_line};
use super::{EXIT_FAILED, EXIT_OK, print_diagnostics, show_for_agent};
use crate::app::chat::{self, ApprovalAsk, Ask, Chat, OpenError, Resume};
use crate::types::{Message, RunState};

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The agent to talk to (the file name in agents/ without .yaml).
    #[arg(add = super::completions::agents())]
    pub name: String,
    /// Go on in this stored session: its id, or a start of it unique among
    /// the agent's sessions.
    #[arg(long, short = 's', value_name = "ID", conflicts_with = "continue_last")]
    pub session: Option<String>,
    /// Go on in the agent's most recently used session.
    #[arg(long = "continue", short = 'c')]
    pub continue_last: bool,
    /// Use this model instead of the agent's (`provider/model`, or `test`).
    #[arg(long, short = 'm', value_name = "MODEL")]
    pub model: Option<String>,
}

const HELP: &str = "\
/new             start a new session
/sessions        this agent's sessions, most recent first
/resume ID       go on in a stored session (an id or its start)
/history         the session's messages so far
/tools           the tools a turn may use
/skills          the skills a turn may use
/memory QUERY    the agent's memories that match QUERY
/cost            the session's tokens and cost so far
/exit            leave (also Ctrl-D)
A line ending with \\ goes on on the next line. Ctrl-C stops the answer.";

pub fn run(root: &Path, args: ChatArgs) -> i32 {
    let resume = match (args.session, args.continue_last) {
        (Some(id), _) => Resume::Session(id),
        (None, true) => Resume::Last,
        (None, false) => Resume::New,
    };
    let (report, opened) = chat::open(root, &args.name, resume, args.model);
    show_for_agent(&report.agent, &args.name);
    print_diagnostics(&report.mcp);
    for (name, state) in &report.servers_down {
        eprintln!("warning: MCP server `{name}` is {state}; its tools are not available");
    }
    let mut chat = match opened {
        Ok(chat) => chat,
        Err(OpenError::NotLoaded(refused)) => return super::run::not_loaded(&args.name, refused),
        Err(OpenError::Failed(message)) => {
            eprintln!("error: {message}");
            return EXIT_FAILED;
        }
    };
    let code = if std::io::stdin().is_terminal() {
        terminal(&mut chat)
    } else {
        piped(&mut chat)
    };
    match chat.close() {
        Ok(()) => code,
        Err(message) => {
            eprintln!("error: {message}");
            EXIT_FAILED
        }
    }
}

/// What a line the person typed does.
enum Next {
    Go,
    Leave,
}

fn terminal(chat: &mut Chat) -> i32 {
    let mut editor: Editor<Lines, FileHistory> = match Editor::new() {
        Ok(editor) => editor,
        Err(e) => {
            eprintln!("error: cannot read from the terminal: {e}");
            return EXIT_FAILED;
        }
    };
    editor.set_helper(Some(Lines));
    let history = crate::config::private::chat_history_file(&crate::config::process_env);
    // No history yet is no error.
    let _ = editor.load_history(&history);
    greet(chat);
    let code = loop {
        match editor.readline("> ") {
            Ok(line) => {
                let text = line.replace("\\\n", "\n");
                if text.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                let next = match text.trim().strip_prefix('/') {
                    Some(command) => slash(chat, command),
                    None => {
                        turn(chat, text, true);
                        Next::Go
                    }
                };
                if let Next::Leave = next {
                    break EXIT_OK;
                }
            }
            // Ctrl-C at the prompt clears the line, as in a shell.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break EXIT_OK,
            Err(e) => {
                eprintln!("error: reading the terminal failed: {e}");
                break EXIT_FAILED;
            }
        }
    };
    if let Some(dir) = history.parent()
        && crate::config::private::create_private_dir(dir).is_ok()
    {
        let _ = editor.save_history(&history);
    }
    code
}

fn piped(chat: &mut Chat) -> i32 {
    let mut failed = false;
    while let Some(line) = chat.read_piped_line() {
        let text = line.trim_end_matches(['\n', '\r']).to_string();
        if text.trim().is_empty() {
            continue;
        }
        if !turn(chat, text, false) {
            failed = true;
        }
    }
    if failed { EXIT_FAILED } else { EXIT_OK }
}

fn greet(chat: &Chat) {
    let session = chat.session();
    let resumed = if session.turns > 0 {
        format!(" ({} turns so far; /history shows them)", session.turns)
    } else {
        String::new()
    };
    eprintln!(
        "chat with `{}` · session {}{resumed}\n/help lists the commands; Ctrl-D leaves",
        chat.agent(),
        session.id
    );
}

/// One turn; true when it succeeded.
fn turn(chat: &mut Chat, text: String, interactive: bool) -> bool {
    let mut renderer = Renderer::for_chat();
    let ask: Ask = if interactive {
        Arc::new(ask_at_terminal)
    } else {
        Arc::new(|question: &ApprovalAsk| {
            eprintln!(
                "`{}` waits for approval; decide it with `aurad approve`",
                question.tool
            );
            None
        })
    };
    let ended = chat.send(text, &mut |event| renderer.event(event), ask);
    renderer.end_line();
    match ended {
        Ok(end) => {
            let outcome = &end.outcome;
            match outcome.state {
                RunState::Succeeded => {
                    if interactive && let Some(tokens) = format_usage(&outcome.usage) {
                        renderer.note(&format!("· {tokens} · {}", format_cost(outcome.cost_usd)));
                    }
                    true
                }
                RunState::Cancelled => {
                    renderer.note("stopped; your message stays in the session");
                    false
                }
                state => {
                    let reason = outcome.reason.as_deref().unwrap_or("");
                    eprintln!(
                        "✗ run {} {state}: {}",
                        end.run_id,
                        crate::text::inert(reason)
                    );
                    false
                }
            }
        }
        Err(message) => {
            eprintln!("error: {message}");
            false
        }
    }
}

/// Asks the person at the terminal about a call; `None` when stdin closed.
fn ask_at_terminal(question: &ApprovalAsk) -> Option<bool> {
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "`{}` wants to run with {}\nallow it? [y/N] ",
        crate::text::inert(&question.tool),
        crate::text::inert(&one_line(&question.arguments, 300))
    );
    let _ = err.flush();
    drop(err);
    let mut answer = String::new();
    match std::io::stdin().read_line(&mut answer) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(matches!(answer.trim(), "y" | "Y" | "yes")),
    }
}

/// A `/command`.
fn slash(chat: &mut Chat, command: &str) -> Next {
    let (name, rest) = command
        .split_once(char::is_whitespace)
        .map_or((command, ""), |(n, r)| (n, r.trim()));
    match name {
        "exit" | "quit" => return Next::Leave,
        "help" => eprintln!("{HELP}"),
        "new" => match chat.new_session() {
            Ok(session) => eprintln!("new session {}", session.id),
            Err(message) => eprintln!("error: {message}"),
        },
        "resume" if rest.is_empty() => eprintln!("usage: /resume ID (see /sessions)"),
        "resume" => match chat.resume(rest) {
            Ok(session) => eprintln!(
                "session {} · {} turns · {}",
                session.id,
                session.turns,
                session.title.as_deref().unwrap_or("(untitled)")
            ),
            Err(message) => eprintln!("error: {message}"),
        },
        "sessions" => match chat.sessions(20) {
            Ok(sessions) if sessions.is_empty() => eprintln!("no sessions yet"),
            Ok(sessions) => {
                for s in sessions {
                    let mark = if s.id == chat.session().id { "*" } else { " " };
                    println!(
                        "{mark} {}  {}  {:>4} turns  {}",
                        s.id,
                        s.updated_at.format("%Y-%m-%d %H:%M %Z"),
                        s.turns,
                        crate::text::inert(s.title.as_deref().unwrap_or("(untitled)"))
                    );
                }
            }
            Err(message) => eprintln!("error: {message}"),
        },
        "history" => match chat.history() {
            Ok(messages) if messages.is_empty() => eprintln!("no messages yet"),
            Ok(messages) => {
                for m in messages {
                    println!("{}", history_line(&m.message));
                }
            }
            Err(message) => eprintln!("error: {message}"),
        },
        "tools" => {
            let tools = chat.tools();
            if tools.is_empty() {
                eprintln!("no tools");
            }
            for tool in tools {
                println!("{tool}");
            }
        }
        "skills" => {
            let skills = chat.skills();
            if skills.is_empty() {
                eprintln!("no skills");
            }
            for (name, description) in skills {
                println!("{name}  {}", one_line(&description, 100));
            }
        }
        "memory" if rest.is_empty() => eprintln!("usage: /memory QUERY"),
        "memory" => match chat.memory(rest) {
            Ok(found) if found.is_empty() => eprintln!("no memory matches"),
            Ok(found) => {
                for (score, memory) in found {
                    println!(
                        "#{} ({score:.3}) [{}] {}",
                        memory.id,
                        memory.category,
                        crate::text::inert(&one_line(&memory.content, 120))
                    );
                }
            }
            Err(message) => eprintln!("error: {message}"),
        },
        "cost" => {
            let s = chat.session();
            println!(
                "session {} · {} turns · {} in / {} out tokens · {}",
                s.id,
                s.turns,
                s.input_tokens,
                s.output_tokens,
                format_cost(s.cost_usd)
            );
        }
        other => eprintln!("unknown command /{other}; /help lists them"),
    }
    Next::Go
}

/// A stored message as one line of `/history`.
fn history_line(message: &Message) -> String {
    let text = |t: &str| crate::text::inert(&one_line(t, 200)).into_owned();
    match message {
        Message::System { content } => format!("system: {}", text(content)),
        Message::User { content } => format!("you: {}", text(content)),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } if !tool_calls.is_empty() => {
            let calls: Vec<String> = tool_calls
                .iter()
                .map(|c| format!("{}({})", c.name, one_line(&c.arguments, 80)))
                .collect();
            let said = if content.trim().is_empty() {
                String::new()
            } else {
                format!("{} ", text(content))
            };
            format!("agent: {said}→ {}", text(&calls.join(", ")))
        }
        Message::Assistant { content, .. } => format!("agent: {}", text(content)),
        Message::Tool { name, content, .. } => format!("  {name} → {}", text(content)),
    }
}

/// The editor's helper: a line ending with `\` is not finished.
struct Lines;

impl Validator for Lines {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        if ctx.input().ends_with('\\') {
            Ok(ValidationResult::Incomplete)
        } else {
            Ok(ValidationResult::Valid(None))
        }
    }
}

impl Completer for Lines {
    type Candidate = String;
}

impl Hinter for Lines {
    type Hint = String;
}

impl Highlighter for Lines {}

impl Helper for Lines {}
