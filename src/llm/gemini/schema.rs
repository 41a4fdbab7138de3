//! JSON Schema to the OpenAPI 3.0 subset Gemini accepts for function
//! parameters and `responseSchema`. What carries over is kept, harmless
//! annotations and constraints Gemini has no field for are dropped, and what
//! would change the meaning of the schema (references, `oneOf`, `allOf`,
//! conditionals, non-string enums, ...) is refused with the JSON path of the
//! offending keyword, so the agent author can fix the schema. Pure.

use serde_json::{Map, Value, json};

/// The types Gemini knows.
const TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "array", "object"];

/// The `format` values Gemini accepts; others are dropped.
const FORMATS: [&str; 6] = ["date-time", "enum", "int32", "int64", "float", "double"];

/// Keywords copied as they are when their value has the right JSON type.
const NUMBERS: [&str; 4] = ["minItems", "maxItems", "minimum", "maximum"];

/// Keywords Gemini cannot express, with what to do instead.
const REFUSED: [(&str, &str); 10] = [
    ("$ref", "inline the definition"),
    ("$defs", "inline the definitions"),
    ("definitions", "inline the definitions"),
    ("oneOf", "use \"anyOf\""),
    ("allOf", "merge the subschemas into one"),
    ("not", "state the constraint in the description"),
    ("patternProperties", "list the properties"),
    ("if", "state the condition in the description"),
    ("then", "state the condition in the description"),
    ("else", "state the condition in the description"),
];

/// Converts `schema`; error messages name paths from `schema`.
pub fn to_gemini_schema(schema: &Value) -> Result<Value, String> {
    convert(schema, "schema")
}

/// Converts `schema`, naming its root `root` in error messages (such as
/// `parameters.properties.x: "$ref" is not supported by Gemini; ...`).
pub fn convert(schema: &Value, root: &str) -> Result<Value, String> {
    let mut path = root.to_string();
    convert_at(schema, &mut path)
}

fn refuse(path: &str, what: impl std::fmt::Display) -> String {
    format!("{path}: {what}")
}

fn convert_at(schema: &Value, path: &mut String) -> Result<Value, String> {
    let Some(obj) = schema.as_object() else {
        return Err(refuse(
            path,
            format_args!("expected a schema object, found {}", kind(schema)),
        ));
    };
    for (keyword, instead) in REFUSED {
        if obj.contains_key(keyword) {
            return Err(refuse(
                path,
                format_args!("\"{keyword}\" is not supported by Gemini; {instead}"),
            ));
        }
    }

    let mut out = Map::new();
    let mut nullable = obj.get("nullable").and_then(Value::as_bool) == Some(true);
    match obj.get("type") {
        None => {}
        Some(Value::String(t)) => {
            out.insert("type".into(), json!(known_type(t, path)?));
        }
        Some(Value::Array(list)) => {
            let mut types: Vec<&str> = Vec::new();
            for t in list {
                match t.as_str() {
                    Some("null") => nullable = true,
                    Some(t) if !types.contains(&t) => types.push(t),
                    Some(_) => {}
                    None => return Err(refuse(path, "\"type\" list holds a non-string")),
                }
            }
            let [t] = types[..] else {
                return Err(refuse(
                    path,
                    format_args!(
                        "type list {} is not supported by Gemini; only [T, \"null\"] is",
                        Value::Array(list.clone())
                    ),
                ));
            };
            out.insert("type".into(), json!(known_type(t, path)?));
        }
        Some(other) => {
            return Err(refuse(
                path,
                format_args!("\"type\" must be a string or a list, found {}", kind(other)),
            ));
        }
    }
    if let Some(Value::String(d)) = obj.get("description") {
        out.insert("description".into(), json!(d));
    }
    if let Some(values) = obj.get("enum") {
        let strings = values.as_array().filter(|v| v.iter().all(Value::is_string));
        let Some(strings) = strings else {
            return Err(refuse(
                path,
                "only string enums are supported by Gemini; use strings or drop \"enum\"",
            ));
        };
        out.insert("enum".into(), Value::Array(strings.clone()));
        // Gemini types an enum as a string.
        out.entry("type").or_insert_with(|| json!("string"));
    }
    if let Some(Value::String(f)) = obj.get("format")
        && FORMATS.contains(&f.as_str())
    {
        out.insert("format".into(), json!(f));
    }
    for key in NUMBERS {
        if let Some(n @ Value::Number(_)) = obj.get(key) {
            out.insert(key.into(), n.clone());
        }
    }

    match obj.get("properties") {
        None => {}
        Some(Value::Object(props)) => {
            let mut converted = Map::new();
            for (name, sub) in props {
                let len = path.len();
                path.push_str(".properties.");
                path.push_str(name);
                converted.insert(name.clone(), convert_at(sub, path)?);
                path.truncate(len);
            }
            if let Some(Value::Array(required)) = obj.get("required") {
                // Gemini refuses a required name that is not a property.
                let required: Vec<Value> = required
                    .iter()
                    .filter(|r| r.as_str().is_some_and(|r| converted.contains_key(r)))
                    .cloned()
                    .collect();
                if !required.is_empty() {
                    out.insert("required".into(), Value::Array(required));
                }
            }
            // Gemini refuses an empty `properties`; an object without it
            // means the same.
            if !converted.is_empty() {
                out.insert("properties".into(), Value::Object(converted));
            }
            out.entry("type").or_insert_with(|| json!("object"));
        }
        Some(other) => {
            return Err(refuse(
                path,
                format_args!("\"properties\" must be an object, found {}", kind(other)),
            ));
        }
    }

    match obj.get("items") {
        None => {}
        Some(items @ Value::Object(_)) => {
            let len = path.len();
            path.push_str(".items");
            let converted = convert_at(items, path)?;
            path.truncate(len);
            out.insert("items".into(), converted);
            out.entry("type").or_insert_with(|| json!("array"));
        }
        Some(_) => {
            return Err(refuse(
                path,
                "\"items\" must be one schema object; tuple schemas are not supported by Gemini",
            ));
        }
    }
    if out.get("type").and_then(Value::as_str) == Some("array") && !out.contains_key("items") {
        return Err(refuse(
            path,
            "an array needs \"items\" for Gemini; give the schema of its items",
        ));
    }

    if let Some(branches) = obj.get("anyOf") {
        let Some(branches) = branches.as_array().filter(|b| !b.is_empty()) else {
            return Err(refuse(path, "\"anyOf\" must be a non-empty list"));
        };
        let mut converted = Vec::with_capacity(branches.len());
        for (i, branch) in branches.iter().enumerate() {
            // `{"type": "null"}` is how JSON Schema spells "or null".
            if branch.get("type").and_then(Value::as_str) == Some("null") && branch_is_bare(branch)
            {
                nullable = true;
                continue;
            }
            let len = path.len();
            path.push_str(&format!(".anyOf[{i}]"));
            converted.push(convert_at(branch, path)?);
            path.truncate(len);
        }
        match converted.len() {
            0 => return Err(refuse(path, "\"anyOf\" allows only null")),
            // `anyOf: [X, null]`: X itself, made nullable.
            1 if !out.contains_key("type") => {
                if let Some(Value::Object(only)) = converted.pop() {
                    for (k, v) in only {
                        out.entry(k).or_insert(v);
                    }
                }
            }
            _ => {
                out.insert("anyOf".into(), Value::Array(converted));
            }
        }
    }

    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    Ok(Value::Object(out))
}

/// `t` if Gemini knows it.
fn known_type<'a>(t: &'a str, path: &str) -> Result<&'a str, String> {
    if TYPES.contains(&t) {
        Ok(t)
    } else if t == "null" {
        Err(refuse(
            path,
            "type \"null\" alone is not supported by Gemini; use [T, \"null\"]",
        ))
    } else {
        Err(refuse(path, format_args!("unknown type \"{t}\"")))
    }
}

/// Whether a `{"type": "null"}` branch says nothing else that matters.
fn branch_is_bare(branch: &Value) -> bool {
    branch.as_object().is_some_and(|o| {
        o.keys()
            .all(|k| matches!(k.as_str(), "type" | "description" | "title"))
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_gemini_knows_and_drops_annotations() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "x", "$comment": "c", "title": "T",
            "type": "object",
            "additionalProperties": false,
            "description": "args",
            "properties": {
                "path": { "type": "string", "description": "file", "default": "a",
                          "examples": ["b"], "format": "uri", "minLength": 1 },
                "when": { "type": ["string", "null"], "format": "date-time" },
                "mode": { "enum": ["r", "w"] },
                "n": { "type": "integer", "format": "int32", "minimum": 0, "maximum": 9 },
                "tags": { "type": "array", "items": { "type": "string" },
                          "minItems": 1, "maxItems": 3 },
                "opt": { "anyOf": [{ "type": "number" }, { "type": "null" }] },
                "either": { "anyOf": [{ "type": "string" }, { "type": "boolean" }] },
                "free": { "type": "object", "properties": {} },
            },
            "required": ["path", "ghost"],
        });
        assert_eq!(
            to_gemini_schema(&schema).unwrap(),
            json!({
                "type": "object",
                "description": "args",
                "properties": {
                    "path": { "type": "string", "description": "file" },
                    "when": { "type": "string", "format": "date-time", "nullable": true },
                    "mode": { "type": "string", "enum": ["r", "w"] },
                    "n": { "type": "integer", "format": "int32", "minimum": 0, "maximum": 9 },
                    "tags": { "type": "array", "items": { "type": "string" },
                              "minItems": 1, "maxItems": 3 },
                    "opt": { "type": "number", "nullable": true },
                    "either": { "anyOf": [{ "type": "string" }, { "type": "boolean" }] },
                    "free": { "type": "object" },
                },
                "required": ["path"],
            })
        );
        // Types are inferred where JSON Schema leaves them implicit.
        assert_eq!(
            to_gemini_schema(&json!({ "properties": { "a": { "items": { "type": "number" } } } }))
                .unwrap(),
            json!({ "type": "object", "properties": {
                "a": { "type": "array", "items": { "type": "number" } } } })
        );
    }

    #[test]
    fn refuses_what_gemini_cannot_express_naming_the_path() {
        let nested = |inner: Value| json!({ "type": "object", "properties": { "x": inner } });
        let cases = [
            (
                nested(json!({ "$ref": "#/$defs/X" })),
                "parameters.properties.x: \"$ref\" is not supported by Gemini; inline the definition",
            ),
            (
                json!({ "type": "object", "$defs": {} }),
                "parameters: \"$defs\" is not supported",
            ),
            (
                json!({ "definitions": {} }),
                "parameters: \"definitions\" is not",
            ),
            (
                nested(json!({ "oneOf": [] })),
                "parameters.properties.x: \"oneOf\"",
            ),
            (nested(json!({ "allOf": [] })), "x: \"allOf\""),
            (nested(json!({ "not": {} })), "x: \"not\""),
            (
                nested(json!({ "type": "object", "patternProperties": {} })),
                "x: \"patternProperties\"",
            ),
            (nested(json!({ "if": {}, "then": {} })), "x: \"if\""),
            (
                nested(json!({ "enum": [1, 2] })),
                "parameters.properties.x: only string enums",
            ),
            (
                nested(json!({ "type": ["string", "integer"] })),
                "x: type list [\"string\",\"integer\"] is not supported",
            ),
            (nested(json!({ "type": "null" })), "x: type \"null\" alone"),
            (
                nested(json!({ "type": "array" })),
                "x: an array needs \"items\"",
            ),
            (
                nested(
                    json!({ "type": "array", "items": { "type": "array", "items": { "$ref": "#" } } }),
                ),
                "parameters.properties.x.items.items: \"$ref\"",
            ),
            (
                nested(json!({ "anyOf": [{ "type": "string" }, { "allOf": [] }] })),
                "parameters.properties.x.anyOf[1]: \"allOf\"",
            ),
            (nested(json!(true)), "x: expected a schema object"),
            (
                nested(json!({ "type": "date" })),
                "x: unknown type \"date\"",
            ),
        ];
        for (schema, want) in cases {
            let err = convert(&schema, "parameters").unwrap_err();
            assert!(err.starts_with("parameters"), "{err}");
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        }
        // A property named like a keyword is just a property.
        assert!(to_gemini_schema(&nested(json!({ "type": "string" }))).is_ok());
        let named = json!({ "type": "object", "properties": { "$ref": { "type": "string" } } });
        assert!(to_gemini_schema(&named).is_ok());
    }
}
