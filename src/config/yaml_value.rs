//! Naming YAML values and placing YAML errors for diagnostics: the helpers
//! every config file parser shares (agents, limits, triggers, prices,
//! settings, plugins, skills). A leaf of `config`: depends on `diag` and `suggest` only,
//! so the parsers that use it do not depend on each other.

use std::path::Path;

use serde_yaml::Value;

use super::diag::{Diagnostic, explain_yaml_error};

/// A YAML value named for an error message.
pub fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "empty".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

/// A serde/YAML error in `text` as a diagnostic at its place, without
/// serde's own "at line X column Y" suffix. Errors libyaml or serde report
/// without a useful place or in their own words (a duplicate key, a
/// control character, a second document, a tab, an alias bomb) are located
/// in the text and said in ours.
pub fn yaml_diagnostic(path: &Path, text: &str, e: &serde_yaml::Error) -> Diagnostic {
    let place = e
        .location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((1, 1));
    let mut message = e.to_string();
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    let (place, message) = explain_yaml_error(text, place, message);
    let message = super::suggest::unknown_field(&message);
    Diagnostic::error(path, within_text(text, place), message)
}

/// `place` moved back onto the text's last line when the YAML parser
/// reports one past it (an end of input met after a comment with no final
/// line break), so an editor can jump to it.
fn within_text(text: &str, (line, column): (usize, usize)) -> (usize, usize) {
    let lines = text.split('\n').count();
    if line <= lines {
        return (line, column);
    }
    let last = text.rsplit('\n').next().unwrap_or("");
    (lines, last.chars().count() + 1)
}
