//! Reading aura-agent's memories for `aurad memory import`: its
//! `memories.json` (a JSON array of `{content, category, importance,
//! createdAt, updatedAt, accessCount}` plus optional `id` and `metadata`) or
//! JSON Lines (one such object per line; snake_case names are accepted too).
//! Pure: text in, [`NewMemory`] values or every problem found out. Depends
//! on nothing but `serde_json` and [`score::parse_time`].

use serde_json::{Map, Value};

use super::{DEFAULT_CATEGORY, DEFAULT_IMPORTANCE, NewMemory};
use crate::store::memory_score as score;

/// Most problems reported before giving up on a file.
const MAX_PROBLEMS: usize = 20;

/// The file format that was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    JsonArray,
    JsonLines,
}

/// Parses `text` (format detected from its first non-blank character: `[`
/// for an array, else JSON Lines) into memories of `namespace`. On failure
/// returns every problem found (at most 20), each naming the entry index
/// (array) or line number (JSON Lines) and the field.
pub fn parse(text: &str, namespace: &str) -> Result<(Format, Vec<NewMemory>), Vec<String>> {
    let text = text.trim_start_matches('\u{feff}');
    let trimmed = text.trim_start();
    let mut problems = Vec::new();
    let mut out = Vec::new();
    if trimmed.starts_with('[') {
        let items: Vec<Value> = serde_json::from_str(trimmed).map_err(|e| {
            vec![format!(
                "not a valid JSON array ({e}); give aura-agent's memories.json or JSON Lines"
            )]
        })?;
        for (i, item) in items.into_iter().enumerate() {
            match entry(item, namespace) {
                Ok(m) => out.push(m),
                Err(e) => problems.push(format!("entry {i}: {e}")),
            }
            if problems.len() >= MAX_PROBLEMS {
                break;
            }
        }
        return finish(Format::JsonArray, out, problems);
    }
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let result = serde_json::from_str::<Value>(line)
            .map_err(|e| format!("not valid JSON ({e})"))
            .and_then(|v| entry(v, namespace));
        match result {
            Ok(m) => out.push(m),
            Err(e) => problems.push(format!("line {number}: {e}")),
        }
        if problems.len() >= MAX_PROBLEMS {
            break;
        }
    }
    finish(Format::JsonLines, out, problems)
}

fn finish(
    format: Format,
    out: Vec<NewMemory>,
    problems: Vec<String>,
) -> Result<(Format, Vec<NewMemory>), Vec<String>> {
    if problems.is_empty() {
        Ok((format, out))
    } else {
        Err(problems)
    }
}

fn field<'a>(object: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    object
        .get(camel)
        .or_else(|| object.get(snake))
        .filter(|v| !v.is_null())
}

fn entry(value: Value, namespace: &str) -> Result<NewMemory, String> {
    let Value::Object(object) = value else {
        return Err(format!(
            "expected an object like {{\"content\": \"...\"}}, got {value}"
        ));
    };
    let content = match object.get("content") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err("`content` is empty".into()),
        Some(other) => return Err(format!("`content` must be a string, got {other}")),
        None => return Err("`content` is missing".into()),
    };
    let mut new = NewMemory::new(namespace, content);
    match object.get("category") {
        None | Some(Value::Null) => new.category = DEFAULT_CATEGORY.into(),
        Some(Value::String(s)) if !s.trim().is_empty() => new.category = s.clone(),
        Some(other) => {
            return Err(format!(
                "`category` must be a non-empty string, got {other}"
            ));
        }
    }
    new.importance = match object.get("importance") {
        None | Some(Value::Null) => DEFAULT_IMPORTANCE,
        Some(v) => v
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (1.0..=10.0).contains(f))
            .map(|f| f as u8)
            .ok_or_else(|| format!("`importance` must be an integer from 1 to 10, got {v}"))?,
    };
    for (camel, snake) in [("createdAt", "created_at"), ("updatedAt", "updated_at")] {
        let value = match field(&object, camel, snake) {
            None => None,
            Some(Value::String(s)) if score::parse_time(s).is_some() => score::parse_time(s),
            Some(other) => {
                return Err(format!(
                    "`{camel}` must be an RFC 3339 time like \"2025-03-07T09:30:00.000Z\", got {other}"
                ));
            }
        };
        if camel == "createdAt" {
            new.created_at = value;
        } else {
            new.updated_at = value;
        }
    }
    new.access_count = match field(&object, "accessCount", "access_count") {
        None => 0,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("`accessCount` must be a non-negative integer, got {v}"))?
            // Far beyond any real count, and far from overflowing a bump.
            .min(1_000_000_000),
    };
    let mut metadata = match object.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(format!("`metadata` must be an object, got {other}")),
    };
    if let Some(id) = object.get("id").filter(|v| !v.is_null()) {
        metadata.insert("source_id".into(), id.clone());
    }
    new.metadata = Value::Object(metadata);
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_and_lines() {
        let (format, got) = parse(
            r#"[{"id":"a1","content":"likes tea","category":"preference","importance":7,
                "createdAt":"2024-01-02T03:04:05.678Z","updatedAt":"2024-02-02T03:04:05.678Z",
                "accessCount":3}]"#,
            "ns",
        )
        .unwrap();
        assert_eq!(format, Format::JsonArray);
        assert_eq!(got[0].importance, 7);
        assert_eq!(got[0].access_count, 3);
        assert_eq!(got[0].metadata["source_id"], "a1");
        let (format, got) = parse("\n{\"content\":\"a\"}\n\n{\"content\":\"b\"}\n", "ns").unwrap();
        assert_eq!(format, Format::JsonLines);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].category, "fact");
    }

    #[test]
    fn problems_name_entry_line_and_field() {
        let e = parse(r#"[{"content":"a"},{"content":"b","importance":11}]"#, "n").unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("entry 1: `importance`"), "{e:?}");
        let e = parse(
            "{\"content\":\"a\"}\n{\"content\":\"b\",\"createdAt\":\"yesterday\"}\nnope\n",
            "n",
        )
        .unwrap_err();
        assert!(e[0].starts_with("line 2: `createdAt`"), "{e:?}");
        assert!(e[1].starts_with("line 3: not valid JSON"), "{e:?}");
        let e = parse("\n\n{\"category\":\"x\"}", "n").unwrap_err();
        assert_eq!(e, ["line 3: `content` is missing"]);
    }
}
