//! The facade the command line talks to: what each command does, without
//! the printing. It composes where a command needs parts put together
//! (`aurad run` in [`one_shot`], `aurad serve` in [`serve`], `aurad mcp serve`
//! in [`mcp_serve`], `replay` and
//! `test` offline, the agent, tool and MCP listings) and re-exports the few
//! handles, records and pure functions the command line reads and renders:
//! the store and its records, memory's import formats, skill matching,
//! retention's cut-off. `cli` names nothing else of the crate but `config`
//! (diagnostics, file names) and the leaves (`types`, `text`, `redact`).
//!
//! May depend on everything below `cli`; only `cli` depends on it.

pub mod agents;
pub mod backup;
pub mod cases;
pub mod chat;
pub mod complete;
pub mod doctor;
pub mod init;
pub mod inspect;
pub mod mcp_serve;
mod offline;
pub mod one_shot;
mod project;
pub mod replay;
pub mod run_or_agent;
pub mod serve;
pub mod service;

pub use crate::api::AgentInfo;
pub use crate::store::{
    NodeRecord, PruneScope, Pruned, RunFilter, RunRecord, SessionMessage, SessionRecord,
    SessionsPruned, StepRecord, Store, StoreError,
};
pub use project::{
    ForAgent, OpenError, api_access, concerns, for_agent, interruptible, open_store, runtime,
};

/// What `aurad memory` reads and writes: memories, their defaults, and the
/// formats `aurad memory import` takes.
pub mod memory {
    pub use crate::memory::import::{Format, parse as parse_import};
    pub use crate::memory::{DEFAULT_MAX_ENTRIES, DEFAULT_MIN_SCORE, Memory, NewMemory, Saved};
}

/// What `aurad skills` shows: the project's skills and which an input
/// matches.
pub mod skills {
    pub use crate::skills::catalog::{LOAD_SKILL, catalog_skills};
    pub use crate::skills::{Skill, load_skills, select_skills};
}

/// What `aurad runs prune` shares with the daemon's pruner: how far back a
/// cut-off goes and how many rows a batch deletes.
pub mod retention {
    pub use crate::daemon::retention::{BATCH_ROWS, SESSION_BATCH, cutoff};
}

/// The redactor of the process environment's secrets, which every log line
/// goes through from the start.
pub use crate::registry::secrets::process_redactor;
