//! Structured output: the instruction that asks the model for JSON matching
//! the agent's `output_schema`, and the check of its final answer, whose
//! errors become the one repair turn's message. Pure; may depend on `types`
//! only.

use serde_json::Value;

/// How many schema violations a repair message or a failure lists.
const MAX_ERRORS: usize = 10;

/// The final answer checked against a schema.
pub struct OutputCheck {
    validator: jsonschema::Validator,
}

impl OutputCheck {
    /// `None` with the reason when `schema` is not a usable JSON Schema
    /// (the config loader already refuses those).
    pub fn new(schema: &Value) -> Result<OutputCheck, String> {
        jsonschema::validator_for(schema)
            .map(|validator| OutputCheck { validator })
            .map_err(|e| format!("output_schema is not a valid JSON Schema: {e}"))
    }

    /// The answer as JSON, or what is wrong with it (one line each).
    pub fn check(&self, answer: &str) -> Result<Value, Vec<String>> {
        let text = strip_fence(answer.trim());
        let value: Value = serde_json::from_str(text).map_err(|e| {
            vec![format!(
                "the answer is not JSON ({e}); reply with only a JSON value"
            )]
        })?;
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(MAX_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!("at {at}: {e}")
            })
            .collect();
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(errors)
        }
    }
}

/// The system message that asks for JSON matching `schema`.
pub fn instruction(schema: &Value) -> String {
    format!(
        "Your final answer must be only a JSON value that matches this JSON Schema, with no other text and no code fence:\n{}",
        serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string())
    )
}

/// The user message of the repair turn.
pub fn repair_message(errors: &[String]) -> String {
    format!(
        "Your answer does not match the required JSON Schema:\n- {}\nReply again with only the corrected JSON value.",
        errors.join("\n- ")
    )
}

/// The inside of a Markdown code fence (```json ... ```), which models add
/// even when told not to; other text is returned as it is.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // Drop the info string (`json`) on the opening line.
    match body.split_once('\n') {
        Some((info, inner)) if !info.contains(['{', '[', '"']) => inner.trim(),
        _ => body.trim(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check() -> OutputCheck {
        OutputCheck::new(&json!({
            "type": "object",
            "properties": { "label": { "enum": ["bug", "feature"] }, "score": { "type": "integer" } },
            "required": ["label", "score"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn valid_answers_with_or_without_a_fence_pass() {
        let value = check().check(r#" {"label": "bug", "score": 3} "#).unwrap();
        assert_eq!(value, json!({ "label": "bug", "score": 3 }));
        let fenced = "```json\n{\"label\": \"feature\", \"score\": 1}\n```";
        assert_eq!(check().check(fenced).unwrap()["label"], "feature");
        let bare_fence = "```{\"label\": \"bug\", \"score\": 0}```";
        assert_eq!(check().check(bare_fence).unwrap()["score"], 0);
    }

    #[test]
    fn invalid_answers_say_where_and_what() {
        let errors = check().check(r#"{"label": "question"}"#).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors.iter().any(|e| e.starts_with("at /label:")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("at /:") && e.contains("score")),
            "{errors:?}"
        );
        let errors = check().check("The label is bug.").unwrap_err();
        assert!(
            errors[0].starts_with("the answer is not JSON"),
            "{errors:?}"
        );
        let message = repair_message(&errors);
        assert!(message.contains("- the answer is not JSON") && message.ends_with("JSON value."));
    }

    #[test]
    fn a_bad_schema_is_refused() {
        let error = OutputCheck::new(&json!({ "type": "nothing" }))
            .err()
            .unwrap();
        assert!(
            error.starts_with("output_schema is not a valid JSON Schema"),
            "{error}"
        );
    }
}
