//! `aurad chat AGENT`, composed: the agent loaded as `aurad run` loads it
//! (its MCP servers started), the store opened, a session created or
//! resumed, and each message a turn of that session through the run door
//! ([`crate::run::turn_request`], [`crate::run::execute`]). A turn's events
//! go to the caller as they happen; a call waiting for approval is asked
//! about on a thread of its own while the turn goes on; Ctrl-C (SIGINT)
//! stops the turn, not the chat. No printing here.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::one_shot::{self, LoadReport, NotLoaded};
use crate::engine::RunOutcome;
use crate::mcp::McpManager;
use crate::registry::Snapshot;
use crate::run::approvals::Approvals;
use crate::run::{Env, Job, RunRequest, execute, new_session, turn_request};
use crate::store::{SessionMessage, SessionRecord, Store};
use crate::types::approval::DecidedBy;
use crate::types::memory::Memory;
use crate::types::{RunEvent, Trigger};

/// Which session a chat starts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// A new one.
    New,
    /// This one (an id, or the start of one that is unique among the
    /// agent's sessions).
    Session(String),
    /// The agent's most recently used one (a new one if it has none).
    Last,
}

/// A call waiting for the person's approval.
#[derive(Debug, Clone)]
pub struct ApprovalAsk {
    pub tool: String,
    /// Its arguments, redacted.
    pub arguments: String,
}

/// The person's answer to an [`ApprovalAsk`]; `None`: no answer (the call
/// waits on, to be decided with `aurad approve` or the API).
pub type Ask = Arc<dyn Fn(&ApprovalAsk) -> Option<bool> + Send + Sync>;

/// One turn that ended.
#[derive(Debug)]
pub struct TurnEnd {
    pub run_id: String,
    pub outcome: RunOutcome,
}

/// A chat with one agent.
pub struct Chat {
    runtime: tokio::runtime::Runtime,
    snapshot: Arc<Snapshot>,
    mcp: Option<McpManager>,
    store: Store,
    agent: String,
    model: Option<String>,
    session: SessionRecord,
}

/// Why a chat did not start.
#[derive(Debug)]
pub enum OpenError {
    NotLoaded(NotLoaded),
    /// The store, the session or the agent: said.
    Failed(String),
}

/// Opens a chat with agent `name` of the project at `root` in the session
/// `resume` says, on `model` if given.
pub fn open(
    root: &Path,
    name: &str,
    resume: Resume,
    model: Option<String>,
) -> (LoadReport, Result<Chat, OpenError>) {
    let (report, loaded) = one_shot::load(root, name);
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(e) => return (report, Err(OpenError::NotLoaded(e))),
    };
    let (runtime, snapshot, mcp, store) = match loaded.into_parts() {
        Ok(parts) => parts,
        Err(message) => return (report, Err(OpenError::Failed(message))),
    };
    let session = runtime.block_on(find_session(&store, &snapshot, name, &resume));
    let session = match session {
        Ok(session) => session,
        Err(message) => {
            if let Some(manager) = &mcp {
                runtime.block_on(manager.shutdown());
            }
            crate::tools::scope::finish();
            return (report, Err(OpenError::Failed(message)));
        }
    };
    let chat = Chat {
        runtime,
        snapshot,
        mcp,
        store,
        agent: name.to_string(),
        model,
        session,
    };
    (report, Ok(chat))
}

/// The session `resume` names for `agent`.
async fn find_session(
    store: &Store,
    snapshot: &Snapshot,
    agent: &str,
    resume: &Resume,
) -> Result<SessionRecord, String> {
    let new = || async {
        new_session(store, snapshot, agent)
            .await
            .map_err(|e| e.to_string())
    };
    match resume {
        Resume::New => new().await,
        Resume::Last => match store.sessions(Some(agent), 1).await {
            Ok(mut found) if !found.is_empty() => Ok(found.remove(0)),
            Ok(_) => new().await,
            Err(e) => Err(e.to_string()),
        },
        Resume::Session(id) => session_by_prefix(store, agent, id).await,
    }
}

/// Session `id` of `agent`, or the one session of `agent` whose id starts
/// with it.
async fn session_by_prefix(store: &Store, agent: &str, id: &str) -> Result<SessionRecord, String> {
    if let Some(found) = store.session(id).await.map_err(|e| e.to_string())? {
        if found.agent != agent {
            return Err(format!(
                "session `{id}` belongs to agent `{}`; run `aurad chat {} --session {id}`",
                found.agent, found.agent
            ));
        }
        return Ok(found);
    }
    let all = store
        .sessions(Some(agent), usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let matching: Vec<&SessionRecord> = all.iter().filter(|s| s.id.starts_with(id)).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "agent `{agent}` has no session `{id}`; list them with /sessions"
        )),
        more => Err(format!(
            "`{id}` starts {} sessions of `{agent}`; give more of the id",
            more.len()
        )),
    }
}

impl Chat {
    /// The session the next message goes to.
    pub fn session(&self) -> &SessionRecord {
        &self.session
    }

    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Starts a new session; the next message goes there.
    pub fn new_session(&mut self) -> Result<&SessionRecord, String> {
        let session = self
            .runtime
            .block_on(new_session(&self.store, &self.snapshot, &self.agent));
        self.session = session.map_err(|e| e.to_string())?;
        Ok(&self.session)
    }

    /// Goes on in session `id` (or the one whose id starts with it).
    pub fn resume(&mut self, id: &str) -> Result<&SessionRecord, String> {
        let found = self
            .runtime
            .block_on(session_by_prefix(&self.store, &self.agent, id))?;
        self.session = found;
        Ok(&self.session)
    }

    /// The agent's sessions, most recently used first.
    pub fn sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, String> {
        self.runtime
            .block_on(self.store.sessions(Some(&self.agent), limit))
            .map_err(|e| e.to_string())
    }

    /// The current session's messages in order.
    pub fn history(&self) -> Result<Vec<SessionMessage>, String> {
        self.runtime
            .block_on(self.store.session_messages(&self.session.id))
            .map_err(|e| e.to_string())
    }

    /// The tools a turn gets.
    pub fn tools(&self) -> Vec<String> {
        match self.snapshot.project.agents.get(&self.agent) {
            Some(agent) => crate::run::agent_tool_names(&self.snapshot, agent),
            None => Vec::new(),
        }
    }

    /// The skills a turn may use (name, description).
    pub fn skills(&self) -> Vec<(String, String)> {
        let Some(agent) = self.snapshot.project.agents.get(&self.agent) else {
            return Vec::new();
        };
        crate::skills::catalog::catalog_skills(&self.snapshot.skills, &agent.skills)
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.name.clone(), s.description.clone()))
            .collect()
    }

    /// The agent's memories that best match `query`, with their scores.
    pub fn memory(&self, query: &str) -> Result<Vec<(f64, Memory)>, String> {
        let namespace = self
            .snapshot
            .project
            .agents
            .get(&self.agent)
            .map_or_else(|| self.agent.clone(), |a| a.memory.namespace.clone());
        let found = self.runtime.block_on(self.store.memory_recall(
            &namespace,
            query,
            10,
            0.0,
            chrono::Utc::now(),
        ));
        found
            .map(|found| found.into_iter().map(|r| (r.score, r.memory)).collect())
            .map_err(|e| e.to_string())
    }

    /// Sends `message` as the next turn of the session, giving each event
    /// to `on_event` as it happens. A call waiting for approval is put to
    /// `ask` on a blocking thread while the turn goes on. SIGINT stops the
    /// turn (it ends `cancelled`, the message kept in the session).
    /// `Err`: the turn did not run, or its end could not be stored; said.
    pub fn send(
        &mut self,
        message: String,
        on_event: &mut dyn FnMut(&RunEvent),
        ask: Ask,
    ) -> Result<TurnEnd, String> {
        let store = self.store.clone();
        let snapshot = self.snapshot.clone();
        let session = self.session.id.clone();
        let model = self.model.clone();
        let ended = self.runtime.block_on(async move {
            let request = turn_request(&store, &snapshot, &session, message, Trigger::Cli)
                .await
                .map_err(|e| e.to_string())?;
            let request = RunRequest { model, ..request };
            let env: Env = Arc::new(crate::config::process_env);
            let job = Job::prepare_blocking(snapshot, request, env).await?;
            let run_id = job.id().to_string();
            let cancel = CancellationToken::new();
            let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
            let (answers_tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
            let run = execute(job, &store, cancel.clone(), move |event| {
                let _ = events_tx.send(event.clone());
            });
            tokio::pin!(run);
            let approvals = Approvals::new(store.clone());
            let interrupt = tokio::signal::ctrl_c();
            tokio::pin!(interrupt);
            let mut interrupted = false;
            let outcome = loop {
                tokio::select! {
                    outcome = &mut run => break outcome,
                    Some(event) = events.recv() => {
                        on_event(&event);
                        if let RunEvent::ApprovalRequested { id, name, arguments, .. } = event {
                            let (ask, answers) = (ask.clone(), answers_tx.clone());
                            let question = ApprovalAsk { tool: name, arguments };
                            tokio::task::spawn_blocking(move || {
                                if let Some(approved) = ask(&question) {
                                    let _ = answers.send((id, approved));
                                }
                            });
                        }
                    }
                    Some((call, approved)) = answers.recv() => {
                        if let Err(e) = approvals.decide(&run_id, &call, approved, None, DecidedBy::Cli).await {
                            tracing::warn!(run = %run_id, "recording the decision failed: {e}");
                        }
                    }
                    _ = &mut interrupt, if !interrupted => {
                        interrupted = true;
                        cancel.cancel();
                    }
                }
            };
            while let Ok(event) = events.try_recv() {
                on_event(&event);
            }
            let outcome = outcome.map_err(|e| format!("run {run_id}: the database failed: {e}"))?;
            Ok::<_, String>(TurnEnd { run_id, outcome })
        });
        if let Ok(Some(session)) = self.runtime.block_on(self.store.session(&self.session.id)) {
            self.session = session;
        }
        ended
    }

    /// The next line of a piped input, or `None` at its end or at SIGINT
    /// (which then ends the chat, as it would any program reading a pipe).
    pub fn read_piped_line(&self) -> Option<String> {
        self.runtime.block_on(async {
            let line = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line),
                }
            });
            tokio::select! {
                line = line => line.ok().flatten(),
                _ = tokio::signal::ctrl_c() => None,
            }
        })
    }

    /// Stops the MCP servers and closes the store.
    pub fn close(self) -> Result<(), String> {
        if let Some(manager) = &self.mcp {
            self.runtime.block_on(manager.shutdown());
        }
        self.runtime.shutdown_timeout(Duration::from_millis(500));
        crate::tools::scope::finish();
        self.store
            .close()
            .map_err(|e| format!("closing the database failed: {e}"))
    }
}
