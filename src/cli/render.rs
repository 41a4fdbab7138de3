//! Renders a run's events for a person: the answer text streams to stdout;
//! tool calls, results, retries and the closing line go to stderr, compact,
//! coloured on a terminal only. `aurad run` and `aurad logs` share it, so a
//! replay looks like the live run.

use std::io::{IsTerminal, Write};

use crate::types::{RunEvent, RunState, SkillActivation, StepState, Usage};

/// `event` with every text in it made [`crate::text::inert`]: what a
/// model or a tool wrote (answers, reasoning, tool results, errors) cannot
/// set the terminal's title, write its clipboard or move its cursor.
fn inert_event(event: &RunEvent) -> RunEvent {
    // The streamed pieces, one per token or so: their text alone.
    match event {
        RunEvent::TextDelta { text } => {
            return RunEvent::TextDelta {
                text: crate::text::inert(text).into_owned(),
            };
        }
        RunEvent::ReasoningDelta { text } => {
            return RunEvent::ReasoningDelta {
                text: crate::text::inert(text).into_owned(),
            };
        }
        _ => {}
    }
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => {
                if let std::borrow::Cow::Owned(safe) = crate::text::inert(text) {
                    *text = safe;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(event) else {
        return event.clone();
    };
    walk(&mut value);
    // Our own event serialised a moment ago: it reads back. Were it not to,
    // the event is shown as a note rather than raw.
    serde_json::from_value(value).unwrap_or_else(|e| RunEvent::TextDelta {
        text: format!("\n(an event could not be shown safely: {e})\n"),
    })
}

pub struct Renderer {
    color: bool,
    /// Whether stdout's last character was a newline (or nothing was written).
    at_line_start: bool,
    wrote_text: bool,
    in_reasoning: bool,
    /// No `started` line (a chat turn: the person knows what runs).
    quiet_start: bool,
}

impl Renderer {
    /// Colour when stderr is a terminal and NO_COLOR is unset or empty.
    pub fn for_terminal() -> Renderer {
        let color = super::colour_allowed(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        );
        Renderer {
            color,
            at_line_start: true,
            wrote_text: false,
            in_reasoning: false,
            quiet_start: false,
        }
    }

    /// For a chat's turns: no line for the start of each.
    pub fn for_chat() -> Renderer {
        Renderer {
            quiet_start: true,
            ..Renderer::for_terminal()
        }
    }

    /// Dim text on stderr, as the renderer writes its own notes.
    pub fn note(&mut self, text: &str) {
        self.meta(self.paint("2", text));
    }

    /// Ends the answer's line on stdout if it has no newline yet.
    pub fn end_line(&mut self) {
        self.break_line();
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Ends the current stdout line if text was streamed without a newline.
    fn break_line(&mut self) {
        if !self.at_line_start {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out);
            let _ = out.flush();
            self.at_line_start = true;
        }
    }

    fn meta(&mut self, line: String) {
        self.break_line();
        self.in_reasoning = false;
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
    }

    pub fn event(&mut self, event: &RunEvent) {
        let event = &inert_event(event);
        match event {
            RunEvent::Started {
                run_id,
                agent,
                model,
                ..
            } => {
                if !self.quiet_start {
                    self.meta(self.paint("2", &format!("▶ {agent} · {model} · run {run_id}")));
                }
            }
            RunEvent::MemoryRecalled {
                namespace,
                memories,
            } => {
                let mut line =
                    format!("… recalled {} memories from `{namespace}`:", memories.len());
                for m in memories {
                    line.push_str(&format!(
                        "\n    #{} ({:.3}) [{}] {}",
                        m.id,
                        m.score,
                        m.category,
                        one_line(&m.content, 100)
                    ));
                }
                self.meta(self.paint("2", &line));
            }
            RunEvent::SkillsActivated { skills, how } => {
                let names = skills.join(", ");
                let line = match how {
                    SkillActivation::Catalog => format!("… skills offered (catalog): {names}"),
                    SkillActivation::Loaded => format!("… skill loaded: {names}"),
                    SkillActivation::Auto | SkillActivation::Pinned => {
                        format!("… skills ({how}): {names}")
                    }
                };
                self.meta(self.paint("2", &line));
            }
            RunEvent::TextDelta { text } => {
                if self.in_reasoning {
                    self.meta(String::new());
                }
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
                if !text.is_empty() {
                    self.at_line_start = text.ends_with('\n');
                    self.wrote_text = true;
                }
            }
            RunEvent::ReasoningDelta { text } => {
                let mut err = std::io::stderr().lock();
                if !self.in_reasoning {
                    let _ = write!(err, "{}", self.paint("2;3", "thinking: "));
                    self.in_reasoning = true;
                }
                let _ = write!(err, "{}", self.paint("2;3", text));
            }
            RunEvent::ModelRetry {
                attempt,
                delay_ms,
                error,
                discarded_output,
                ..
            } => {
                let mut line = format!(
                    "! model call failed ({error}); retry {attempt} in {:.1}s",
                    *delay_ms as f64 / 1000.0
                );
                if *discarded_output {
                    line.push_str(
                        "; the partial answer above is discarded and the answer starts over",
                    );
                }
                self.meta(self.paint("33", &line));
            }
            RunEvent::ModelFallback {
                from,
                to,
                reason,
                error,
            } => {
                let line = format!(
                    "! {from} failed ({}: {error}); going on with {to}",
                    reason.as_str()
                );
                self.meta(self.paint("33", &line));
            }
            RunEvent::LimitWait {
                provider,
                waited_ms,
            } => {
                let line = format!(
                    "… waited {:.1}s for provider `{provider}`'s limits",
                    *waited_ms as f64 / 1000.0
                );
                self.meta(self.paint("2", &line));
            }
            RunEvent::ContextTrimmed {
                dropped_messages,
                estimated_tokens,
                budget,
            } => {
                let line = format!(
                    "… dropped {dropped_messages} old message(s) to fit the context ({estimated_tokens}/{budget} tokens)"
                );
                self.meta(self.paint("2", &line));
            }
            RunEvent::HistoryCompacted {
                summarized_messages,
                estimated_tokens_before,
                estimated_tokens_after,
                ..
            } => {
                let line = format!(
                    "… summarized {summarized_messages} old message(s) to fit the context ({estimated_tokens_before} -> {estimated_tokens_after} tokens)"
                );
                self.meta(self.paint("2", &line));
            }
            RunEvent::Usage { .. } => {}
            RunEvent::ApprovalRequested {
                name,
                arguments,
                timeout_at,
                ..
            } => {
                let line = format!(
                    "⏸ {name} {} waits for approval (until {}): aurad approve <run> [--deny \"reason\"]",
                    one_line(arguments, 120),
                    timeout_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                );
                self.meta(self.paint("33", &line));
            }
            RunEvent::ApprovalDecided {
                name,
                approved,
                by,
                reason,
                ..
            } => {
                let verdict = if *approved { "approved" } else { "denied" };
                let why = reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                let line = format!("… {name} {verdict} by {by}{why}");
                self.meta(self.paint("33", &line));
            }
            RunEvent::ToolCall {
                name, arguments, ..
            } => {
                let line = format!("→ {name} {}", one_line(arguments, 160));
                self.meta(self.paint("36", &line));
            }
            RunEvent::ToolResult {
                name,
                output,
                is_error,
                duration_ms,
                ..
            } => {
                let (mark, code) = if *is_error {
                    ("✗", "31")
                } else {
                    ("←", "32")
                };
                let line = format!("{mark} {name} ({duration_ms} ms) {}", one_line(output, 160));
                self.meta(self.paint(code, &line));
            }
            RunEvent::StepStarted {
                step,
                index,
                attempt,
            } => {
                let mut line = format!("▸ step {}", step_name(step, *index));
                if *attempt > 1 {
                    line.push_str(&format!(" (attempt {attempt})"));
                }
                self.meta(self.paint("2", &line));
            }
            RunEvent::StepFinished {
                step,
                index,
                state,
                output,
                error,
                retrying,
                duration_ms,
                ..
            } => {
                let name = step_name(step, *index);
                let (mark, code, detail) = match (state, retrying) {
                    (_, true) => ("↻", "33", error.clone().unwrap_or_default()),
                    (StepState::Succeeded, _) => ("✓", "32", output.clone().unwrap_or_default()),
                    (StepState::Skipped, _) => ("–", "2", error.clone().unwrap_or_default()),
                    _ => ("✗", "31", error.clone().unwrap_or_default()),
                };
                let line = format!(
                    "{mark} step {name} {state} ({duration_ms} ms) {}",
                    one_line(&detail, 120)
                );
                self.meta(self.paint(code, line.trim_end()));
            }
            RunEvent::Finished { .. } => {}
        }
    }

    /// The closing line: run id, state, reason, usage, cost.
    pub fn finish(
        &mut self,
        run_id: &str,
        state: RunState,
        reason: Option<&str>,
        usage: &Usage,
        cost_usd: Option<f64>,
    ) {
        let mut line = format!("run {run_id} {state}");
        if let Some(reason) = reason {
            line.push_str(&format!(": {}", crate::text::inert(reason)));
        }
        if let Some(tokens) = format_usage(usage) {
            line.push_str(&format!(" · {tokens} · {}", format_cost(cost_usd)));
        }
        let (mark, code) = if state == RunState::Succeeded {
            ("✓", "32")
        } else {
            ("✗", "31")
        };
        self.meta(self.paint(code, &format!("{mark} {line}")));
    }
}

/// `1234 in (1000 cached) / 56 out tokens`, or `None` when nothing was
/// reported.
pub fn format_usage(usage: &Usage) -> Option<String> {
    let show = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    if usage.input_tokens.is_none() && usage.output_tokens.is_none() {
        return None;
    }
    let cached = usage
        .cached_input_tokens
        .filter(|&n| n > 0)
        .map_or(String::new(), |n| format!(" ({n} cached)"));
    Some(format!(
        "{} in{cached} / {} out tokens",
        show(usage.input_tokens),
        show(usage.output_tokens)
    ))
}

/// `$0.0123`, or `cost unknown` (no price for the model in `prices`, or
/// token counts the provider did not report): unknown is not zero.
pub fn format_cost(cost_usd: Option<f64>) -> String {
    match cost_usd {
        Some(c) if c >= 0.01 => format!("${c:.2}"),
        Some(c) => format!("${c:.4}"),
        None => "cost unknown".into(),
    }
}

/// The text on one line, cut to `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// A step as shown: `read`, or `read[2]` for one `for_each` item.
pub fn step_name(step: &str, index: Option<usize>) -> String {
    match index {
        Some(i) => format!("{step}[{i}]"),
        None => step.to_string(),
    }
}
