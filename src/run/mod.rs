//! One run, from a request to its stored end. [`Job::prepare`] resolves a
//! [`RunRequest`] against a snapshot (an agent's engine loop, or a
//! pipeline's steps when the agent has `steps:`); [`execute`] claims the
//! run row and runs it; [`run_claimed`] runs one whose row is claimed
//! already (the daemon's supervisor claims its own, to queue them). Every
//! run takes this path: `aurad run`, the daemon's runs, agents called as
//! tools and pipeline steps.
//!
//! Around the engine this module holds what a run needs and the engine
//! must not know: templates, memory recall and skill matching (they read
//! the store and the snapshot), the claim, the recorder that turns engine
//! events into stored ones, the live event hub, tracing, approvals and
//! `notify:` messages.
//!
//! May depend on `config`, `registry`, `engine`, `llm`, `tools`, `memory`,
//! `skills`, `store`, `telemetry`.

pub mod agent_tool;
pub mod approvals;
pub mod claim;
pub mod events;
pub mod hub;
mod job;
pub mod notify;
pub mod owner;
pub mod pipeline;
pub mod recorder;
pub mod runner;
pub mod template;
mod traced;

use std::sync::Arc;

pub use events::RunSink;
pub use job::Job;
pub use runner::{PreparedRun, RunRequest, execute, prepare};

/// The process environment (or a test's), shared with runs.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;
