//! The shared run queue on both backends: taking over queued runs, the
//! owner check of starting one, cancelling a queued run, and the runs of
//! an agent in flight elsewhere.

use super::testing::{new_run, store_test};
use super::*;
use crate::types::{RunState, Trigger};

fn queued(agent: &str, owner: &str) -> NewRun {
    NewRun {
        state: RunState::Queued,
        owner: owner.into(),
        ..new_run(agent)
    }
}

store_test! {
    /// Oldest first, up to the limit, only other owners' queued top-level
    /// runs of the agents named, never a pinned agent's scheduled fire;
    /// taken runs are started under their new owner, with the template
    /// variables they were accepted with, and the node that queued them
    /// cannot start them any more.
    async fn queued_runs_are_taken_over_oldest_first(store) {
        let mut ids = Vec::new();
        for _ in 0..3 {
            let run = NewRun {
                template_context: Some(r#"{"n":1}"#.into()),
                session_id: None,
                ..queued("a", "node:A")
            };
            ids.push(run.id.clone());
            store.claim_run(run).await.unwrap();
            // Distinct creation instants (stored to the millisecond).
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let mine = queued("a", "node:B");
        store.claim_run(mine.clone()).await.unwrap();
        let running = NewRun { owner: "node:A".into(), ..new_run("a") };
        store.claim_run(running.clone()).await.unwrap();
        let child = NewRun {
            parent: Some(RunParent { run_id: running.id.clone(), depth: 1 }),
            ..queued("a", "node:A")
        };
        store.claim_run(child.clone()).await.unwrap();
        let pinned = NewRun {
            trigger: Trigger::Schedule,
            ..queued("tick", "node:A")
        };
        store.claim_run(pinned.clone()).await.unwrap();

        let all = vec!["a".to_string(), "tick".to_string()];
        // Only the agents named: this node loaded none of them.
        assert!(store.claim_queued("node:B", 10, &["other".to_string()], &[]).await.unwrap().is_empty());
        let taken = store.claim_queued("node:B", 2, &all, &["tick".to_string()]).await.unwrap();
        let taken_ids: Vec<&str> = taken.iter().map(|t| t.run.id.as_str()).collect();
        assert_eq!(taken_ids, vec![ids[0].as_str(), ids[1].as_str()]);
        for t in &taken {
            assert_eq!(t.run.owner.as_deref(), Some("node:B"));
            assert_eq!(t.run.state, RunState::Running);
            assert!(t.run.started_at.is_some());
            assert_eq!(t.template_context.as_deref(), Some(r#"{"n":1}"#));
            assert_eq!(store.get_run(&t.run.id).await.unwrap().unwrap(), t.run);
            assert_eq!(store.queued_template_context(&t.run.id).await.unwrap(), None);
        }

        let rest = store.claim_queued("node:B", 10, &all, &["tick".to_string()]).await.unwrap();
        assert_eq!(rest.iter().map(|t| t.run.id.as_str()).collect::<Vec<_>>(), vec![ids[2].as_str()]);
        assert!(store.claim_queued("node:B", 10, &all, &["tick".to_string()]).await.unwrap().is_empty());
        // Unpinned, the scheduled fire may go too.
        let fire = store.claim_queued("node:B", 10, &all, &[]).await.unwrap();
        assert_eq!(fire.iter().map(|t| t.run.id.as_str()).collect::<Vec<_>>(), vec![pinned.id.as_str()]);
        assert_eq!(fire[0].template_context, None);
        assert_eq!(store.get_run(&child.id).await.unwrap().unwrap().owner.as_deref(), Some("node:A"));

        // The node that accepted it can neither start nor cancel it.
        assert!(!store.start_run(&ids[0], "node:A").await.unwrap());
        assert!(!store.cancel_queued(&ids[0], "node:A", "no").await.unwrap());
        assert_eq!(store.get_run(&ids[0]).await.unwrap().unwrap().state, RunState::Running);
        assert!(store.claim_queued("node:C", 0, &all, &[]).await.unwrap().is_empty());
    }
}

store_test! {
    /// Only a run still queued under the owner is cancelled.
    async fn a_queued_run_is_cancelled_only_by_its_owner(store) {
        let run = queued("a", "node:A");
        store.claim_run(run.clone()).await.unwrap();
        assert!(!store.cancel_queued(&run.id, "node:B", "no").await.unwrap());
        assert!(store.cancel_queued(&run.id, "node:A", "cancelled while queued").await.unwrap());
        let stored = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(stored.state, RunState::Cancelled);
        assert_eq!(stored.error.as_deref(), Some("cancelled while queued"));
        assert!(stored.finished_at.is_some());
        assert!(!store.cancel_queued(&run.id, "node:A", "again").await.unwrap());
        assert!(!store.start_run(&run.id, "node:A").await.unwrap());

        let started = queued("a", "node:A");
        store.claim_run(started.clone()).await.unwrap();
        assert!(store.start_run(&started.id, "node:A").await.unwrap());
        assert!(!store.cancel_queued(&started.id, "node:A", "too late").await.unwrap());
        assert_eq!(store.get_run(&started.id).await.unwrap().unwrap().state, RunState::Running);
    }
}

store_test! {
    /// The agent's queued, running and waiting runs of other owners.
    async fn runs_in_flight_elsewhere_are_listed(store) {
        let here = NewRun { owner: "node:A".into(), ..new_run("a") };
        let there = NewRun { owner: "node:B".into(), ..new_run("a") };
        let there_queued = queued("a", "node:C");
        let other_agent = NewRun { owner: "node:B".into(), ..new_run("b") };
        let done = NewRun { owner: "node:B".into(), ..new_run("a") };
        for run in [&here, &there, &there_queued, &other_agent, &done] {
            store.claim_run(run.clone()).await.unwrap();
        }
        store
            .finish_run(&done.id, RunState::Succeeded, None, None, Default::default())
            .await
            .unwrap();
        let mut listed: Vec<String> = store
            .in_flight_elsewhere("a", "node:A")
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        listed.sort();
        let mut expected = vec![there.id.clone(), there_queued.id.clone()];
        expected.sort();
        assert_eq!(listed, expected);
    }
}
