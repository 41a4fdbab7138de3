//! The MCP servers other editors keep where aurad does not read them:
//! Cursor's `.cursor/mcp.json`, Roo Code's `.roo/mcp.json`, Zed's
//! `context_servers` in `.zed/settings.json` and the `mcp` section of VS
//! Code's `.vscode/settings.json`. When the project has none of the files
//! aurad reads, each one found is named at its place with the one-line way
//! to use it, so "no MCP servers" never hides a file the person expects to
//! be read.
//!
//! Depends on its `config::mcp` siblings (`json`, `blank_jsonc`) and
//! `config`'s bounded reading and diagnostics.

use std::path::Path;

use super::json::{self, Value};
use super::{MCP_FILES, blank_jsonc};
use crate::config::bounds;
use crate::config::diag::{Diagnostic, offset_to_place};

/// A file of another editor that may hold MCP servers.
struct Other {
    /// Relative to the project root.
    file: &'static str,
    editor: &'static str,
    /// The top-level key that holds the servers.
    key: &'static str,
    /// How to have aurad read them.
    fix: &'static str,
    /// Whether the whole file is about MCP servers (else it is the editor's
    /// settings, and only named when it has `key`).
    whole: bool,
}

const OTHERS: [Other; 4] = [
    Other {
        file: ".cursor/mcp.json",
        editor: "Cursor",
        key: "mcpServers",
        fix: "its `mcpServers` are a dialect aurad reads: share the file with `ln -s .cursor/mcp.json mcp.json` (or copy it to mcp.json)",
        whole: true,
    },
    Other {
        file: ".roo/mcp.json",
        editor: "Roo Code",
        key: "mcpServers",
        fix: "its `mcpServers` are a dialect aurad reads: share the file with `ln -s .roo/mcp.json mcp.json` (or copy it to mcp.json)",
        whole: true,
    },
    Other {
        file: ".zed/settings.json",
        editor: "Zed",
        key: "context_servers",
        fix: "aurad reads Zed's entries as they are, from a file of their own: copy the `context_servers` object into mcp.json as `{\"context_servers\": {...}}` (a symlink would not do: the rest of this file is Zed's settings)",
        whole: false,
    },
    Other {
        file: ".vscode/settings.json",
        editor: "VS Code",
        key: "mcp",
        fix: "VS Code also reads `.vscode/mcp.json`, and so does aurad: move what is inside `mcp` there, `{\"servers\": {...}}`, and delete the `mcp` section",
        whole: false,
    },
];

/// A warning for each other editor's MCP file in the project at `root`,
/// at the key that holds its servers (else at its start).
pub(super) fn other_editors_files(root: &Path) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    for other in &OTHERS {
        let rel = Path::new(other.file);
        let Ok(Some(bytes)) = bounds::read_bounded(&root.join(rel), rel) else {
            continue;
        };
        let Ok(text) = bounds::decode(bytes, rel) else {
            continue;
        };
        let blanked = blank_jsonc(&text);
        let key_at = serde_json::from_str::<serde_json::Value>(&blanked)
            .ok()
            .and_then(|_| json::parse(&blanked))
            .and_then(|doc| match doc.value {
                Value::Object(members) => members
                    .iter()
                    .find(|m| m.key == other.key)
                    .map(|m| m.key_offset),
                _ => None,
            });
        if key_at.is_none() && !other.whole {
            continue;
        }
        let place = key_at.map_or((1, 1), |at| offset_to_place(&blanked, at));
        found.push(Diagnostic::warning(
            rel,
            place,
            format!(
                "{}'s MCP servers, which aurad does not read (it reads the first of {}, and none exists): {}",
                other.editor,
                MCP_FILES.join(", "),
                other.fix
            ),
        ));
    }
    found
}
