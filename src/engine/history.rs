//! A session turn's history: the messages of the earlier turns the engine
//! puts between the opening system messages and the new user message, the
//! summary that stands for the oldest of them, compaction (the oldest part
//! replaced by a summary the model writes when the history is over budget),
//! and the messages a turn adds to its session when it ends. Trimming a
//! history that is not compacted is [`super::context`]'s.

use crate::types::Message;

use super::context::{estimate, estimate_message, estimate_text};

/// What a session turn is handed: the session's stored summary and the
/// messages after those it covers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnHistory {
    /// The summary of the session's oldest messages, if one was written.
    pub summary: Option<String>,
    /// The stored messages after the ones the summary covers, in order.
    pub messages: Vec<Message>,
    /// The seq of `messages[0]` in the session.
    pub first_seq: u64,
    /// Over budget, the oldest part is summarized (`history: compact`)
    /// rather than only left out of the request.
    pub compact: bool,
}

/// What a session turn ends with: the messages it adds to the session, and
/// the new summary it wrote, if any.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnRecord {
    pub messages: Vec<Message>,
    /// The new summary and the seq of the last message it covers.
    pub summary: Option<(String, u64)>,
}

/// The system message that carries a summary into the context.
pub fn summary_message(summary: &str) -> Message {
    Message::system(format!(
        "Summary of the earlier part of this conversation (its messages are no longer shown):\n{summary}"
    ))
}

/// The instruction a summary is written under.
pub const SUMMARY_INSTRUCTION: &str = "You write the running summary of a conversation between a user and an assistant that uses tools. Merge the earlier summary (if any) with the new messages into one summary that keeps what later turns need: the user's goals, requests and preferences, facts learned, decisions made, tool results that matter, and open questions. Be concise, write plain prose or short bullet points, do not address the user, and do not invent anything.";

/// The most characters of one message the summary request shows.
const MESSAGE_CHARS: usize = 2_000;

/// The request text for a summary of `earlier` plus `messages`, at most
/// `max_tokens` estimated tokens (the newest part is kept when cut).
pub fn summary_request(earlier: Option<&str>, messages: &[Message], max_tokens: usize) -> String {
    let mut lines = Vec::new();
    for m in messages {
        let line = match m {
            Message::System { content } => format!("[system] {}", cut(content)),
            Message::User { content } => format!("[user] {}", cut(content)),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut line = format!("[assistant] {}", cut(content));
                for call in tool_calls {
                    line.push_str(&format!(
                        "\n[assistant calls {}] {}",
                        call.name,
                        cut(&call.arguments)
                    ));
                }
                line
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => format!(
                "[{} {}] {}",
                name,
                if *is_error { "failed" } else { "returned" },
                cut(content)
            ),
        };
        lines.push(line);
    }
    // Newest first until the budget is spent, then back in order.
    let head = match earlier {
        Some(summary) => format!("Earlier summary:\n{summary}\n\nNew messages:\n"),
        None => "Messages:\n".to_string(),
    };
    let mut left = max_tokens.saturating_sub(estimate_text(&head));
    let mut kept = Vec::new();
    for line in lines.into_iter().rev() {
        let cost = estimate_text(&line) + 1;
        if cost > left && !kept.is_empty() {
            break;
        }
        left = left.saturating_sub(cost);
        kept.push(line);
    }
    kept.reverse();
    format!("{head}{}", kept.join("\n"))
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// How many of `history`'s oldest messages a compaction summarizes so that
/// the newest ones left fit `keep` estimated tokens: whole groups only (an
/// assistant message with tool calls and its results), and never the
/// newest two messages. 0 when nothing can go.
pub fn compaction_cut(history: &[Message], keep: usize) -> usize {
    let starts = group_starts(history);
    let protected_from = history.len().saturating_sub(2);
    let mut kept = 0usize;
    // Walk groups from the newest; the first that does not fit marks the
    // cut.
    for &start in starts.iter().rev() {
        let end = starts
            .iter()
            .find(|&&s| s > start)
            .copied()
            .unwrap_or(history.len());
        let cost: usize = history[start..end].iter().map(estimate_message).sum();
        if start >= protected_from || kept + cost <= keep {
            kept += cost;
            continue;
        }
        return end;
    }
    0
}

/// Where each group of `messages` starts: a tool result belongs to the
/// assistant message that called it.
fn group_starts(messages: &[Message]) -> Vec<usize> {
    let mut starts = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if !matches!(m, Message::Tool { .. }) || i == 0 {
            starts.push(i);
        }
    }
    starts
}

/// The messages a turn adds to its session: the person's message as they
/// wrote it, then what followed it in the conversation (the assistant's
/// messages with their tool calls and the results), then the final answer.
/// A tool call whose results are not all in (the turn stopped in between)
/// is left out with everything after it: a stored history never holds a
/// call without its result.
pub fn turn_messages(input: &str, after_input: &[Message], answer: Option<&str>) -> Vec<Message> {
    let mut turn = vec![Message::user(input)];
    let mut i = 0;
    while i < after_input.len() {
        match &after_input[i] {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                let results = after_input[i + 1..]
                    .iter()
                    .take_while(|m| matches!(m, Message::Tool { .. }))
                    .count();
                let answered = tool_calls.iter().all(|c| {
                    after_input[i + 1..i + 1 + results].iter().any(
                        |m| matches!(m, Message::Tool { tool_call_id, .. } if *tool_call_id == c.id),
                    )
                });
                if !answered {
                    return turn;
                }
                turn.extend_from_slice(&after_input[i..i + 1 + results]);
                i += 1 + results;
            }
            other => {
                turn.push(other.clone());
                i += 1;
            }
        }
    }
    if let Some(answer) = answer {
        turn.push(Message::assistant(answer.to_string(), Vec::new()));
    }
    turn
}

/// The estimated tokens of a history with `summary` in front.
pub fn history_tokens(summary: Option<&str>, messages: &[Message]) -> usize {
    summary.map_or(0, |s| estimate_message(&summary_message(s))) + estimate(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolCall;

    fn call(id: &str) -> Message {
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "t".into(),
                arguments: "{}".into(),
            }],
            provider_items: None,
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    #[test]
    fn a_turn_keeps_answered_calls_and_drops_a_dangling_one() {
        let after = vec![call("a"), result("a"), call("b")];
        let turn = turn_messages("hi", &after, None);
        assert_eq!(turn, vec![Message::user("hi"), call("a"), result("a")]);
        let turn = turn_messages("hi", &after[..2], Some("done"));
        assert_eq!(turn.len(), 4);
        assert!(matches!(&turn[3], Message::Assistant { content, .. } if content == "done"));
    }

    #[test]
    fn compaction_cuts_whole_groups_and_keeps_the_newest_two() {
        let long = "x".repeat(400);
        let history = vec![
            Message::user(&long),
            call("a"),
            result("a"),
            Message::user(&long),
            Message::user("short"),
            Message::user("newest"),
        ];
        // Room for nothing: everything but the newest two goes.
        assert_eq!(compaction_cut(&history, 0), 4);
        // Room for everything: nothing goes.
        assert_eq!(compaction_cut(&history, 10_000), 0);
        // Never between a call and its result.
        let cut = compaction_cut(&history, 120);
        assert!(cut != 2, "{cut}");
    }

    #[test]
    fn the_summary_request_keeps_the_newest_lines_within_budget() {
        let messages: Vec<Message> = (0..100)
            .map(|i| Message::user(format!("message number {i} {}", "y".repeat(100))))
            .collect();
        let text = summary_request(Some("before"), &messages, 200);
        assert!(estimate_text(&text) <= 230, "{}", estimate_text(&text));
        assert!(text.contains("message number 99"));
        assert!(!text.contains("message number 0 "));
        assert!(text.starts_with("Earlier summary:\nbefore"));
    }
}
