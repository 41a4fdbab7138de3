//! Where a replayed run differs from its recording: turn by turn, the
//! answer text, each tool call (name, then arguments compared as JSON),
//! each result, then the number of turns and the end. Every difference is
//! reported with its turn and both sides.

use std::fmt;

use crate::types::ToolCall;

use super::tools::parse_arguments;
use super::trace::{CallOutcome, RunEnd, Trace};

/// One difference between a recording and its replay. Turns are 1-based.
#[derive(Debug, Clone, PartialEq)]
pub enum Divergence {
    /// The answer text of a turn differs.
    Answer {
        turn: usize,
        recorded: String,
        replayed: String,
    },
    /// Call `index` (1-based) of a turn is another tool or has other
    /// arguments, or is on one side only.
    ToolCall {
        turn: usize,
        index: usize,
        recorded: Option<ToolCall>,
        replayed: Option<ToolCall>,
    },
    /// A call's result differs (a tool no longer allowed, arguments its
    /// schema now refuses, a call the recording does not have).
    ToolResult {
        turn: usize,
        tool: String,
        recorded: Option<CallOutcome>,
        replayed: Option<CallOutcome>,
    },
    /// The runs took a different number of model turns.
    Turns { recorded: usize, replayed: usize },
    /// The runs ended differently (state, answer or reason).
    End {
        recorded: Option<RunEnd>,
        replayed: Option<RunEnd>,
    },
}

/// Every difference of `replayed` from `recorded`, in turn order. `asked`:
/// the model calls the replay made, counting one the recording could not
/// answer (which left no turn in the replay's events).
pub fn compare(recorded: &Trace, replayed: &Trace, asked: usize) -> Vec<Divergence> {
    let mut found = Vec::new();
    for (i, (r, p)) in recorded.turns.iter().zip(&replayed.turns).enumerate() {
        let turn = i + 1;
        if r.text != p.text {
            found.push(Divergence::Answer {
                turn,
                recorded: r.text.clone(),
                replayed: p.text.clone(),
            });
        }
        for index in 0..r.calls.len().max(p.calls.len()) {
            let (rc, pc) = (r.calls.get(index), p.calls.get(index));
            if !same_call(rc, pc) {
                found.push(Divergence::ToolCall {
                    turn,
                    index: index + 1,
                    recorded: rc.cloned(),
                    replayed: pc.cloned(),
                });
            }
        }
        for index in 0..r.results.len().max(p.results.len()) {
            let (rr, pr) = (r.results.get(index), p.results.get(index));
            let same = match (rr, pr) {
                (Some(a), Some(b)) => {
                    a.name == b.name && a.output == b.output && a.is_error == b.is_error
                }
                (None, None) => true,
                _ => false,
            };
            if !same {
                found.push(Divergence::ToolResult {
                    turn,
                    tool: rr.or(pr).map(|c| c.name.clone()).unwrap_or_default(),
                    recorded: rr.cloned(),
                    replayed: pr.cloned(),
                });
            }
        }
    }
    let replayed_turns = replayed.turns.len().max(asked);
    if recorded.turns.len() != replayed_turns {
        found.push(Divergence::Turns {
            recorded: recorded.turns.len(),
            replayed: replayed_turns,
        });
    }
    if recorded.end != replayed.end {
        found.push(Divergence::End {
            recorded: recorded.end.clone(),
            replayed: replayed.end.clone(),
        });
    }
    found
}

fn same_call(a: Option<&ToolCall>, b: Option<&ToolCall>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.name == b.name && parse_arguments(&a.arguments) == parse_arguments(&b.arguments)
        }
        (None, None) => true,
        _ => false,
    }
}

fn call(c: &Option<ToolCall>) -> String {
    match c {
        Some(c) => format!("`{}` {}", c.name, c.arguments),
        None => "(no call)".into(),
    }
}

fn result(r: &Option<CallOutcome>) -> String {
    match r {
        Some(r) if r.is_error => format!("(error) {}", r.output),
        Some(r) => r.output.clone(),
        None => "(no result)".into(),
    }
}

fn end(e: &Option<RunEnd>) -> String {
    match e {
        Some(e) => {
            let mut s = e.state.to_string();
            if let Some(reason) = &e.reason {
                s.push_str(&format!(" ({reason})"));
            }
            if let Some(output) = &e.output {
                s.push_str(&format!(": {output}"));
            }
            s
        }
        None => "(no end recorded)".into(),
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sides = |f: &mut fmt::Formatter<'_>, head: String, a: String, b: String| {
            write!(f, "{head}\n  recorded: {a}\n  replay:   {b}")
        };
        match self {
            Divergence::Answer {
                turn,
                recorded,
                replayed,
            } => sides(
                f,
                format!("turn {turn}: a different answer"),
                format!("{recorded:?}"),
                format!("{replayed:?}"),
            ),
            Divergence::ToolCall {
                turn,
                index,
                recorded,
                replayed,
            } => {
                let what = match (recorded, replayed) {
                    (Some(a), Some(b)) if a.name == b.name => "different arguments",
                    (Some(_), Some(_)) => "a different tool call",
                    (Some(_), None) => "a tool call missing",
                    _ => "an extra tool call",
                };
                sides(
                    f,
                    format!("turn {turn}: call {index}: {what}"),
                    call(recorded),
                    call(replayed),
                )
            }
            Divergence::ToolResult {
                turn,
                tool,
                recorded,
                replayed,
            } => sides(
                f,
                format!("turn {turn}: `{tool}` gave a different result"),
                result(recorded),
                result(replayed),
            ),
            Divergence::Turns { recorded, replayed } => sides(
                f,
                if replayed > recorded {
                    "more model turns".to_string()
                } else {
                    "fewer model turns".to_string()
                },
                recorded.to_string(),
                replayed.to_string(),
            ),
            Divergence::End { recorded, replayed } => {
                sides(f, "a different end".into(), end(recorded), end(replayed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::TurnTrace;
    use crate::types::RunState;

    fn turn(text: &str, calls: &[(&str, &str)], results: &[(&str, &str)]) -> TurnTrace {
        TurnTrace {
            text: text.into(),
            calls: calls
                .iter()
                .enumerate()
                .map(|(i, (n, a))| ToolCall {
                    id: format!("c{i}"),
                    name: n.to_string(),
                    arguments: a.to_string(),
                })
                .collect(),
            results: results
                .iter()
                .enumerate()
                .map(|(i, (n, o))| CallOutcome {
                    id: format!("c{i}"),
                    name: n.to_string(),
                    output: o.to_string(),
                    is_error: false,
                })
                .collect(),
            ..TurnTrace::default()
        }
    }

    fn trace(turns: Vec<TurnTrace>, output: &str) -> Trace {
        Trace {
            turns,
            end: Some(RunEnd {
                state: RunState::Succeeded,
                output: Some(output.into()),
                reason: None,
            }),
            ..Trace::default()
        }
    }

    #[test]
    fn same_runs_do_not_diverge_and_argument_order_does_not_count() {
        let a = trace(
            vec![
                turn("", &[("bash", r#"{"a":1,"b":2}"#)], &[("bash", "hi")]),
                turn("done", &[], &[]),
            ],
            "done",
        );
        let mut b = a.clone();
        b.turns[0].calls[0].arguments = r#"{ "b": 2, "a": 1 }"#.into();
        assert_eq!(compare(&a, &b, 2), vec![]);
    }

    #[test]
    fn each_difference_is_reported_with_its_turn_and_both_sides() {
        let a = trace(
            vec![
                turn("", &[("bash", r#"{"command":"ls"}"#)], &[("bash", "x")]),
                turn("done", &[], &[]),
            ],
            "done",
        );
        let b = trace(
            vec![turn(
                "",
                &[("bash", r#"{"command":"pwd"}"#)],
                &[("bash", "y")],
            )],
            "other",
        );
        let found = compare(&a, &b, 1);
        let shown: Vec<String> = found.iter().map(|d| d.to_string()).collect();
        assert_eq!(found.len(), 4, "{shown:#?}");
        assert!(shown[0].starts_with("turn 1: call 1: different arguments"));
        assert!(shown[0].contains(r#"recorded: `bash` {"command":"ls"}"#));
        assert!(shown[0].contains(r#"replay:   `bash` {"command":"pwd"}"#));
        assert!(shown[1].starts_with("turn 1: `bash` gave a different result"));
        assert_eq!(shown[2], "fewer model turns\n  recorded: 2\n  replay:   1");
        assert!(shown[3].contains("succeeded: done") && shown[3].contains("succeeded: other"));
    }
}
