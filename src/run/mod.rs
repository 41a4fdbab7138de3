//! One run, from a request to its stored end. [`Job::prepare`] resolves a
//! [`RunRequest`] against a snapshot (an agent's engine loop, or a
//! pipeline's steps when the agent has `steps:`); [`execute`] claims the
//! run row and runs it; [`run_claimed`] and [`run_claimed_with`] run one
//! whose row is claimed already (the daemon's supervisor claims its own,
//! to queue them). Every run takes this door: `aurad run`, the daemon's
//! runs, agents called as tools and pipeline steps.
//!
//! Around the engine this module holds what a run needs and the engine
//! must not know: templates, skill matching, the skill catalog's
//! `load_skill` tool and memory recall (they read
//! the snapshot and the store), the claim, the recorder that turns engine
//! events into stored ones, the live event hub, tracing, approvals and
//! `notify:` messages.
//!
//! May depend on `config`, `registry`, `engine`, `llm`, `tools`, `memory`,
//! `skills`, `store`, `telemetry`.

mod agent;
pub mod agent_tool;
pub mod approvals;
pub mod claim;
pub mod events;
pub mod hub;
mod job;
pub mod notify;
pub mod owner;
pub mod pipeline;
mod prepare;
pub mod recorder;
mod request;
pub mod session;
pub mod shared_limits;
pub mod skill_tool;
pub mod template;
mod traced;

use std::sync::Arc;

pub use agent::RunServices;
pub use events::RunSink;
pub use job::{Job, execute, run_claimed, run_claimed_with};
pub use pipeline::PipelineJob;
pub use prepare::{PreparedRun, agent_tool_names, prepare};
pub use request::RunRequest;
pub use session::{TurnRefused, new_session, turn_request};

/// The process environment (or a test's), shared with runs.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;
