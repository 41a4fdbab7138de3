//! The built-in tools every project has: `bash`, `read_file`, `write_file`,
//! `list_dir`, `current_time` and `calculator`. [`all`] returns one instance
//! of each, the file tools guarded by the project's [`ProtectedPaths`]; this
//! module also holds the small argument readers they share.

mod bash;
mod calculator;
mod fs;
pub mod guard;
mod time;

use std::sync::Arc;

use serde_json::Value;

use super::{Tool, ToolError};

pub use bash::BashTool;
pub use calculator::{CalcError, CalculatorTool, evaluate, format_number};
pub use fs::{ListDirTool, ReadFileTool, WriteFileTool, resolve_in_root};
pub use guard::{ProtectedPaths, database_files};
pub use time::CurrentTimeTool;

/// One instance of each built-in tool; the file tools refuse what
/// `protected` protects.
pub fn all(protected: ProtectedPaths) -> Vec<Arc<dyn Tool>> {
    let protected = Arc::new(protected);
    vec![
        Arc::new(BashTool::new()),
        Arc::new(ReadFileTool::new(protected.clone())),
        Arc::new(WriteFileTool::new(protected.clone())),
        Arc::new(ListDirTool::new(protected)),
        Arc::new(CurrentTimeTool::new()),
        Arc::new(CalculatorTool::new()),
    ]
}

/// The string argument `name`, which must be present.
fn required_str<'a>(args: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    match args.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "`{name}` must be a string, got {other}"
        ))),
        None => Err(ToolError::InvalidArguments(format!("`{name}` is required"))),
    }
}

/// The string argument `name`, if given (`null` counts as absent).
fn optional_str<'a>(args: &'a Value, name: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "`{name}` must be a string, got {other}"
        ))),
    }
}

/// The non-negative integer argument `name`, if given.
fn optional_u64(args: &Value, name: &str) -> Result<Option<u64>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                // Accept 5.0 from models that write integers as floats.
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| {
                ToolError::InvalidArguments(format!(
                    "`{name}` must be a non-negative integer, got {v}"
                ))
            }),
    }
}

/// The boolean argument `name`, if given.
fn optional_bool(args: &Value, name: &str) -> Result<Option<bool>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "`{name}` must be true or false, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn all_has_each_tool_once_with_a_sound_schema() {
        let tools = all(ProtectedPaths::defaults(std::path::Path::new("/p")));
        let mut names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "bash",
                "calculator",
                "current_time",
                "list_dir",
                "read_file",
                "write_file"
            ]
        );
        for tool in &tools {
            let spec = tool.spec();
            assert!(!spec.description.is_empty(), "{}", spec.name);
            let p = &spec.parameters;
            assert_eq!(p["type"], "object", "{}", spec.name);
            assert_eq!(p["additionalProperties"], false, "{}", spec.name);
            assert!(p["required"].is_array(), "{}", spec.name);
            for (prop, schema) in p["properties"].as_object().unwrap() {
                let examples = schema["examples"].as_array();
                assert!(
                    examples.is_some_and(|e| e.len() == 1),
                    "{}.{prop} needs one example",
                    spec.name
                );
            }
            for req in p["required"].as_array().unwrap() {
                assert!(p["properties"].get(req.as_str().unwrap()).is_some());
            }
        }
    }

    #[test]
    fn argument_readers() {
        let args = json!({"s": "x", "n": 5, "f": 5.0, "neg": -1, "b": true, "z": null});
        assert_eq!(required_str(&args, "s").unwrap(), "x");
        assert!(matches!(
            required_str(&args, "missing"),
            Err(ToolError::InvalidArguments(_))
        ));
        assert!(required_str(&args, "n").is_err());
        assert_eq!(optional_str(&args, "z").unwrap(), None);
        assert_eq!(optional_u64(&args, "n").unwrap(), Some(5));
        assert_eq!(optional_u64(&args, "f").unwrap(), Some(5));
        assert!(optional_u64(&args, "neg").is_err());
        assert_eq!(optional_bool(&args, "b").unwrap(), Some(true));
        assert_eq!(optional_bool(&args, "missing").unwrap(), None);
        assert!(optional_bool(&args, "s").is_err());
    }
}
