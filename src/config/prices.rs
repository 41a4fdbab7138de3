//! `prices:` in `aurad.yaml`: US dollars per million tokens, by
//! `provider/model`. Every entry is checked and every problem placed; a bad
//! entry is left out (its model's cost stays unknown).

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;

use super::diag::{Diagnostic, MAX_LIST_ERRORS, locate};
use super::yaml_value::describe_value;
use crate::types::Price;

const FIELDS: [&str; 3] = ["input_per_mtok", "output_per_mtok", "cached_input_per_mtok"];

/// Parses the `prices` mapping; problems go to `diags`.
pub(super) fn parse_prices(
    value: &Value,
    path: &Path,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> BTreeMap<String, Price> {
    let mut prices = BTreeMap::new();
    let Value::Mapping(map) = value else {
        diags.push(Diagnostic::error(
            path,
            locate(text, &["prices"]),
            format!(
                "`prices` must be a mapping of \"provider/model\" to prices, not {}; e.g. prices: {{ \"openai/gpt-4o-mini\": {{ input_per_mtok: 0.15, output_per_mtok: 0.6 }} }}",
                describe_value(value)
            ),
        ));
        return prices;
    };
    let start = diags.len();
    for (key, entry) in map {
        if diags.len() - start >= MAX_LIST_ERRORS {
            diags.push(Diagnostic::error(
                path,
                locate(text, &["prices"]),
                format!("more than {MAX_LIST_ERRORS} problems in `prices`; fix these first"),
            ));
            break;
        }
        let Some(model) = key.as_str() else {
            diags.push(Diagnostic::error(
                path,
                locate(text, &["prices"]),
                format!(
                    "a key of `prices` is {}; keys are \"provider/model\" strings",
                    describe_value(key)
                ),
            ));
            continue;
        };
        let at = |field: Option<&str>| {
            let mut keys = vec!["prices", model];
            keys.extend(field);
            locate(text, &keys)
        };
        if !model.contains('/') || model.starts_with('/') || model.ends_with('/') {
            diags.push(Diagnostic::error(
                path,
                at(None),
                format!(
                    "prices key {model:?} is not \"provider/model\" (as written in an agent's `model:`, e.g. \"openai/gpt-4o-mini\")"
                ),
            ));
            continue;
        }
        match parse_price(entry) {
            Ok(price) => {
                prices.insert(model.to_string(), price);
            }
            Err((field, message)) => diags.push(Diagnostic::error(
                path,
                at(field.as_deref()),
                format!("prices.{model:?}: {message}"),
            )),
        }
    }
    prices
}

/// One entry; on error, the field at fault (if any) and why.
fn parse_price(entry: &Value) -> Result<Price, (Option<String>, String)> {
    let Value::Mapping(map) = entry else {
        return Err((
            None,
            format!(
                "must be a mapping with input_per_mtok and output_per_mtok, not {}",
                describe_value(entry)
            ),
        ));
    };
    let mut found: [Option<f64>; 3] = [None; 3];
    for (key, value) in map {
        let name = key.as_str().unwrap_or_default();
        let Some(slot) = FIELDS.iter().position(|f| *f == name) else {
            return Err((
                None,
                format!(
                    "unknown field {}; expected input_per_mtok, output_per_mtok or cached_input_per_mtok",
                    describe_value(key)
                ),
            ));
        };
        match value.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => found[slot] = Some(n),
            _ => {
                return Err((
                    Some(name.to_string()),
                    format!(
                        "{name} is {}; it must be a number of US dollars per million tokens, 0 or more",
                        describe_value(value)
                    ),
                ));
            }
        }
    }
    let [input, output, cached] = found;
    let missing = |field: &str| (None, format!("{field} is missing"));
    Ok(Price {
        input_per_mtok: input.ok_or_else(|| missing("input_per_mtok"))?,
        output_per_mtok: output.ok_or_else(|| missing("output_per_mtok"))?,
        cached_input_per_mtok: cached,
    })
}

#[cfg(test)]
mod tests {
    use super::super::settings::parse_settings;
    use super::*;
    use crate::types::Usage;

    fn parse(text: &str) -> (BTreeMap<String, Price>, Vec<String>) {
        let (settings, diags) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        (
            settings.prices,
            diags.iter().map(|d| d.to_string()).collect(),
        )
    }

    #[test]
    fn prices_parse_and_cost_runs() {
        let (prices, diags) = parse(
            "prices:\n  \"openai/gpt-4o-mini\": { input_per_mtok: 0.15, output_per_mtok: 0.6 }\n  anthropic/claude-sonnet-4-5:\n    input_per_mtok: 3\n    output_per_mtok: 15\n    cached_input_per_mtok: 0.3\n",
        );
        assert!(diags.is_empty(), "{diags:?}");
        let mini = prices["openai/gpt-4o-mini"];
        let usage = Usage {
            input_tokens: Some(1_000_000),
            output_tokens: Some(500_000),
            cached_input_tokens: None,
        };
        assert!((mini.cost(&usage).unwrap() - 0.45).abs() < 1e-12);
        let sonnet = prices["anthropic/claude-sonnet-4-5"];
        let cached = Usage {
            input_tokens: Some(2_000),
            output_tokens: Some(100),
            cached_input_tokens: Some(1_000),
        };
        // 1000 x 3 + 1000 x 0.3 + 100 x 15 = 4800 per million.
        assert!((sonnet.cost(&cached).unwrap() - 0.0048).abs() < 1e-12);
        let unknown = Usage {
            input_tokens: Some(5),
            ..Usage::default()
        };
        assert_eq!(sonnet.cost(&unknown), None, "unknown is not zero");
    }

    #[test]
    fn bad_prices_are_placed() {
        let (prices, diags) = parse(
            "prices:\n  gpt-4o: { input_per_mtok: 1, output_per_mtok: 2 }\n  openai/a: { input_per_mtok: -1, output_per_mtok: 2 }\n  openai/b: { input_per_mtok: 1 }\n  openai/c: { input_per_mtok: 1, output_per_mtok: 2, per_call: 3 }\n  openai/ok: { input_per_mtok: 1, output_per_mtok: 2 }\n",
        );
        assert_eq!(prices.keys().collect::<Vec<_>>(), ["openai/ok"]);
        assert!(
            diags[0]
                .starts_with("aurad.yaml:2:11: prices key \"gpt-4o\" is not \"provider/model\""),
            "{diags:?}"
        );
        assert!(
            diags[1].starts_with(
                "aurad.yaml:3:31: prices.\"openai/a\": input_per_mtok is -1; it must be a number"
            ),
            "{diags:?}"
        );
        assert!(
            diags[2].contains("prices.\"openai/b\": output_per_mtok is missing"),
            "{diags:?}"
        );
        assert!(diags[3].contains("unknown field \"per_call\""), "{diags:?}");
        let (_, diags) = parse("prices: [1]\n");
        assert!(diags[0].contains("`prices` must be a mapping"), "{diags:?}");
    }
}
