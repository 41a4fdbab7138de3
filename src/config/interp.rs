//! `${VAR}`, `${VAR:-default}` and `${VAR:?message}` interpolation of a file's
//! raw text, before it is parsed, so every diagnostic keeps its true place.
//! `$$` is a literal `$`. A substituted value can never change the file's
//! structure: in YAML it is escaped for the kind of scalar it stands in
//! (double-quoted, single-quoted, block), refused in an unquoted scalar when
//! it holds characters YAML would read as structure, and refused anywhere it
//! would add a line; comments are left alone. In JSON (`mcp.json`) it is
//! escaped as the inside of a string. Variables are read through a lookup
//! function, never from global state.

use std::cell::RefCell;
use std::collections::BTreeSet;

/// A variable lookup that remembers the variables it gave a value for: the
/// variables a load substituted into its files, whose values the daemon
/// redacts as secrets (`registry::secrets`). Only names are kept, never
/// values.
pub struct RecordingLookup<'a> {
    inner: &'a dyn Fn(&str) -> Option<String>,
    used: RefCell<BTreeSet<String>>,
}

impl<'a> RecordingLookup<'a> {
    pub fn new(inner: &'a dyn Fn(&str) -> Option<String>) -> Self {
        RecordingLookup {
            inner,
            used: RefCell::new(BTreeSet::new()),
        }
    }

    /// Looks `name` up, remembering it when it has a (non-empty) value.
    pub fn lookup(&self, name: &str) -> Option<String> {
        let value = (self.inner)(name);
        if value.as_deref().is_some_and(|v| !v.is_empty()) {
            self.used.borrow_mut().insert(name.to_string());
        }
        value
    }

    /// The variables looked up with a value so far.
    pub fn names(&self) -> BTreeSet<String> {
        self.used.borrow().clone()
    }
}

/// One interpolation problem, at a 1-based (line, column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Interpolates a YAML text.
pub fn interpolate(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<InterpError>> {
    interpolate_with(text, lookup, Escape::Yaml)
}

/// The syntax of the text being interpolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// YAML: values are escaped for the scalar they stand in.
    Yaml,
    /// JSON, where `${VAR}` only stands inside strings: values are written
    /// as the inside of a JSON string.
    JsonString,
}

/// Where in a YAML line a reference stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Plain,
    DoubleQuoted,
    SingleQuoted,
    /// Inside a `|` or `>` block scalar.
    Block,
    Comment,
    Json,
}

pub fn interpolate_with(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    escape: Escape,
) -> Result<String, Vec<InterpError>> {
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    // The indentation of the key that opened the block scalar we are in.
    let mut block: Option<usize> = None;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let blank = line.trim().is_empty();
        if let Some(open) = block
            && !blank
            && indent <= open
        {
            block = None;
        }
        let in_block = block.is_some() && escape != Escape::JsonString;
        if !in_block && escape != Escape::JsonString && is_block_header(line) {
            block = Some(indent);
        }
        let full_line_comment = !in_block && line.trim_start().starts_with('#');
        if full_line_comment || !line.contains('$') {
            out.push_str(line);
            continue;
        }
        interpolate_line(
            line,
            index + 1,
            lookup,
            escape,
            in_block,
            &mut out,
            &mut errors,
        );
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// Does this YAML line end with a block scalar indicator (`key: |`, `- >-`,
/// `key: |2 # note`)?
pub fn is_block_header(line: &str) -> bool {
    let code = strip_comment(line).trim_end();
    let Some(at) = code.rfind(['|', '>']) else {
        return false;
    };
    let (before, indicator) = code.split_at(at);
    let before = before.trim_end();
    let opens = before.ends_with(':') || before.ends_with('-') || before.is_empty();
    opens
        && indicator[1..]
            .chars()
            .all(|c| matches!(c, '+' | '-' | '1'..='9'))
        && indicator[1..].len() <= 2
}

/// The line without a trailing `# comment` (outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut context = Context::Plain;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        context = step(context, prev, c);
        if context == Context::Comment {
            return &line[..i];
        }
        prev = c;
    }
    line
}

/// Advances the quoting state of a YAML line by one character.
fn step(context: Context, prev: char, c: char) -> Context {
    match (context, c) {
        (Context::Plain, '"') => Context::DoubleQuoted,
        (Context::Plain, '\'') => Context::SingleQuoted,
        (Context::Plain, '#') if prev == ' ' || prev == '\t' => Context::Comment,
        (Context::DoubleQuoted, '"') if prev != '\\' => Context::Plain,
        (Context::SingleQuoted, '\'') => Context::Plain,
        (other, _) => other,
    }
}

/// The context at byte `at` of `line`.
fn context_at(line: &str, at: usize, in_block: bool, escape: Escape) -> Context {
    if escape == Escape::JsonString {
        return Context::Json;
    }
    if in_block {
        return Context::Block;
    }
    let mut context = Context::Plain;
    let mut prev = ' ';
    for c in line[..at].chars() {
        // A quote only opens a scalar where a value starts, not inside a word.
        let opens_quote = matches!(c, '"' | '\'') && context == Context::Plain;
        if opens_quote
            && !(prev == ' '
                || prev == ':'
                || prev == '['
                || prev == '{'
                || prev == ','
                || prev == '-')
        {
            prev = c;
            continue;
        }
        context = step(context, prev, c);
        if context == Context::Comment {
            return Context::Comment;
        }
        prev = c;
    }
    context
}

/// Writes `value` for `context`, or says why it cannot stand there.
fn escaped(value: &str, context: Context, reference: &str) -> Result<String, String> {
    let adds_line = || {
        format!(
            "the value of `${{{reference}}}` contains a line break, which would change the file's structure; use a single-line value"
        )
    };
    match context {
        Context::Json => {
            let quoted = serde_json::to_string(value).unwrap_or_default();
            Ok(quoted[1..quoted.len() - 1].to_string())
        }
        Context::DoubleQuoted => {
            let quoted = serde_json::to_string(value).unwrap_or_default();
            Ok(quoted[1..quoted.len() - 1].to_string())
        }
        Context::SingleQuoted if value.contains(['\n', '\r']) => Err(adds_line()),
        Context::SingleQuoted => Ok(value.replace('\'', "''")),
        Context::Block | Context::Plain if value.contains(['\n', '\r']) => Err(adds_line()),
        Context::Block => Ok(value.to_string()),
        Context::Plain if !plain_safe(value) => Err(format!(
            "the value of `${{{reference}}}` has characters YAML would read as structure in an unquoted value; put the reference in double quotes, e.g. key: \"${{{reference}}}\""
        )),
        Context::Plain | Context::Comment => Ok(value.to_string()),
    }
}

/// Can `value` stand in an unquoted YAML scalar without changing its meaning?
fn plain_safe(value: &str) -> bool {
    let starts_ok = !value.starts_with([
        '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@',
        '`', ' ', '\t',
    ]);
    starts_ok
        && !value.ends_with([' ', '\t', ':'])
        && !value.contains(": ")
        && !value.contains(" #")
        && !value.contains(['\t', ',', '[', ']', '{', '}'])
}

fn interpolate_line(
    line: &str,
    line_no: usize,
    lookup: &dyn Fn(&str) -> Option<String>,
    escape: Escape,
    in_block: bool,
    out: &mut String,
    errors: &mut Vec<InterpError>,
) {
    let mut rest = line;
    let mut consumed_chars = 0usize;
    while let Some(pos) = rest.find('$') {
        let at = line.len() - rest.len() + pos;
        let context = context_at(line, at, in_block, escape);
        if context == Context::Comment {
            break;
        }
        out.push_str(&rest[..pos]);
        let column = consumed_chars + rest[..pos].chars().count() + 1;
        let after = &rest[pos + 1..];
        let mut error = |message: String| {
            errors.push(InterpError {
                line: line_no,
                column,
                message,
            })
        };
        let advance = if after.starts_with('$') {
            out.push('$');
            2
        } else if let Some(body) = after.strip_prefix('{') {
            match body.find('}') {
                None => {
                    error("unclosed `${`: write `${NAME}`, or `$$` for a literal `$`".into());
                    out.push('$');
                    1
                }
                Some(close) => {
                    let reference = &body[..close];
                    match expand(reference, lookup)
                        .and_then(|value| escaped(&value, context, reference))
                    {
                        Ok(value) => out.push_str(&value),
                        Err(message) => error(message),
                    }
                    close + 3
                }
            }
        } else {
            out.push('$');
            1
        };
        consumed_chars += rest[..pos + advance].chars().count();
        rest = &rest[pos + advance..];
    }
    out.push_str(rest);
}

fn expand(expr: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    expand_variable(expr, expr, "${NAME}", lookup)
}

/// Expands `NAME`, `NAME:-default` or `NAME:?message` (the inside of a
/// `${...}` reference) from `lookup`; an empty value counts as unset.
/// `shown` is the reference as the file wrote it and `forms` the reference
/// forms the file's format allows, for the error messages.
pub(crate) fn expand_variable(
    expr: &str,
    shown: &str,
    forms: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let (name, op, arg) = match expr.find(":-").or_else(|| expr.find(":?")) {
        Some(i) => (&expr[..i], &expr[i..i + 2], &expr[i + 2..]),
        None => (expr, "", ""),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "`${{{shown}}}` is not a valid variable reference: use {forms}, ${{NAME:-default}} or ${{NAME:?message}}"
        ));
    }
    match (lookup(name).filter(|v| !v.is_empty()), op) {
        (Some(v), _) => Ok(v),
        (None, ":-") => Ok(arg.to_string()),
        (None, ":?") if !arg.is_empty() => {
            Err(format!("environment variable {name} is not set: {arg}"))
        }
        (None, _) => Err(format!(
            "environment variable {name} is not set (`${{{shown}}}`); set it, or write ${{{name}:-default}}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME_DIR" => Some("/home/x".into()),
            "EMPTY" => Some(String::new()),
            "MULTI" => Some("a\nb".into()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_and_defaults() {
        let text = "a: ${HOME_DIR}/x\nb: ${NOPE:-fallback}\nc: $$5 and ${EMPTY:-d}\n";
        assert_eq!(
            interpolate(text, &env).unwrap(),
            "a: /home/x/x\nb: fallback\nc: $5 and d\n"
        );
    }

    #[test]
    fn reports_every_missing_variable_with_its_place() {
        let text = "a: ${ONE}\n# ${IGNORED}\nb: x ${TWO:?set TWO to your key}\n";
        let errors = interpolate(text, &env).unwrap_err();
        assert_eq!(errors.len(), 2);
        assert_eq!((errors[0].line, errors[0].column), (1, 4));
        assert!(errors[0].message.contains("ONE is not set"));
        assert_eq!((errors[1].line, errors[1].column), (3, 6));
        assert!(errors[1].message.ends_with("set TWO to your key"));
    }

    #[test]
    fn rejects_newlines_bad_names_and_unclosed() {
        let errors = interpolate("a: ${MULTI}\nb: ${1X}\nc: ${OPEN\n", &env).unwrap_err();
        let messages: Vec<_> = errors.iter().map(|e| e.message.as_str()).collect();
        assert!(messages[0].contains("line break"));
        assert!(messages[1].contains("not a valid variable reference"));
        assert!(messages[2].contains("unclosed"));
    }

    fn with(value: &'static str) -> impl Fn(&str) -> Option<String> {
        move |_| Some(value.to_string())
    }

    #[test]
    fn values_are_escaped_for_their_yaml_scalar() {
        let text = "a: \"Bearer ${T}\"\nb: 'it${T}'\nc: ${T}\n";
        let out = interpolate(text, &with("x\"y'z #c")).unwrap_err();
        // Plain `c` refuses the quote; the quoted ones are escaped.
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].line, out[0].column), (3, 4));
        assert!(
            out[0]
                .message
                .contains("put the reference in double quotes")
        );
        let out = interpolate("a: \"Bearer ${T}\"\nb: 'it${T}'\n", &with("x\"y'z #c")).unwrap();
        let v: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
        assert_eq!(v["a"].as_str(), Some("Bearer x\"y'z #c"));
        assert_eq!(v["b"].as_str(), Some("itx\"y'z #c"));
    }

    #[test]
    fn structure_characters_are_refused_unquoted() {
        for bad in ["abc #1", "a, b: c", "{x}", "- item", "key: v"] {
            let e = interpolate("k: ${V}\n", &with(bad)).unwrap_err();
            assert!(e[0].message.contains("double quotes"), "{bad}");
        }
        for good in ["sk-abc123", "http://localhost:8080/v1", "a b c", "x=1&y=2"] {
            assert_eq!(
                interpolate("k: ${V}\n", &with(good)).unwrap(),
                format!("k: {good}\n")
            );
        }
    }

    #[test]
    fn block_scalars_take_values_as_text_and_comments_are_left_alone() {
        let text = "system: |-\n  # Heading ${V}\n  use: ${V}, always\nother: 1 # ${MISSING}\n";
        let out = interpolate(text, &with("a, b: #c")).unwrap();
        assert_eq!(
            out,
            "system: |-\n  # Heading a, b: #c\n  use: a, b: #c, always\nother: 1 # ${MISSING}\n"
        );
        assert!(is_block_header("key: |2 # note\n"));
        assert!(is_block_header("- >-\n"));
        assert!(!is_block_header("key: a|b\n"));
        assert!(!is_block_header("key: \"|\"\n"));
    }

    #[test]
    fn json_escaping_keeps_the_document_valid() {
        let env = |_: &str| Some("a \"quoted\" \\ value".to_string());
        let text = interpolate_with("{\"k\": \"${X}\"}", &env, Escape::JsonString).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["k"], "a \"quoted\" \\ value");
    }

    #[test]
    fn recording_lookup_keeps_the_names_substituted() {
        let recording = RecordingLookup::new(&env);
        let text = "a: ${HOME_DIR}\nb: ${NOPE:-x}\nc: ${EMPTY:-y}\n# ${MULTI}\n";
        interpolate(text, &|n| recording.lookup(n)).unwrap();
        assert_eq!(recording.names(), BTreeSet::from(["HOME_DIR".to_string()]));
    }

    #[test]
    fn columns_count_characters_after_substitution() {
        let errors = interpolate("é: ${HOME_DIR} ${MISSING}\n", &env).unwrap_err();
        assert_eq!((errors[0].line, errors[0].column), (1, 16));
    }
}
