//! What a run did, turn by turn, read from its events: the answer text and
//! tool calls of each model turn, the results of those calls, and how it
//! ended. The same shape serves a stored run and a replayed one, so they
//! compare field by field.

use crate::llm::ModelTurn;
use crate::types::{RunEvent, RunState, ToolCall, Usage};

use super::tools::RecordedResult;

/// One model turn and the results of the calls it asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnTrace {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
    /// In call order.
    pub results: Vec<CallOutcome>,
    pub usage: Usage,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    /// The call's id, as the model gave it.
    pub id: String,
    pub name: String,
    pub output: String,
    pub is_error: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub state: RunState,
    pub output: Option<String>,
    pub reason: Option<String>,
}

/// A run's model turns and end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// `started.input`.
    pub input: Option<String>,
    pub turns: Vec<TurnTrace>,
    /// `None`: the run has no `finished` event (still running, or cut).
    pub end: Option<RunEnd>,
    /// The run was a pipeline (its steps are runs of their own).
    pub pipeline: bool,
}

impl Trace {
    /// Reads `events` in order. Text streamed by an attempt that was then
    /// retried is dropped, as the engine dropped it; `usage` events of
    /// sub-runs (which repeat the current iteration) are not turns.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a RunEvent>) -> Trace {
        let mut trace = Trace::default();
        let (mut text, mut reasoning) = (String::new(), String::new());
        for event in events {
            match event {
                RunEvent::Started { input, .. } => trace.input = Some(input.clone()),
                RunEvent::TextDelta { text: t } => text.push_str(t),
                RunEvent::ReasoningDelta { text: t } => reasoning.push_str(t),
                RunEvent::ModelRetry { .. } => {
                    text.clear();
                    reasoning.clear();
                }
                RunEvent::Usage {
                    iteration, usage, ..
                } if *iteration as usize == trace.turns.len() + 1 => {
                    trace.turns.push(TurnTrace {
                        text: std::mem::take(&mut text),
                        reasoning: std::mem::take(&mut reasoning),
                        usage: *usage,
                        ..TurnTrace::default()
                    });
                }
                RunEvent::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    if let Some(turn) = trace.turns.last_mut() {
                        turn.calls.push(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: arguments.clone(),
                        });
                    }
                }
                RunEvent::ToolResult {
                    id,
                    name,
                    output,
                    is_error,
                    ..
                } => {
                    if let Some(turn) = trace.turns.last_mut() {
                        turn.results.push(CallOutcome {
                            id: id.clone(),
                            name: name.clone(),
                            output: output.clone(),
                            is_error: *is_error,
                        });
                    }
                }
                RunEvent::StepStarted { .. } | RunEvent::StepFinished { .. } => {
                    trace.pipeline = true
                }
                RunEvent::Finished {
                    state,
                    output,
                    reason,
                    ..
                } => {
                    trace.end = Some(RunEnd {
                        state: *state,
                        output: output.clone(),
                        reason: reason.clone(),
                    })
                }
                _ => {}
            }
        }
        trace
    }

    /// The model answers, in order, as a provider gives them.
    pub fn model_turns(&self) -> Vec<ModelTurn> {
        self.turns
            .iter()
            .map(|t| ModelTurn {
                text: t.text.clone(),
                reasoning: t.reasoning.clone(),
                tool_calls: t.calls.clone(),
                usage: t.usage,
                finish_reason: None,
                response_id: None,
                response_model: None,
                provider_items: None,
            })
            .collect()
    }

    /// The tool results, in call order, each with its call's name and
    /// arguments (the call of its turn with the same id).
    pub fn tool_results(&self) -> Vec<RecordedResult> {
        self.turns
            .iter()
            .flat_map(|t| {
                t.results.iter().map(|r| {
                    let arguments = t
                        .calls
                        .iter()
                        .find(|c| c.id == r.id)
                        .map(|c| c.arguments.as_str())
                        .unwrap_or("{}");
                    RecordedResult::new(&r.name, arguments, &r.output, r.is_error)
                })
            })
            .collect()
    }

    /// The number of tool calls over all turns.
    pub fn call_count(&self) -> usize {
        self.turns.iter().map(|t| t.calls.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(iteration: u32) -> RunEvent {
        RunEvent::Usage {
            iteration,
            usage: Usage {
                input_tokens: Some(10),
                output_tokens: Some(5),
                cached_input_tokens: None,
            },
            cost_usd: None,
            model: None,
        }
    }

    #[test]
    fn turns_drop_retried_text_and_sub_run_usage() {
        let events = vec![
            RunEvent::TextDelta {
                text: "cut off".into(),
            },
            RunEvent::ModelRetry {
                attempt: 1,
                delay_ms: 1,
                error: "broken".into(),
                reason: Default::default(),
                discarded_output: true,
            },
            usage(1),
            RunEvent::ToolCall {
                id: "c1".into(),
                name: "agent_b".into(),
                arguments: r#"{"input":"x"}"#.into(),
            },
            // What the sub-run spent, under the same iteration: no turn.
            usage(1),
            RunEvent::ToolResult {
                id: "c1".into(),
                name: "agent_b".into(),
                output: "y".into(),
                is_error: false,
                duration_ms: 3,
            },
            RunEvent::TextDelta { text: "do".into() },
            RunEvent::TextDelta { text: "ne".into() },
            usage(2),
        ];
        let trace = Trace::from_events(&events);
        assert_eq!(trace.turns.len(), 2);
        assert_eq!(trace.turns[0].text, "");
        assert_eq!(trace.turns[1].text, "done");
        assert_eq!(trace.call_count(), 1);
        let results = trace.tool_results();
        assert_eq!(results[0].arguments, serde_json::json!({"input": "x"}));
        assert_eq!(results[0].output, "y");
        assert_eq!(trace.end, None, "no finished event");
    }
}
