//! An agent's `model:`: one model, or a chain of them tried in order.
//!
//! ```yaml
//! model: openai/gpt-4o-mini
//! model: [openai/gpt-4o-mini, anthropic/claude-haiku-4-5]
//! model:
//!   chain: [openai/gpt-4o-mini, anthropic/claude-haiku-4-5]
//!   fallback_on: [unreachable, server_error]   # default: all four reasons
//!   attempts: 2                                # per model before the next
//! ```
//!
//! May depend on `types` only.

use serde_yaml::Value;

use super::yaml_value::describe_value;
use crate::types::FallbackReason;

/// Attempts a model of a chain gets before the call moves on (the last
/// model retries within the run's time, as a single model does).
pub const DEFAULT_FALLBACK_ATTEMPTS: u32 = 3;

/// The models after the first, and when a call moves on to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// `provider/model` of each next model, in order.
    pub models: Vec<String>,
    /// The reasons a call moves on.
    pub on: Vec<FallbackReason>,
    /// Attempts each model but the last gets.
    pub attempts: u32,
}

/// What is wrong: the keys to locate it by, and the message.
type Problem = (Vec<&'static str>, String);

/// Reads `model:` (each model checked by `check`).
pub(super) fn parse_model(
    value: &Value,
    check: &dyn Fn(&str) -> Result<String, String>,
) -> Result<(String, Option<Fallback>), Problem> {
    let list = |items: &[Value], key: Vec<&'static str>| {
        let mut models: Vec<String> = Vec::new();
        for item in items {
            let Some(name) = item.as_str() else {
                return Err((
                    key.clone(),
                    format!(
                        "each model of a chain is `provider/model`, not {}",
                        describe_value(item)
                    ),
                ));
            };
            let name = check(name.trim()).map_err(|m| (key.clone(), m))?;
            if models.contains(&name) {
                return Err((
                    key.clone(),
                    format!("{name:?} is twice in the chain: each model is tried once"),
                ));
            }
            models.push(name);
        }
        if models.is_empty() {
            return Err((
                key,
                "the model chain is empty: give at least one `provider/model`".into(),
            ));
        }
        Ok(models)
    };
    let (models, on, attempts) = match value {
        Value::String(name) => {
            return check(name.trim())
                .map(|m| (m, None))
                .map_err(|m| (vec!["model"], m));
        }
        Value::Sequence(items) => (
            list(items, vec!["model"])?,
            FallbackReason::ALL.to_vec(),
            DEFAULT_FALLBACK_ATTEMPTS,
        ),
        Value::Mapping(map) => {
            let mut chain = None;
            let mut on = FallbackReason::ALL.to_vec();
            let mut attempts = DEFAULT_FALLBACK_ATTEMPTS;
            for (k, v) in map {
                match k.as_str() {
                    Some("chain") => match v {
                        Value::Sequence(items) => {
                            chain = Some(list(items, vec!["model", "chain"])?)
                        }
                        other => {
                            return Err((
                                vec!["model", "chain"],
                                format!(
                                    "model.chain is a list of `provider/model`, not {}",
                                    describe_value(other)
                                ),
                            ));
                        }
                    },
                    Some("fallback_on") => on = parse_reasons(v)?,
                    Some("attempts") => match v.as_u64() {
                        Some(n @ 1..=20) => attempts = n as u32,
                        _ => {
                            return Err((
                                vec!["model", "attempts"],
                                format!(
                                    "model.attempts is {}: give the attempts each model but the last gets, from 1 to 20",
                                    describe_value(v)
                                ),
                            ));
                        }
                    },
                    _ => {
                        return Err((
                            vec!["model"],
                            format!(
                                "unknown field {} in `model`: expected `chain`, `fallback_on` or `attempts`",
                                describe_value(k)
                            ),
                        ));
                    }
                }
            }
            let Some(chain) = chain else {
                return Err((
                    vec!["model"],
                    "`model` as a mapping needs `chain: [provider/model, ...]`".into(),
                ));
            };
            (chain, on, attempts)
        }
        other => {
            return Err((
                vec!["model"],
                format!(
                    "`model` is {}: write `provider/model`, or a list of them to fall back along",
                    describe_value(other)
                ),
            ));
        }
    };
    let mut models = models.into_iter();
    let first = models.next().unwrap_or_default();
    let rest: Vec<String> = models.collect();
    let fallback = (!rest.is_empty()).then_some(Fallback {
        models: rest,
        on,
        attempts,
    });
    Ok((first, fallback))
}

fn parse_reasons(value: &Value) -> Result<Vec<FallbackReason>, Problem> {
    let expected = || {
        FallbackReason::ALL
            .iter()
            .map(|r| format!("`{}`", r.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let items: Vec<&Value> = match value {
        Value::Sequence(items) => items.iter().collect(),
        one @ Value::String(_) => vec![one],
        other => {
            return Err((
                vec!["model", "fallback_on"],
                format!(
                    "model.fallback_on is {}: give a list of {}",
                    describe_value(other),
                    expected()
                ),
            ));
        }
    };
    let mut reasons = Vec::new();
    for item in items {
        match item.as_str().and_then(FallbackReason::parse) {
            Some(r) if !reasons.contains(&r) => reasons.push(r),
            Some(_) => {}
            None => {
                return Err((
                    vec!["model", "fallback_on"],
                    format!(
                        "model.fallback_on: {} is not a reason: expected {}",
                        describe_value(item),
                        expected()
                    ),
                ));
            }
        }
    }
    Ok(reasons)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::agent::parse_agent;
    use crate::types::FallbackReason;

    fn parse(text: &str) -> Result<crate::config::Agent, Vec<String>> {
        let (agent, diags) = parse_agent("a", Path::new("agents/a.yaml"), text, String::new());
        agent.ok_or_else(|| diags.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_list_or_a_mapping_is_a_chain() {
        let a = parse("model: [openai/a, anthropic/b, test]\nprompt: hi\n").unwrap();
        assert_eq!(a.model, "openai/a");
        let f = a.fallback.unwrap();
        assert_eq!(f.models, ["anthropic/b", "test"]);
        assert_eq!(f.on, FallbackReason::ALL);
        assert_eq!(f.attempts, super::DEFAULT_FALLBACK_ATTEMPTS);

        let a = parse(
            "model:\n  chain: [openai/a, gemini/b]\n  fallback_on: [server_error, unreachable]\n  attempts: 1\nprompt: hi\n",
        )
        .unwrap();
        let f = a.fallback.unwrap();
        assert_eq!(
            f.on,
            [FallbackReason::ServerError, FallbackReason::Unreachable]
        );
        assert_eq!(f.attempts, 1);

        let a = parse("model: [openai/a]\nprompt: hi\n").unwrap();
        assert_eq!((a.model.as_str(), a.fallback), ("openai/a", None));
    }

    #[test]
    fn bad_chains_are_located() {
        for (text, want) in [
            (
                "model: [openai/a, openai/a]\nprompt: hi\n",
                "1:8: \"openai/a\" is twice",
            ),
            (
                "model: [openai/a, gpt4]\nprompt: hi\n",
                "1:8: model \"gpt4\" must be",
            ),
            ("model: []\nprompt: hi\n", "1:8: the model chain is empty"),
            (
                "model:\n  chain: [openai/a, test]\n  fallback_on: [sometimes]\nprompt: hi\n",
                "3:16: model.fallback_on: \"sometimes\" is not a reason",
            ),
            (
                "model:\n  models: [openai/a]\nprompt: hi\n",
                "unknown field \"models\" in `model`",
            ),
            (
                "model:\n  chain: [test, openai/x]\n  attempts: 0\nprompt: hi\n",
                "3:13: model.attempts is 0",
            ),
        ] {
            let errors = parse(text).unwrap_err();
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "{text:?}: {errors:?}"
            );
        }
    }
}
