//! Tests of sessions through the [`Store`] interface, on both backends
//! (`store_test!`): a session keeps its turns' messages in order with their
//! runs, its totals and a title from the first user message; ids are
//! unique; turns sent at once to one session take turns (no message place
//! is reused), each message as it was sent (what a wire format carries
//! with an answer included); deleting a session deletes its messages, and
//! is refused while a turn of it has not ended.

use chrono::{Duration, Utc};

use crate::store::testing::new_run;
use crate::store::testing::store_test;
use crate::store::{NewRun, RunEnd, SessionDeletion, SessionSummary, SessionTurn, StoreError};
use crate::types::RunState;
use crate::types::{Message, ToolCall, Usage};

fn turn(run: &str, user: &str, answer: &str, tokens: u64, cost: Option<f64>) -> SessionTurn {
    SessionTurn {
        run_id: run.into(),
        messages: vec![
            Message::User {
                content: user.into(),
            },
            Message::assistant(answer, Vec::new()),
        ],
        usage: Usage {
            input_tokens: Some(tokens),
            output_tokens: Some(tokens / 2),
            ..Usage::default()
        },
        cost_usd: cost,
        summary: None,
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
        // What a wire format carries with an answer (a Responses reasoning
        // item) comes back as it was stored, for the session's next turn.
        first.messages.insert(1, Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall { id: "c1".into(), name: "current_time".into(), arguments: "{}".into() }],
            provider_items: Some(serde_json::json!({ "openai_responses": [{
                "type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-opaque" }] })),
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
        assert_eq!(store.delete_session("a1").await.unwrap(), SessionDeletion::Deleted);
        assert_eq!(store.delete_session("a1").await.unwrap(), SessionDeletion::NotFound);
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

/// A run of session `session` (ids sort in creation order).
fn turn_run(id: &str, session: &str, state: RunState) -> NewRun {
    NewRun {
        id: id.into(),
        state,
        session_id: Some(session.into()),
        ..new_run("helper")
    }
}

store_test! {
    async fn a_turn_is_stored_with_its_runs_end_and_keeps_its_summary(store) {
        let now = Utc::now();
        store.create_session("s", "helper", now).await.unwrap();
        store.claim_run(turn_run("r1", "s", RunState::Running)).await.unwrap();
        let end = RunEnd::new(RunState::Succeeded, None);
        store.finish_turn("r1", vec![], end.clone(), "s", turn("r1", "one", "1", 10, None)).await.unwrap();
        let run = store.get_run("r1").await.unwrap().unwrap();
        assert_eq!((run.state, run.session_id.as_deref()), (RunState::Succeeded, Some("s")));
        let history = store.session_history("s").await.unwrap();
        assert_eq!((history.summary.as_ref(), history.messages.len()), (None, 2));
        // A second turn writes a summary of the first two messages: the
        // history now starts after them.
        store.claim_run(turn_run("r2", "s", RunState::Running)).await.unwrap();
        let mut second = turn("r2", "two", "2", 10, None);
        second.summary = Some(SessionSummary { text: "said one".into(), through: 2 });
        store.finish_turn("r2", vec![], end.clone(), "s", second).await.unwrap();
        let history = store.session_history("s").await.unwrap();
        assert_eq!(history.summary, Some(SessionSummary { text: "said one".into(), through: 2 }));
        let seqs: Vec<u64> = history.messages.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![3, 4]);
        // A turn of a deleted session: the run's end is refused with it,
        // nothing half-stored.
        store.claim_run(turn_run("r3", "gone", RunState::Running)).await.unwrap();
        let e = store.finish_turn("r3", vec![], end, "gone", turn("r3", "x", "y", 1, None)).await.unwrap_err();
        assert!(matches!(e, StoreError::NotFound(_)), "{e}");
        let run = store.get_run("r3").await.unwrap().unwrap();
        assert_eq!(run.state, RunState::Running);
    }
}

store_test! {
    async fn one_turn_at_a_time_oldest_waiting_first(store) {
        let now = Utc::now();
        store.create_session("s", "helper", now).await.unwrap();
        store.create_session("other", "helper", now).await.unwrap();
        // a3 takes the turn before the older a1 and a2 are visible.
        assert!(store.take_session_turn("s", "a3").await.unwrap());
        store.claim_run(turn_run("a3", "s", RunState::Running)).await.unwrap();
        store.claim_run(turn_run("a1", "s", RunState::Running)).await.unwrap();
        store.claim_run(turn_run("a2", "s", RunState::Queued)).await.unwrap();
        store.claim_run(turn_run("b1", "other", RunState::Running)).await.unwrap();
        // Taken: the older ones wait for it; another session does not.
        assert!(!store.take_session_turn("s", "a2").await.unwrap());
        assert!(!store.take_session_turn("s", "a1").await.unwrap());
        assert!(store.take_session_turn("other", "b1").await.unwrap());
        // a3 ends: the oldest, a1, goes; a2 waits behind it.
        store.finish_turn("a3", vec![], RunEnd::new(RunState::Succeeded, None), "s", turn("a3", "3", "3", 1, None)).await.unwrap();
        assert!(!store.take_session_turn("s", "a2").await.unwrap());
        assert!(store.take_session_turn("s", "a1").await.unwrap());
        // A holder that ended without giving the turn back holds nothing.
        store.finish_run_as("a1", vec![], RunEnd::new(RunState::Cancelled, None)).await.unwrap();
        assert!(store.take_session_turn("s", "a2").await.unwrap());
        let e = store.take_session_turn("gone", "x").await.unwrap_err();
        assert!(matches!(e, StoreError::NotFound(_)), "{e}");
    }
}

store_test! {
    async fn a_session_with_a_turn_not_ended_is_not_deleted(store) {
        let now = Utc::now();
        store.create_session("s", "helper", now).await.unwrap();
        store.claim_run(turn_run("t2", "s", RunState::Queued)).await.unwrap();
        store.claim_run(turn_run("t1", "s", RunState::Running)).await.unwrap();
        assert_eq!(
            store.delete_session("s").await.unwrap(),
            SessionDeletion::TurnsOpen(vec!["t1".into(), "t2".into()])
        );
        assert!(store.session("s").await.unwrap().is_some());
        let end = RunEnd::new(RunState::Succeeded, None);
        store.finish_turn("t1", vec![], end.clone(), "s", turn("t1", "a", "b", 1, None)).await.unwrap();
        store.finish_run_as("t2", vec![], RunEnd::new(RunState::Cancelled, None)).await.unwrap();
        assert_eq!(store.delete_session("s").await.unwrap(), SessionDeletion::Deleted);
        assert!(store.session_messages("s").await.unwrap().is_empty());
    }
}

store_test! {
    async fn idle_sessions_and_those_over_an_agents_limit_are_pruned_unless_a_turn_is_open(store) {
        let now = Utc::now();
        let old = now - Duration::days(40);
        store.create_session("idle", "a", old).await.unwrap();
        store.create_session("idle-busy", "a", old).await.unwrap();
        store.create_session("fresh", "a", now).await.unwrap();
        for (i, id) in ["b1", "b2", "b3"].iter().enumerate() {
            store.create_session(id, "b", now - Duration::minutes(10 - i as i64)).await.unwrap();
        }
        // A turn of `idle` stored (2 messages) long ago; `idle-busy` has a
        // turn still running.
        store.claim_run(turn_run("t1", "idle", RunState::Running)).await.unwrap();
        store.finish_turn("t1", vec![], RunEnd::new(RunState::Succeeded, None), "idle", turn("t1", "q", "a", 1, None)).await.unwrap();
        store.claim_run(turn_run("t2", "idle-busy", RunState::Running)).await.unwrap();
        let cutoff = now - Duration::days(30);
        // The stored turn made `idle` used now: age it again by hand.
        store.create_session("idle2", "a", old).await.unwrap();
        let dry = store.prune_sessions(cutoff, 2, 100, true).await.unwrap();
        assert_eq!(dry.sessions, 2, "{dry:?}"); // idle2 and b1
        assert!(store.session("b1").await.unwrap().is_some(), "a dry run deletes nothing");
        let done = store.prune_sessions(cutoff, 2, 100, false).await.unwrap();
        assert_eq!(done, dry);
        for gone in ["idle2", "b1"] {
            assert!(store.session(gone).await.unwrap().is_none(), "{gone} kept");
        }
        for kept in ["idle", "idle-busy", "fresh", "b2", "b3"] {
            assert!(store.session(kept).await.unwrap().is_some(), "{kept} pruned");
        }
        // Nothing left to prune.
        assert_eq!(store.prune_sessions(cutoff, 2, 100, false).await.unwrap().sessions, 0);
        // Idle and over the limit with its messages: pruned with them.
        let later = now + Duration::days(60);
        store.finish_run_as("t2", vec![], RunEnd::new(RunState::Failed, None)).await.unwrap();
        let pruned = store.prune_sessions(later - Duration::days(30), 1000, 100, false).await.unwrap();
        assert_eq!(pruned.sessions, 5);
        assert_eq!(pruned.messages, 2);
        assert!(store.session_messages("idle").await.unwrap().is_empty());
    }
}
