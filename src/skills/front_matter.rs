//! The YAML front matter of a `SKILL.md` as written: the six fields of the
//! Agent Skills specification, aurad's `hidden`, and Claude Code's
//! `disable-model-invocation`, read leniently the way real clients write
//! them (`allowed-tools` as a list or a space- or comma-separated string,
//! booleans as `yes`/`no`/`on`/`off`/`1`/`0` too, `metadata` values of any
//! scalar type). Also the spec client guide's repair for unquoted values
//! containing `: `. Pure functions over text; depends on serde and
//! serde_yaml only.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

/// The fields aurad reads; every other key is kept by name only (see
/// [`keys`]) and reported as not used.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FrontMatter {
    pub name: Option<String>,
    pub description: Option<String>,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    #[serde(default, deserialize_with = "metadata")]
    pub metadata: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "tool_list")]
    pub allowed_tools: Vec<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub hidden: Option<bool>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub disable_model_invocation: Option<bool>,
}

/// The keys [`FrontMatter`] reads.
pub const KNOWN_KEYS: [&str; 8] = [
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "hidden",
    "disable-model-invocation",
];

/// The top-level keys of a front matter that parsed as a mapping, in file
/// order (non-string keys written as YAML).
pub fn keys(yaml: &str) -> Vec<String> {
    let Ok(serde_yaml::Value::Mapping(map)) = serde_yaml::from_str(yaml) else {
        return Vec::new();
    };
    map.keys()
        .map(|k| match k {
            serde_yaml::Value::String(s) => s.clone(),
            other => serde_yaml::to_string(other)
                .unwrap_or_default()
                .trim()
                .to_string(),
        })
        .collect()
}

/// The spec client guide's repair for YAML that does not parse: a top-level
/// `key: value` line whose plain (unquoted) value contains `: ` is rewritten
/// with the value double-quoted. Returns the repaired text and the 1-based
/// lines (of the front matter) that were changed, or `None` when no line
/// needed it.
pub fn repair_colons(yaml: &str) -> Option<(String, Vec<usize>)> {
    let mut changed = Vec::new();
    let mut out = String::with_capacity(yaml.len() + 16);
    for (i, line) in yaml.split_inclusive('\n').enumerate() {
        match quoted_line(line) {
            Some(fixed) => {
                changed.push(i + 1);
                out.push_str(&fixed);
            }
            None => out.push_str(line),
        }
    }
    (!changed.is_empty()).then_some((out, changed))
}

/// `line` with its plain value double-quoted, when it is a top-level
/// `key: value` line whose value contains `: ` and is not already quoted,
/// a block scalar, a flow collection, an anchor, alias or tag, or a comment.
fn quoted_line(line: &str) -> Option<String> {
    let content = line.trim_end_matches(['\n', '\r']);
    let ending = &line[content.len()..];
    if content.starts_with([' ', '\t', '#', '-']) {
        return None;
    }
    let (key, value) = content.split_once(": ")?;
    if key.is_empty() || key.contains(['"', '\'', '{', '[']) {
        return None;
    }
    let value = value.trim();
    if !value.contains(": ")
        || value.starts_with(['"', '\'', '|', '>', '{', '[', '&', '*', '!', '#'])
    {
        return None;
    }
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    Some(format!("{key}: \"{escaped}\"{ending}"))
}

/// A boolean written as YAML 1.2 does (`true`/`false`) or as Claude Code
/// also accepts (`yes`/`no`, `on`/`off`, `1`/`0`, any case).
fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    struct LenientBool;
    impl Visitor<'_> for LenientBool {
        type Value = Option<bool>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a boolean (true/false, yes/no, on/off, 1/0)")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            match v {
                0 => Ok(Some(false)),
                1 => Ok(Some(true)),
                _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Ok(Some(true)),
                "false" | "no" | "off" | "0" => Ok(Some(false)),
                _ => Err(E::invalid_type(de::Unexpected::Str(v), &self)),
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(LenientBool)
}

/// `allowed-tools`: the spec's space-separated string, Claude Code's
/// comma-separated string, or a YAML list of strings.
fn tool_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct ToolList;
    impl<'de> Visitor<'de> for ToolList {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a tool list: a space-separated string or a list of strings")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(split_tools(v))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut tools = Vec::new();
            while let Some(tool) = seq.next_element::<String>()? {
                tools.extend(split_tools(&tool));
            }
            Ok(tools)
        }
    }
    d.deserialize_any(ToolList)
}

/// The tools of one `allowed-tools` string. Separators are spaces and commas
/// outside parentheses, so `Bash(git add:*)` stays one tool.
fn split_tools(text: &str) -> Vec<String> {
    let mut tools = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c.is_whitespace() || c == ',') {
            if !current.is_empty() {
                tools.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        tools.push(current);
    }
    tools
}

/// `metadata`: a mapping whose values are kept as text (numbers and
/// booleans as written; lists and mappings as their JSON text).
fn metadata<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let map: Option<BTreeMap<String, serde_yaml::Value>> = Option::deserialize(d)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_yaml::Value::String(s) => s,
                serde_yaml::Value::Null => String::new(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                serde_yaml::Value::Number(n) => n.to_string(),
                other => serde_json::to_string(&other).unwrap_or_default(),
            };
            (k, text)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> FrontMatter {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn tool_lists_in_every_shape() {
        assert_eq!(
            parse("allowed-tools: Bash(git add:*) Read").allowed_tools,
            ["Bash(git add:*)", "Read"]
        );
        assert_eq!(
            parse("allowed-tools: Read, Grep").allowed_tools,
            ["Read", "Grep"]
        );
        assert_eq!(
            parse("allowed-tools: [Read, Grep]").allowed_tools,
            ["Read", "Grep"]
        );
        assert!(parse("allowed-tools:").allowed_tools.is_empty());
        let err = serde_yaml::from_str::<FrontMatter>("allowed-tools: {a: 1}").unwrap_err();
        assert!(err.to_string().contains("a tool list"), "{err}");
    }

    #[test]
    fn booleans_as_claude_code_writes_them() {
        for yes in ["true", "yes", "On", "1"] {
            assert_eq!(parse(&format!("hidden: {yes}")).hidden, Some(true), "{yes}");
        }
        for no in ["false", "no", "OFF", "0"] {
            let fm = parse(&format!("disable-model-invocation: {no}"));
            assert_eq!(fm.disable_model_invocation, Some(false), "{no}");
        }
        let err = serde_yaml::from_str::<FrontMatter>("hidden: maybe").unwrap_err();
        assert!(err.to_string().contains("expected a boolean"), "{err}");
    }

    #[test]
    fn metadata_values_become_text() {
        let fm = parse("metadata: {author: me, version: 1.5, beta: true, tags: [a]}");
        assert_eq!(fm.metadata["author"], "me");
        assert_eq!(fm.metadata["version"], "1.5");
        assert_eq!(fm.metadata["beta"], "true");
        assert_eq!(fm.metadata["tags"], "[\"a\"]");
    }

    #[test]
    fn keys_in_file_order() {
        assert_eq!(
            keys("name: a\nmodel: x\nhooks: {}\n"),
            ["name", "model", "hooks"]
        );
        assert!(keys("- a\n").is_empty());
    }

    #[test]
    fn colon_repair_quotes_plain_values_only() {
        let yaml = "name: a\ndescription: Use when: things break\nlicense: 'x: y'\n";
        let (fixed, lines) = repair_colons(yaml).unwrap();
        assert_eq!(lines, [2]);
        assert_eq!(
            fixed,
            "name: a\ndescription: \"Use when: things break\"\nlicense: 'x: y'\n"
        );
        assert_eq!(parse(&fixed).description.unwrap(), "Use when: things break");
        assert!(repair_colons("name: a\ndescription: fine\n").is_none());
        assert!(repair_colons("a:\n  b: c: d\n").is_none());
    }
}
