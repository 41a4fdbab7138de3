//! Diagnostics: one problem found while loading the project, with its place
//! (`path:line:column`) and a message that says what to do.

use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The file, relative to the project root where possible.
    pub path: PathBuf,
    /// 1-based; 0 when the problem is about the whole file.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Diagnostic {
    pub fn error(path: &Path, (line, column): (usize, usize), message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            path: path.to_path_buf(),
            line,
            column,
            message: message.into(),
        }
    }

    pub fn warning(path: &Path, place: (usize, usize), message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(path, place, message)
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column.max(1))?;
        }
        let label = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        write!(f, ": {label}{}", self.message)
    }
}

/// The most problems reported for one list or mapping of a file (prices,
/// providers): each is located by a scan of the text, so thousands of them
/// would take quadratic time; past this many, one more diagnostic says so.
pub const MAX_LIST_ERRORS: usize = 20;

/// Finds where a (possibly nested) key's value starts in a YAML text, for
/// diagnostics raised after deserialisation. `keys` is the path from the top
/// level, e.g. `["limits", "timeout"]`. Works for block and flow style; falls
/// back to the nearest key found, then to the top of the file.
pub fn locate(text: &str, keys: &[&str]) -> (usize, usize) {
    let mut from = 0usize;
    let mut found = (1, 1);
    for key in keys {
        match find_key(text, from, key) {
            Some(offset) => {
                from = offset + key.len();
                found = offset_to_place(text, value_start(text, from));
            }
            None => break,
        }
    }
    found
}

/// Where the list item `item` of the value of `keys` starts (e.g. the
/// `"bash*"` entry of `tools:`), in block or flow style; falls back to
/// [`locate`] of `keys`.
pub fn locate_item(text: &str, keys: &[&str], item: &str) -> (usize, usize) {
    let mut from = 0usize;
    for key in keys {
        match find_key(text, from, key) {
            Some(offset) => from = offset + key.len(),
            None => return locate(text, keys),
        }
    }
    let bytes = text.as_bytes();
    let mut search = from;
    while let Some(rel) = text.get(search..).and_then(|t| t.find(item)) {
        let at = search + rel;
        let after = at + item.len();
        let before_ok = matches!(
            bytes[at - 1],
            b'[' | b',' | b' ' | b'\t' | b'-' | b'"' | b'\''
        );
        let after_ok = bytes.get(after).is_none_or(|b| {
            matches!(
                b,
                b']' | b',' | b' ' | b'\t' | b'\n' | b'\r' | b'"' | b'\'' | b'#'
            )
        });
        if before_ok && after_ok {
            return offset_to_place(text, at);
        }
        search = after;
    }
    locate(text, keys)
}

/// The offset of `key` followed by `:` at or after `from`, at a key position
/// (line start after indentation, after `{`, `,` or `- `).
fn find_key(text: &str, from: usize, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut search = from;
    while let Some(rel) = text.get(search..)?.find(key) {
        let at = search + rel;
        let after = at + key.len();
        let quoted = at > 0
            && matches!(bytes[at - 1], b'"' | b'\'')
            && bytes.get(after) == Some(&bytes[at - 1]);
        let end = if quoted { after + 1 } else { after };
        let begin = if quoted { at - 1 } else { at };
        let before_ok = text[..begin]
            .chars()
            .rev()
            .find(|c| *c != ' ' && *c != '\t')
            .is_none_or(|c| matches!(c, '\n' | '{' | ',' | '-'));
        let colon_ok = text[end..].trim_start_matches([' ', '\t']).starts_with(':');
        if before_ok && colon_ok {
            return Some(begin);
        }
        search = after;
    }
    None
}

fn value_start(text: &str, after_key: usize) -> usize {
    let rest = &text[after_key..];
    let colon = rest.find(':').map(|c| c + 1).unwrap_or(0);
    let value = &rest[colon..];
    let skipped = value.len() - value.trim_start_matches([' ', '\t', '"', '\'']).len();
    after_key + colon + skipped
}

/// Says a YAML error that libyaml or serde word vaguely in our words, at
/// its real place in `text` (1-based `place` as reported): a duplicate key
/// at its second occurrence, a control character where it stands, a second
/// document at its `---`, a tab used as indentation, an alias bomb.
pub fn explain_yaml_error(
    text: &str,
    place: (usize, usize),
    message: String,
) -> ((usize, usize), String) {
    // serde_path_to_error style: "limits: duplicate field `timeout`".
    let duplicate = ["duplicate field `", "duplicate entry with key \""]
        .iter()
        .find_map(|p| message.find(p).map(|i| (i, i + p.len())));
    if let Some((prefix_end, key_start)) = duplicate
        && let Some(key) = message[key_start..].split(['`', '"']).next()
    {
        let from = place_to_offset(text, place);
        let second =
            find_key(text, from, key).and_then(|first| find_key(text, first + key.len(), key));
        if let Some(at) = second {
            return (
                offset_to_place(text, at),
                format!(
                    "{}`{key}` is written twice in the same mapping; keep one",
                    &message[..prefix_end]
                ),
            );
        }
    }
    if message.starts_with("control characters are not allowed")
        && let Some((at, c)) = text
            .char_indices()
            .find(|(_, c)| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return (
            offset_to_place(text, at),
            format!(
                "a control character (U+{:04X}) is not allowed in YAML: remove it (is this a binary file?)",
                c as u32
            ),
        );
    }
    if message.contains("more than one document") {
        let starts_with_marker = text.starts_with("---");
        let mut markers = text
            .match_indices("---")
            .filter(|(at, _)| *at == 0 || text.as_bytes()[at - 1] == b'\n')
            .skip(usize::from(starts_with_marker));
        if let Some((at, _)) = markers.next() {
            return (
                offset_to_place(text, at),
                "a second YAML document starts here (`---`): a config file holds one document; remove the `---` line or split the file".into(),
            );
        }
    }
    if message.contains("cannot start any token") {
        let at = place_to_offset(text, place);
        if text[at..].starts_with('\t') {
            return (
                place,
                "a tab character: YAML indentation must use spaces; replace the tab with spaces"
                    .into(),
            );
        }
    }
    if message.contains("repetition limit exceeded") {
        let at = text.find('*').unwrap_or(0);
        return (
            offset_to_place(text, at),
            "YAML aliases (`*name`) here expand to too many values (an alias bomb?): write the values out or use fewer aliases".into(),
        );
    }
    (place, message)
}

/// Converts a 1-based (line, column in characters) into a byte offset,
/// clamped to the text.
fn place_to_offset(text: &str, (line, column): (usize, usize)) -> usize {
    let mut offset = 0;
    for _ in 1..line.max(1) {
        match text[offset..].find('\n') {
            Some(i) => offset += i + 1,
            None => return text.len(),
        }
    }
    let line_text = &text[offset..];
    let line_end = line_text.find('\n').unwrap_or(line_text.len());
    offset
        + line_text[..line_end]
            .char_indices()
            .nth(column.saturating_sub(1))
            .map_or(line_end, |(i, _)| i)
}

/// Converts a byte offset into a 1-based (line, column in characters).
pub fn offset_to_place(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[line_start..].chars().count() + 1)
}

/// Where each item of the block sequence under the top-level `key` starts,
/// in order; none when the sequence is not in block style.
pub(super) fn item_places(text: &str, key: &str) -> Vec<(usize, usize)> {
    let (key_line, _) = locate(text, &[key]);
    let mut indent = None;
    let mut places = Vec::new();
    for (n, line) in text.lines().enumerate().skip(key_line) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let here = line.len() - trimmed.len();
        if !trimmed.starts_with("- ") && trimmed != "-" {
            if indent.is_none_or(|i| here <= i) {
                break;
            }
            continue;
        }
        match indent {
            None => indent = Some(here),
            Some(i) if here < i => break,
            Some(i) if here > i => continue,
            Some(_) => {}
        }
        places.push((n + 1, here + 3));
    }
    places
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_errors_are_explained_where_they_are() {
        let text = "a: 1\nlimits:\n  t: 1\n  t: 2\n";
        let (place, message) =
            explain_yaml_error(text, (3, 3), "limits: duplicate field `t`".into());
        assert_eq!(place, (4, 3));
        assert_eq!(
            message,
            "limits: `t` is written twice in the same mapping; keep one"
        );
        let (place, message) = explain_yaml_error(
            "a: x\u{7}\n",
            (1, 1),
            "control characters are not allowed at position 4".into(),
        );
        assert_eq!((place, message.contains("U+0007")), ((1, 5), true));
        let (place, _) = explain_yaml_error(
            "---\na: 1\n---\nb: 2\n",
            (1, 1),
            "deserializing from YAML containing more than one document is not supported".into(),
        );
        assert_eq!(place, (3, 1));
        assert_eq!(place_to_offset("ab\ncd\n", (2, 2)), 4);
        assert_eq!(place_to_offset("ab", (9, 9)), 2);
    }

    #[test]
    fn locates_nested_block_and_flow_keys() {
        let text = "model: x\nlimits:\n  max_iterations: 3\n  timeout: 10q\n";
        assert_eq!(locate(text, &["limits", "timeout"]), (4, 12));
        let flow = "model: x\nlimits: { timeout: 5, max_tool_calls: 2 }\n";
        assert_eq!(locate(flow, &["limits", "max_tool_calls"]), (2, 39));
        assert_eq!(locate(text, &["model"]), (1, 8));
        assert_eq!(locate(text, &["nothing"]), (1, 1));
    }

    #[test]
    fn locates_list_items_in_block_and_flow_lists() {
        let block = "model: x\nprompt: bash me\ntools:\n  - read_file\n  - \"ba*\"\n";
        assert_eq!(locate_item(block, &["tools"], "ba*"), (5, 6));
        let flow = "model: x\ntools: [bashful, bash]\n";
        assert_eq!(locate_item(flow, &["tools"], "bash"), (2, 18));
        assert_eq!(locate_item(flow, &["tools"], "nope"), (2, 8));
    }

    #[test]
    fn key_inside_a_value_is_not_a_key() {
        let text = "system: \"the model: is\"\nmodel: y\n";
        assert_eq!(locate(text, &["model"]), (2, 8));
    }

    #[test]
    fn display_has_place() {
        let d = Diagnostic::error(Path::new("agents/a.yaml"), (3, 5), "bad");
        assert_eq!(d.to_string(), "agents/a.yaml:3:5: bad");
        let w = Diagnostic::warning(Path::new("aurad.yaml"), (0, 0), "hm");
        assert_eq!(w.to_string(), "aurad.yaml: warning: hm");
    }
}
