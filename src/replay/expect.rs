//! The expectations of an `aurad test` case checked against a played run:
//! its end state, the tools it called (arguments exact or a subset), the
//! final answer (contains, regex, JSON Schema), its model turns and cost.
//! Each unmet expectation says which, what was expected and what came.

use std::fmt;

use crate::config::cases::{ArgsMatch, Expect, ExpectedCall};
use crate::engine::RunOutcome;
use crate::types::RunState;

use super::tools::parse_arguments;
use super::trace::Trace;

/// One unmet expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct Unmet {
    /// The expectation's field, as written (`answer_contains`, ...).
    pub expectation: String,
    pub expected: String,
    pub got: String,
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expectation `{}` not met\n  expected: {}\n  got:      {}",
            self.expectation, self.expected, self.got
        )
    }
}

/// Every expectation of `expect` that the run (`outcome`, `trace`) does
/// not meet, in the order the fields are listed in [`Expect`].
pub fn check(expect: &Expect, outcome: &RunOutcome, trace: &Trace) -> Vec<Unmet> {
    let mut unmet = Vec::new();
    let mut fail = |expectation: &str, expected: String, got: String| {
        unmet.push(Unmet {
            expectation: expectation.into(),
            expected,
            got,
        })
    };
    let want_state = expect.state.unwrap_or(RunState::Succeeded);
    if outcome.state != want_state {
        let mut got = outcome.state.to_string();
        if let Some(reason) = &outcome.reason {
            got.push_str(&format!(" ({reason})"));
        }
        fail("state", want_state.to_string(), got);
    }
    let calls: Vec<_> = trace.turns.iter().flat_map(|t| &t.calls).collect();
    let shown_calls = || {
        if calls.is_empty() {
            "no tool calls".to_string()
        } else {
            calls
                .iter()
                .map(|c| format!("`{}` {}", c.name, c.arguments))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    for want in &expect.tools_called {
        let found = calls
            .iter()
            .any(|c| c.name == want.name && arguments_match(want, &c.arguments));
        if !found {
            fail("tools_called", describe_call(want), shown_calls());
        }
    }
    for name in &expect.tools_not_called {
        if calls.iter().any(|c| c.name == *name) {
            fail(
                "tools_not_called",
                format!("no call of `{name}`"),
                shown_calls(),
            );
        }
    }
    let answer = outcome.output.as_deref();
    let shown_answer = || match answer {
        Some(a) => format!("{a:?}"),
        None => format!("no answer (the run ended {})", outcome.state),
    };
    for text in &expect.answer_contains {
        if !answer.is_some_and(|a| a.contains(text.as_str())) {
            fail(
                "answer_contains",
                format!("an answer containing {text:?}"),
                shown_answer(),
            );
        }
    }
    if let Some(pattern) = &expect.answer_matches {
        // The pattern was checked when the file was loaded.
        let matched =
            regex::Regex::new(pattern).is_ok_and(|re| answer.is_some_and(|a| re.is_match(a)));
        if !matched {
            fail(
                "answer_matches",
                format!("an answer matching /{pattern}/"),
                shown_answer(),
            );
        }
    }
    if let Some(schema) = &expect.answer_schema {
        let problems = match answer.map(serde_json::from_str::<serde_json::Value>) {
            None => vec!["there is no answer".to_string()],
            Some(Err(e)) => vec![format!("the answer is not JSON ({e}): {}", shown_answer())],
            Some(Ok(value)) => match jsonschema::validator_for(schema) {
                Ok(v) => crate::tools::schema_problems(&v, &value, 5),
                Err(e) => vec![format!("the schema is invalid: {e}")],
            },
        };
        if !problems.is_empty() {
            fail(
                "answer_schema",
                format!("an answer matching {schema}"),
                problems.join("; "),
            );
        }
    }
    if let Some(max) = expect.max_iterations
        && outcome.iterations > max
    {
        fail(
            "max_iterations",
            format!("at most {max} model turn(s)"),
            format!("{} model turns", outcome.iterations),
        );
    }
    if let Some(max) = expect.max_cost_usd {
        match outcome.cost_usd {
            Some(cost) if cost <= max => {}
            Some(cost) => fail(
                "max_cost_usd",
                format!("at most ${max}"),
                format!("${cost:.6}"),
            ),
            None => fail(
                "max_cost_usd",
                format!("at most ${max}"),
                "an unknown cost: give the model a price in aurad.yaml `prices:` and the turns a `usage:`".into(),
            ),
        }
    }
    unmet
}

fn describe_call(want: &ExpectedCall) -> String {
    match (&want.arguments, want.matching) {
        (None, _) => format!("a call of `{}`", want.name),
        (Some(args), ArgsMatch::Exact) => format!("a call of `{}` with {args}", want.name),
        (Some(args), ArgsMatch::Subset) => {
            format!("a call of `{}` with at least {args}", want.name)
        }
    }
}

fn arguments_match(want: &ExpectedCall, raw: &str) -> bool {
    let Some(expected) = &want.arguments else {
        return true;
    };
    let got = parse_arguments(raw);
    match want.matching {
        ArgsMatch::Exact => got == *expected,
        ArgsMatch::Subset => is_subset(expected, &got),
    }
}

/// Whether every field of `want` is in `got` with a value that is itself a
/// subset (objects) or equal (anything else).
fn is_subset(want: &serde_json::Value, got: &serde_json::Value) -> bool {
    match (want, got) {
        (serde_json::Value::Object(w), serde_json::Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| is_subset(v, gv))),
        _ => want == got,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subsets_nest() {
        assert!(is_subset(
            &json!({"a": {"b": 1}}),
            &json!({"a": {"b": 1, "c": 2}, "d": 3})
        ));
        assert!(!is_subset(&json!({"a": {"b": 2}}), &json!({"a": {"b": 1}})));
        assert!(!is_subset(&json!({"x": 1}), &json!({})));
    }
}
