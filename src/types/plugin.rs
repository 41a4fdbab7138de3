//! A validated `tools.d` plugin as plain data: what `config` produces from a
//! plugin file and `tools` turns into a tool, so neither depends on the
//! other. No I/O.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The directory of tool plugins, under the project root.
pub const PLUGIN_DIR: &str = "tools.d";

/// A validated tool plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// The tool's name: the file stem.
    pub name: String,
    /// The file, relative to the project root (`tools.d/weather.yaml`).
    pub path: PathBuf,
    pub description: String,
    /// JSON Schema of the arguments (`type: object`, known to compile).
    pub parameters: serde_json::Value,
    pub timeout: Duration,
    pub action: PluginAction,
    /// The interpolated text, for locating later diagnostics.
    pub text: String,
}

/// What calling the tool does.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginAction {
    /// Runs `argv` in `tools.d/` with the arguments as JSON on stdin; stdout
    /// is the result.
    Command {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Sends the arguments to `url`; the response body is the result.
    Http {
        /// Uppercased: GET, POST, PUT, PATCH or DELETE.
        method: String,
        url: String,
        headers: BTreeMap<String, String>,
        send_as: ArgsIn,
    },
}

/// Where an HTTP plugin puts the arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsIn {
    /// As a JSON body.
    Body,
    /// As query parameters.
    Query,
}
