//! JSON Schemas written in YAML files (a plugin's `parameters`, an agent's
//! `output_schema`): converted to JSON and checked as schemas, with the
//! place of a problem inside the schema.

use serde_yaml::Value;

/// `schema` (the value of `field`) as JSON, or the keys to point at and what
/// is wrong.
pub(super) fn json_schema(
    schema: &Value,
    field: &str,
) -> Result<serde_json::Value, (Vec<String>, String)> {
    let json = serde_json::to_value(schema).map_err(|e| {
        (
            vec![field.to_string()],
            format!("`{field}` cannot be read as JSON ({e}); use string keys and plain values"),
        )
    })?;
    if let Err(e) = jsonschema::validator_for(&json) {
        // The error's instance path is where in the schema the problem is.
        let at = e.instance_path().to_string();
        let segments: Vec<String> = at
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        let mut keys = vec![field.to_string()];
        keys.extend(segments);
        let place = if at.is_empty() {
            String::new()
        } else {
            format!(" at {at}")
        };
        let hint = if keys.last().is_some_and(|k| k == "type") {
            "use a JSON type: object, array, string, number, integer, boolean or null"
        } else {
            "fix the schema"
        };
        return Err((
            keys,
            format!("`{field}` is not a valid JSON Schema{place}: {e}; {hint}"),
        ));
    }
    Ok(json)
}
