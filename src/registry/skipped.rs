//! Per-file isolation: which item of the project each error belongs to, so
//! a broken file leaves out only what it defines. An agent file
//! (`agents/NAME.yaml`), a skill (`…skills/NAME/SKILL.md`), a tool plugin
//! (`tools.d/NAME.yaml`) and an MCP server entry (the entry of `mcp.json`
//! whose lines hold the error; the whole file when the error is outside
//! every entry, e.g. invalid JSON) are items. Every other error is
//! *atomic*: `aurad.yaml` (providers, prices and limits every agent
//! depends on) and a directory that cannot be read (which would otherwise
//! drop every item in it at once); such an error rejects the whole load.
//!
//! May depend on `config` only.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use serde::Serialize;

use crate::config::Diagnostic;

/// What kind of item a load left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    Agent,
    Skill,
    Plugin,
    Channel,
    McpServer,
    /// A whole MCP configuration file (it could not be read as a whole, or
    /// has an error outside every server entry).
    McpFile,
}

impl ItemKind {
    pub const ALL: [ItemKind; 6] = [
        ItemKind::Agent,
        ItemKind::Skill,
        ItemKind::Plugin,
        ItemKind::Channel,
        ItemKind::McpServer,
        ItemKind::McpFile,
    ];

    /// The word used in logs, `/v1/status` and the metric's `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Agent => "agent",
            ItemKind::Skill => "skill",
            ItemKind::Plugin => "plugin",
            ItemKind::Channel => "channel",
            ItemKind::McpServer => "mcp_server",
            ItemKind::McpFile => "mcp_file",
        }
    }
}

/// One item left out because of its errors (or, for an agent, kept at its
/// last good version).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedItem {
    pub kind: ItemKind,
    /// The agent, skill, plugin or server name; the file for
    /// [`ItemKind::McpFile`].
    pub name: String,
    /// Its first error: where it is and what to do.
    #[serde(flatten)]
    pub error: ErrorPlace,
    /// How many errors the item has in all.
    pub errors: usize,
    /// An agent whose last good version keeps serving.
    pub stale: bool,
}

/// A located error, as `/v1/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorPlace {
    pub path: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl From<&Diagnostic> for ErrorPlace {
    fn from(d: &Diagnostic) -> Self {
        ErrorPlace {
            path: d.path.display().to_string(),
            line: d.line,
            column: d.column,
            message: d.message.clone(),
        }
    }
}

impl ErrorPlace {
    /// `path:line:column: message`, as diagnostics print.
    pub fn located(&self) -> String {
        Diagnostic::error(
            Path::new(&self.path),
            (self.line, self.column),
            self.message.clone(),
        )
        .to_string()
    }
}

impl SkippedItem {
    /// One log line: what was left out (or kept stale) and its first error.
    pub fn log_line(&self) -> String {
        let what = if self.stale {
            format!(
                "kept the last good version of {} `{}`",
                self.kind.as_str(),
                self.name
            )
        } else {
            format!("skipped {} `{}`", self.kind.as_str(), self.name)
        };
        let more = match self.errors {
            0 | 1 => String::new(),
            n => format!(
                " (and {} more error(s); `aurad validate` lists them)",
                n - 1
            ),
        };
        format!("{what}: {}{more}", self.error.located())
    }

    /// How an agent that needs this item is told about it.
    pub fn reason(&self) -> String {
        format!(
            "{} `{}`, which is skipped because of its errors ({})",
            self.kind.as_str(),
            self.name,
            self.error.located()
        )
    }
}

/// Whom an error belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Item(ItemKind, String),
    /// Rejects the whole load.
    Atomic,
}

/// The names of what a load took, to tell an error of a left-out MCP entry
/// from one of an entry that loaded.
#[derive(Debug, Default)]
pub struct LoadedNames<'a> {
    pub mcp_servers: BTreeSet<&'a str>,
}

/// The items `diagnostics`' errors leave out, in kind and name order, each
/// with its first error. Files are read from `root` (MCP files, to find
/// which entry an error is in).
pub fn skipped_items(
    root: &Path,
    diagnostics: &[Diagnostic],
    loaded: &LoadedNames,
) -> Vec<SkippedItem> {
    let mut entries = McpEntries::default();
    let mut items: Vec<SkippedItem> = Vec::new();
    for d in diagnostics.iter().filter(|d| d.is_error()) {
        let Owner::Item(kind, name) = owner(root, d, loaded, &mut entries) else {
            continue;
        };
        match items.iter_mut().find(|i| i.kind == kind && i.name == name) {
            Some(item) => item.errors += 1,
            None => items.push(SkippedItem {
                kind,
                name,
                error: ErrorPlace::from(d),
                errors: 1,
                stale: false,
            }),
        }
    }
    items.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    items
}

/// The errors that belong to no single item: any of them rejects the whole
/// load.
pub fn atomic_errors(diagnostics: &[Diagnostic]) -> Vec<&Diagnostic> {
    diagnostics
        .iter()
        .filter(|d| d.is_error() && item_of_path(&d.path).is_none())
        .collect()
}

fn owner(root: &Path, d: &Diagnostic, loaded: &LoadedNames, entries: &mut McpEntries) -> Owner {
    match item_of_path(&d.path) {
        Some(PathItem::Named(kind, name)) => Owner::Item(kind, name),
        Some(PathItem::McpFile) => {
            let file = d.path.display().to_string();
            match entries.entry_at(root, &d.path, d.line) {
                Some(name) if !loaded.mcp_servers.contains(name.as_str()) => {
                    Owner::Item(ItemKind::McpServer, name)
                }
                _ => Owner::Item(ItemKind::McpFile, file),
            }
        }
        None => Owner::Atomic,
    }
}

enum PathItem {
    Named(ItemKind, String),
    McpFile,
}

/// The item a file defines, by its path relative to the project root.
fn item_of_path(path: &Path) -> Option<PathItem> {
    let parts: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let yaml_stem = |file: &str| {
        let (stem, ext) = file.rsplit_once('.')?;
        matches!(ext, "yaml" | "yml").then(|| stem.to_string())
    };
    match parts.as_slice() {
        ["agents", file] => yaml_stem(file).map(|n| PathItem::Named(ItemKind::Agent, n)),
        ["tools.d", file] => yaml_stem(file).map(|n| PathItem::Named(ItemKind::Plugin, n)),
        ["channels", file] => yaml_stem(file).map(|n| PathItem::Named(ItemKind::Channel, n)),
        [.., last] if last.ends_with("mcp.json") => Some(PathItem::McpFile),
        _ => {
            // `skills/NAME/...`, `.agents/skills/NAME/...`, `.claude/skills/NAME/...`
            let at = parts.iter().rposition(|p| *p == "skills")?;
            let name = parts.get(at + 1)?;
            Some(PathItem::Named(ItemKind::Skill, name.to_string()))
        }
    }
}

/// The server entries of MCP files, read once per file: `(name, first
/// line, last line)`.
#[derive(Default)]
struct McpEntries {
    files: Vec<(std::path::PathBuf, Vec<Entry>)>,
}

/// A server entry of an MCP file: its name and the lines it spans.
type Entry = (String, usize, usize);

impl McpEntries {
    /// The entry whose lines hold `line` of `file`, if any.
    fn entry_at(&mut self, root: &Path, file: &Path, line: usize) -> Option<String> {
        if line == 0 {
            return None;
        }
        let entries = match self.files.iter().position(|(f, _)| f == file) {
            Some(i) => &self.files[i].1,
            None => {
                let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
                let at = self.files.len();
                self.files.push((file.to_path_buf(), server_entries(&text)));
                &self.files[at].1
            }
        };
        entries
            .iter()
            .find(|(_, first, last)| (*first..=*last).contains(&line))
            .map(|(name, _, _)| name.clone())
    }
}

/// The server entries of an MCP configuration text, whatever its dialect:
/// the members of every top-level object whose values are all objects
/// (`mcpServers`, a `servers` map, `context_servers`), and the items with a
/// string `name` of every top-level array (`servers: [...]`); each with the
/// lines from its name (or its `{`) to its closing `}`. Unreadable JSON
/// has none.
fn server_entries(text: &str) -> Vec<Entry> {
    let blanked = crate::config::mcp::blank_jsonc(text);
    let text = blanked.as_str();
    let Ok(serde_json::Value::Object(top)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let mut names: Vec<(String, bool)> = Vec::new();
    for value in top.values() {
        match value {
            serde_json::Value::Object(map) if map.values().all(|v| v.is_object()) => {
                names.extend(map.keys().map(|k| (k.clone(), true)));
            }
            serde_json::Value::Array(items) => names.extend(
                items
                    .iter()
                    .filter_map(|i| i.get("name")?.as_str())
                    .map(|n| (n.to_string(), false)),
            ),
            _ => {}
        }
    }
    let objects = object_spans(text);
    let line = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut entries: Vec<Entry> = names
        .into_iter()
        .filter_map(|(name, is_key)| {
            let quoted = serde_json::to_string(&name).ok()?;
            let (first, end) = if is_key {
                // `"NAME": { ... }`: from the name to its object's end.
                let at = find_followed(text, &quoted, ':')?;
                let (_, end) = objects.iter().find(|(start, _)| *start > at)?;
                (at, *end)
            } else {
                // `{ ..., "name": "NAME", ... }`: the innermost object.
                let at = find_name_field(text, &quoted)?;
                *objects
                    .iter()
                    .filter(|(start, end)| *start < at && at < *end)
                    .max_by_key(|(start, _)| *start)?
            };
            Some((name, line(first), line(end)))
        })
        .collect();
    entries.sort_by_key(|(_, first, _)| *first);
    entries
}

/// The `(start, end)` offsets of every `{ ... }` of a JSON text, strings
/// skipped.
fn object_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut open = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => open.push(at),
            '}' => {
                if let Some(start) = open.pop() {
                    spans.push((start, at));
                }
            }
            _ => {}
        }
    }
    spans.sort_unstable();
    spans
}

/// The offset of the first `needle` followed (after blanks) by `next`.
fn find_followed(text: &str, needle: &str, next: char) -> Option<usize> {
    text.match_indices(needle)
        .find(|(at, _)| text[at + needle.len()..].trim_start().starts_with(next))
        .map(|(at, _)| at)
}

/// The offset of the first `"name": <quoted>`.
fn find_name_field(text: &str, quoted: &str) -> Option<usize> {
    text.match_indices("\"name\"").find_map(|(at, key)| {
        let rest = text[at + key.len()..].trim_start().strip_prefix(':')?;
        rest.trim_start().starts_with(quoted).then_some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(path: &str, line: usize, message: &str) -> Diagnostic {
        Diagnostic::error(Path::new(path), (line, 1), message)
    }

    #[test]
    fn errors_belong_to_the_item_their_file_defines() {
        let dir = tempfile::tempdir().unwrap();
        let diags = vec![
            error("agents/a.yaml", 3, "bad"),
            error("agents/a.yaml", 4, "worse"),
            error(".claude/skills/s/SKILL.md", 2, "no description"),
            error("tools.d/t.yml", 1, "no command"),
            Diagnostic::warning(Path::new("agents/w.yaml"), (1, 1), "just a warning"),
        ];
        let items = skipped_items(dir.path(), &diags, &LoadedNames::default());
        let seen: Vec<(&str, &str, usize)> = items
            .iter()
            .map(|i| (i.kind.as_str(), i.name.as_str(), i.errors))
            .collect();
        assert_eq!(
            seen,
            [("agent", "a", 2), ("skill", "s", 1), ("plugin", "t", 1)]
        );
        assert_eq!(
            items[0].log_line(),
            "skipped agent `a`: agents/a.yaml:3:1: bad (and 1 more error(s); `aurad validate` lists them)"
        );
        assert!(atomic_errors(&diags).is_empty());
    }

    #[test]
    fn settings_and_directory_errors_are_atomic() {
        let diags = vec![
            error("aurad.yaml", 2, "bad provider"),
            Diagnostic::error(Path::new("agents"), (0, 0), "cannot read the directory"),
            Diagnostic::error(Path::new("skills"), (0, 0), "cannot read"),
            error("agents/a.yaml", 1, "bad"),
        ];
        let atomic: Vec<String> = atomic_errors(&diags)
            .iter()
            .map(|d| d.path.display().to_string())
            .collect();
        assert_eq!(atomic, ["aurad.yaml", "agents", "skills"]);
    }

    #[test]
    fn an_mcp_error_belongs_to_the_entry_whose_lines_hold_it() {
        let dir = tempfile::tempdir().unwrap();
        let text = "{\n  \"mcpServers\": {\n    \"good\": { \"command\": \"x\" },\n    \"bad\": {\n      \"comand\": \"y\"\n    }\n  },\n  \"extra\": 1\n}\n";
        std::fs::write(dir.path().join("mcp.json"), text).unwrap();
        let loaded = LoadedNames {
            mcp_servers: ["good"].into(),
        };
        let diags = vec![
            error("mcp.json", 5, "unknown field `comand`"),
            error("mcp.json", 8, "unknown field `extra`"),
        ];
        let items = skipped_items(dir.path(), &diags, &loaded);
        let seen: Vec<(ItemKind, &str)> = items.iter().map(|i| (i.kind, i.name.as_str())).collect();
        assert_eq!(
            seen,
            [
                (ItemKind::McpServer, "bad"),
                (ItemKind::McpFile, "mcp.json")
            ]
        );
        let list = "{\"servers\": [\n {\"name\": \"one\", \"command\": \"a\"},\n {\"name\": \"two\", \"url\": 5}\n]}";
        assert_eq!(
            server_entries(list),
            [("one".to_string(), 2, 2), ("two".to_string(), 3, 3)]
        );
        assert_eq!(
            server_entries(text),
            [("good".to_string(), 3, 3), ("bad".to_string(), 4, 6)]
        );
        assert!(server_entries("{ not json").is_empty());
    }
}
