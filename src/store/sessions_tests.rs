//! Tests of sessions through the [`Store`] interface, on both backends
//! (`store_test!`): a session keeps its turns' messages in order with their
//! runs, its totals and a title from the first user message; ids are
//! unique; turns sent at once to one session take turns (no message place
//! is reused); deleting a session deletes its messages.

use chrono::{Duration, Utc};

use crate::store::testing::store_test;
use crate::store::{SessionTurn, StoreError};
use crate::types::{Message, ToolCall, Usage};

fn turn(run: &str, user: &str, answer: &str, tokens: u64, cost: Option<f64>) -> SessionTurn {
    SessionTurn {
        run_id: run.into(),
        messages: vec![
            Message::User {
                content: user.into(),
            },
            Message::Assistant {
                content: answer.into(),
                tool_calls: Vec::new(),
            },
        ],
        usage: Usage {
            input_tokens: Some(tokens),
            output_tokens: Some(tokens / 2),
            ..Usage::default()
        },
        cost_usd: cost,
    }
}

store_test! {
    async fn a_session_keeps_its_turns_in_order_with_totals_and_a_title(store) {
        let t0 = Utc::now();
        let created = store.create_session("s1", "helper", t0).await.unwrap();
        assert_eq!((created.turns, created.messages, created.title.as_deref()), (0, 0, None));
        let e = store.create_session("s1", "other", t0).await.unwrap_err();
        assert!(matches!(e, StoreError::Conflict(_)), "{e}");

        let mut first = turn("r1", "\n  Plan the release\nwith details", "Here is a plan", 100, None);
        first.messages.insert(1, Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall { id: "c1".into(), name: "current_time".into(), arguments: "{}".into() }],
        });
        first.messages.insert(2, Message::Tool { tool_call_id: "c1".into(), name: "current_time".into(), content: "12:00".into(), is_error: false });
        let after = store.append_turn("s1", first.clone(), t0 + Duration::seconds(1)).await.unwrap();
        assert_eq!(after.title.as_deref(), Some("Plan the release"));
        assert_eq!((after.turns, after.messages, after.input_tokens, after.output_tokens), (1, 4, 100, 50));
        assert_eq!(after.cost_usd, None);
        let second = turn("r2", "And the changelog?", "Done", 40, Some(0.25));
        let after = store.append_turn("s1", second.clone(), t0 + Duration::seconds(2)).await.unwrap();
        assert_eq!(after.title.as_deref(), Some("Plan the release"), "the first title stays");
        assert_eq!((after.turns, after.messages, after.input_tokens), (2, 6, 140));
        assert_eq!(after.cost_usd, Some(0.25));
        assert!(after.updated_at > created.updated_at);

        let messages = store.session_messages("s1").await.unwrap();
        let seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
        let stored: Vec<Message> = messages.iter().map(|m| m.message.clone()).collect();
        let sent: Vec<Message> = first.messages.into_iter().chain(second.messages).collect();
        assert_eq!(stored, sent);
        let runs: Vec<&str> = messages.iter().filter_map(|m| m.run_id.as_deref()).collect();
        assert_eq!(runs, ["r1", "r1", "r1", "r1", "r2", "r2"]);

        let e = store.append_turn("nope", turn("r3", "x", "y", 1, None), t0).await.unwrap_err();
        assert!(matches!(e, StoreError::NotFound(_)), "{e}");
        assert_eq!(store.session("s1").await.unwrap(), Some(after));
        assert_eq!(store.session("nope").await.unwrap(), None);
    }
}

store_test! {
    async fn sessions_list_newest_first_by_agent_and_delete_with_their_messages(store) {
        let t0 = Utc::now();
        store.create_session("a1", "alpha", t0).await.unwrap();
        store.create_session("b1", "beta", t0 + Duration::seconds(1)).await.unwrap();
        store.create_session("a2", "alpha", t0 + Duration::seconds(2)).await.unwrap();
        store.append_turn("a1", turn("r1", "hi", "hello", 1, None), t0 + Duration::seconds(3)).await.unwrap();
        let ids = |list: Vec<crate::store::SessionRecord>| -> Vec<String> {
            list.into_iter().map(|s| s.id).collect()
        };
        assert_eq!(ids(store.sessions(None, 10).await.unwrap()), ["a1", "a2", "b1"]);
        assert_eq!(ids(store.sessions(Some("alpha"), 10).await.unwrap()), ["a1", "a2"]);
        assert_eq!(ids(store.sessions(None, 1).await.unwrap()), ["a1"]);
        assert!(store.delete_session("a1").await.unwrap());
        assert!(!store.delete_session("a1").await.unwrap());
        assert!(store.session_messages("a1").await.unwrap().is_empty());
        assert_eq!(ids(store.sessions(None, 10).await.unwrap()), ["a2", "b1"]);
    }
}

store_test! {
    /// Turns sent to one session at the same moment are stored one after
    /// the other: every message keeps its own place and its turn's
    /// messages stay together.
    async fn concurrent_turns_of_one_session_do_not_interleave(store) {
        let t0 = Utc::now();
        store.create_session("s", "agent", t0).await.unwrap();
        let sends = (0..8).map(|i| {
            let store = store.clone();
            async move {
                let run = format!("r{i}");
                store.append_turn("s", turn(&run, &format!("q{i}"), &format!("a{i}"), 1, None), t0).await
            }
        });
        for result in futures::future::join_all(sends).await {
            result.unwrap();
        }
        let messages = store.session_messages("s").await.unwrap();
        assert_eq!(messages.len(), 16);
        assert_eq!(messages.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=16).collect::<Vec<_>>());
        for pair in messages.chunks(2) {
            assert_eq!(pair[0].run_id, pair[1].run_id, "a turn's messages were split: {pair:?}");
        }
        assert_eq!(store.session("s").await.unwrap().unwrap().turns, 8);
    }
}
