//! Record and replay: a run re-executed through the one engine with model
//! answers and tool results taken from a recording instead of a provider
//! and real tools, and the comparison of what it did with what the
//! recording did. `aurad replay` feeds a stored run's events back
//! ([`Trace::from_events`]); `aurad test` feeds scripted answers
//! ([`expect`] checks a case's expectations). Nothing here touches the
//! network, a real tool (unless a test case opts in), MCP or the store.
//! May depend on `engine`, `llm`, `tools` and `config` (the test case
//! format).

pub mod approvals;
pub mod diverge;
pub mod expect;
pub mod play;
pub mod provider;
pub mod tools;
mod trace;

pub use approvals::RecordedApprovals;
pub use diverge::{Divergence, compare};
pub use play::{Played, play};
pub use provider::ScriptedProvider;
pub use tools::{RecordedResult, ToolPlan, scripted_toolset};
pub use trace::{CallOutcome, RunEnd, Trace, TurnTrace};
