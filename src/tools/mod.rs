//! Tools: the `Tool` trait, the registry of every tool known to a project,
//! the allow-listed `ToolSet` an agent sees, argument validation against each
//! tool's JSON Schema, the built-in tools and the sandbox of tool processes.
//! May depend on `types` only (and the `landlock` crate).

pub mod builtin;
pub mod plugin;
pub mod process;
pub mod program_path;
pub mod sandbox;
pub mod scope;

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::types::ToolSpec;

/// Default cap on what a tool returns to the model.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;

/// What a tool may know about the run that calls it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The project root: file tools are confined to it, `bash` runs in it.
    pub root: PathBuf,
    /// Cancelled when the run is cancelled or times out; long tools stop.
    pub cancel: CancellationToken,
    /// Most bytes of output a tool should return.
    pub output_cap: usize,
    /// The confinement of the processes a tool starts (the agent's
    /// `sandbox:`; its [`ToolSet`] sets it for every call).
    pub sandbox: sandbox::Sandbox,
}

/// Why a tool call failed. Every variant becomes an error text for the model
/// and the run goes on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The arguments are wrong for this tool (beyond what the schema says).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The tool did not finish in time.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    /// The run was cancelled while the tool ran.
    #[error("cancelled")]
    Cancelled,
}

/// A tool the model can call.
pub trait Tool: Send + Sync {
    fn spec(&self) -> &ToolSpec;

    /// Where the tool comes from, for `aurad tools`: `builtin`,
    /// `plugin tools.d/x.yaml`, `mcp server x`.
    fn source(&self) -> String {
        "builtin".to_string()
    }

    /// Runs the tool with arguments already validated against its schema.
    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// Cuts `text` to at most `cap` bytes (on a char boundary) and says so.
pub fn cap_output(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let total = text.len();
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!(
        "\n[output cut: {total} bytes, showing the first {end}]"
    ));
    text
}

pub mod registry;
pub use registry::{
    CallObserver, CallWatch, ToolOutcome, ToolRegistry, ToolSet, glob_could_extend, glob_match,
    prepare_builtin_schemas, schema_problems,
};
