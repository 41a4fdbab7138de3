//! Context trimming: before every model call the conversation is cut to the
//! token budget. System messages, the run's task (its first user message;
//! for a session turn, the turn's own message, after the history) and the
//! newest two messages always stay; the oldest go first; an assistant
//! message with tool calls and the tool results that answer it stay or go
//! together.

use crate::types::Message;

/// Estimated tokens of a text: 1 per CJK (wide) character, 0.25 per other
/// character.
pub fn estimate_text(text: &str) -> usize {
    let (mut cjk, mut other) = (0usize, 0usize);
    for c in text.chars() {
        if crate::text::is_wide(c) {
            cjk += 1;
        } else {
            other += 1;
        }
    }
    cjk + other.div_ceil(4)
}

/// Estimated tokens of one message, with a small per-message overhead.
pub fn estimate_message(message: &Message) -> usize {
    let calls = match message {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .map(|c| estimate_text(&c.name) + estimate_text(&c.arguments) + 4)
            .sum(),
        _ => 0,
    };
    4 + estimate_text(message.content()) + calls
}

pub fn estimate(messages: &[Message]) -> usize {
    messages.iter().map(estimate_message).sum()
}

/// What trimming did.
#[derive(Debug, Clone, PartialEq)]
pub struct Trimmed {
    pub messages: Vec<Message>,
    pub dropped: usize,
    pub estimated_tokens: usize,
}

/// Trims `messages` to `budget` estimated tokens. When even the kept minimum
/// (system messages, the task and the groups holding the newest two messages) is over
/// the budget, that minimum is returned: the model may still accept it.
pub fn trim(messages: &[Message], budget: usize) -> Trimmed {
    trim_keeping(messages, budget, 0)
}

/// [`trim`] where the task is the first user message at or after
/// `task_from` (a session turn's own message): the history before it may
/// go.
pub fn trim_keeping(messages: &[Message], budget: usize, task_from: usize) -> Trimmed {
    let total = estimate(messages);
    if total <= budget {
        return Trimmed {
            messages: messages.to_vec(),
            dropped: 0,
            estimated_tokens: total,
        };
    }
    // Groups of non-system messages: an assistant message with tool calls
    // and the tool messages that follow it form one group.
    let task = messages
        .iter()
        .skip(task_from)
        .position(|m| matches!(m, Message::User { .. }))
        .map(|i| i + task_from);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m {
            Message::System { .. } => {}
            Message::User { .. } if Some(i) == task => {}
            Message::Tool { .. } => match groups.last_mut() {
                // A tool result joins the call group it answers.
                Some(group) if is_call_group(messages, group) => group.push(i),
                _ => groups.push(vec![i]),
            },
            _ => groups.push(vec![i]),
        }
    }
    let non_system: Vec<usize> = groups.iter().flatten().copied().collect();
    let protected_from = non_system.len().saturating_sub(2);
    let protected: Vec<usize> = non_system[protected_from..].to_vec();
    let mut keep = vec![true; messages.len()];
    let mut current = total;
    for group in &groups {
        if current <= budget {
            break;
        }
        if group.iter().any(|i| protected.contains(i)) {
            break;
        }
        for &i in group {
            keep[i] = false;
            current -= estimate_message(&messages[i]);
        }
    }
    let kept: Vec<Message> = messages
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(m, _)| m.clone())
        .collect();
    Trimmed {
        dropped: messages.len() - kept.len(),
        estimated_tokens: current,
        messages: kept,
    }
}

fn is_call_group(messages: &[Message], group: &[usize]) -> bool {
    matches!(&messages[group[0]], Message::Assistant { tool_calls, .. } if !tool_calls.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolCall;
    use proptest::prelude::*;

    fn assistant_calls(n: usize, text: &str) -> Vec<Message> {
        let calls = (0..n)
            .map(|i| ToolCall {
                id: format!("c{i}"),
                name: "t".into(),
                arguments: "{}".into(),
            })
            .collect();
        let mut v = vec![Message::Assistant {
            content: text.into(),
            tool_calls: calls,
            provider_items: None,
        }];
        for i in 0..n {
            v.push(Message::Tool {
                tool_call_id: format!("c{i}"),
                name: "t".into(),
                content: text.into(),
                is_error: false,
            });
        }
        v
    }

    #[test]
    fn estimates_cjk_and_ascii() {
        assert_eq!(estimate_text("abcd"), 1);
        assert_eq!(estimate_text("abcde"), 2);
        assert_eq!(estimate_text("用户喜欢"), 4);
        assert_eq!(estimate_text("用户 likes"), 2 + 2);
    }

    #[test]
    fn under_budget_is_untouched() {
        let m = vec![Message::system("s"), Message::user("u")];
        let t = trim(&m, 1000);
        assert_eq!(t.dropped, 0);
        assert_eq!(t.messages, m);
    }

    #[test]
    fn drops_oldest_and_keeps_groups_whole() {
        let big = "x".repeat(400);
        let mut m = vec![Message::system("sys"), Message::user(big.clone())];
        m.extend(assistant_calls(2, &big));
        m.push(Message::user("newest question"));
        m.push(Message::assistant("answer", Vec::new()));
        let t = trim(&m, 60);
        assert_eq!(t.messages[0], Message::system("sys"));
        // The task (first user message) stays; the whole call group goes.
        assert_eq!(t.messages[1], Message::user(big));
        assert_eq!(t.messages.len(), 4, "{:?}", t.messages);
        assert_eq!(t.dropped, 3);
    }

    fn arb_conversation() -> impl Strategy<Value = Vec<Message>> {
        let item = prop_oneof![
            (0usize..300).prop_map(|n| vec![Message::user("u".repeat(n))]),
            (0usize..300).prop_map(|n| vec![Message::assistant("a".repeat(n), Vec::new())]),
            (1usize..4, 0usize..200).prop_map(|(k, n)| assistant_calls(k, &"r".repeat(n))),
            (0usize..100).prop_map(|n| vec![Message::system("s".repeat(n))]),
        ];
        prop::collection::vec(item, 0..12).prop_map(|v| v.into_iter().flatten().collect())
    }

    proptest! {
        #[test]
        fn trimming_invariants(messages in arb_conversation(), budget in 0usize..600) {
            let t = trim(&messages, budget);
            // System messages all stay.
            let systems = |v: &[Message]| v.iter().filter(|m| matches!(m, Message::System { .. })).count();
            prop_assert_eq!(systems(&t.messages), systems(&messages));
            // Kept messages are a subsequence in order, and the newest two non-system stay.
            let non_system: Vec<&Message> = messages.iter().filter(|m| !matches!(m, Message::System { .. })).collect();
            let kept_non_system: Vec<&Message> = t.messages.iter().filter(|m| !matches!(m, Message::System { .. })).collect();
            for last in non_system.iter().rev().take(2) {
                prop_assert!(kept_non_system.contains(last));
            }
            // The task stays.
            if let Some(task) = messages.iter().find(|m| matches!(m, Message::User { .. })) {
                prop_assert!(t.messages.contains(task));
            }
            // Every tool message follows its assistant call message.
            for (i, m) in t.messages.iter().enumerate() {
                if let Message::Tool { tool_call_id, .. } = m {
                    let owner = t.messages[..i].iter().rev().find_map(|p| match p {
                        Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| &c.id == tool_call_id) => Some(()),
                        _ => None,
                    });
                    prop_assert!(owner.is_some(), "orphan tool result {}", tool_call_id);
                }
            }
            // Every assistant call message keeps all its results.
            for (i, m) in t.messages.iter().enumerate() {
                if let Message::Assistant { tool_calls, .. } = m {
                    for (k, c) in tool_calls.iter().enumerate() {
                        let ok = matches!(t.messages.get(i + 1 + k), Some(Message::Tool { tool_call_id, .. }) if *tool_call_id == c.id);
                        prop_assert!(ok, "call {} lost its result", c.id);
                    }
                }
            }
            // It fits whenever the kept minimum fits.
            prop_assert_eq!(t.estimated_tokens, estimate(&t.messages));
            if t.estimated_tokens > budget {
                // Only the minimum is left: every non-system group left holds one of the newest two.
                let minimum = trim(&t.messages, 0);
                prop_assert_eq!(minimum.messages.len(), t.messages.len());
            }
        }
    }
}
