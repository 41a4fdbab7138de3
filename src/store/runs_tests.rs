//! Tests of runs and their events through the [`Store`] interface, each run
//! on both backends (`store_test!`).

use chrono::{DateTime, TimeZone, Utc};

use crate::store::testing::{fire_run, new_run, sid, store_test, text, texts};
use crate::store::{NewRun, RunEnd, RunFilter, Store, StoreError};
use crate::types::{RunEvent, RunState, Usage};

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 30, h, m, s).unwrap()
}

/// The seqs of a run's stored events, in order.
async fn seqs(store: &Store, run_id: &str) -> Vec<i64> {
    let events = store.run_events_after(run_id, 0).await.unwrap();
    events.into_iter().map(|(seq, _)| seq).collect()
}

/// Closes a second handle off the runtime (closing blocks).
async fn close(store: Store) {
    tokio::task::spawn_blocking(move || store.close())
        .await
        .unwrap()
        .unwrap();
}

store_test! {
    /// A run claimed, given events and finished reads back as written, by
    /// the async methods and by their blocking twins from a second handle.
    async fn claim_append_finish_round_trip(store, test) {
        let run = new_run("triage");
        store.claim_run(run.clone()).await.unwrap();

        let claimed = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(claimed.state, RunState::Running);
        assert_eq!(claimed.owner.as_deref(), Some("pid:1"));
        assert_eq!(claimed.started_at, Some(claimed.created_at));
        assert!(claimed.finished_at.is_none());
        assert_eq!(claimed.usage, Usage::default());
        // Shown as RFC 3339 UTC with milliseconds, as stored.
        let json = serde_json::to_value(&claimed).unwrap();
        let shown = json["created_at"].as_str().unwrap();
        assert!(shown.ends_with('Z') && shown.len() == 24, "{shown}");
        assert_eq!(
            chrono::DateTime::parse_from_rfc3339(shown).unwrap(),
            claimed.created_at
        );
        assert_eq!(json["finished_at"], serde_json::Value::Null);

        let usage = Usage {
            input_tokens: Some(12),
            output_tokens: Some(34),
            cached_input_tokens: Some(2),
        };
        let events = vec![
            RunEvent::Started {
                run_id: run.id.clone(),
                agent: run.agent.clone(),
                model: run.model.clone(),
                trigger: run.trigger,
                definition_hash: run.definition_hash.clone(),
                input: run.input.clone(),
            },
            text("Hi"),
            RunEvent::Usage {
                iteration: 1,
                usage,
                cost_usd: None,
                model: None,
            },
            RunEvent::Finished {
                state: RunState::Succeeded,
                reason: None,
                output: Some("Hi".into()),
                usage,
                cost_usd: None,
                result: None,
            },
        ];
        store.append_events(&run.id, events.clone()).await.unwrap();
        store
            .finish_run(&run.id, RunState::Succeeded, None, Some("Hi".into()), usage)
            .await
            .unwrap();

        let done = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(done.state, RunState::Succeeded);
        assert_eq!(done.output.as_deref(), Some("Hi"));
        assert_eq!(done.usage, usage);
        assert!(done.finished_at.is_some());
        assert_eq!(store.run_events(&run.id).await.unwrap(), events);
        assert_eq!(
            store.list_runs(&RunFilter::default()).await.unwrap(),
            vec![done.clone()]
        );

        // The blocking twins, from a second handle (another process or node).
        let other: Store = test.reopen();
        let id = run.id.clone();
        let (got, got_events) = tokio::task::spawn_blocking(move || {
            let got = other.get_run_blocking(&id).unwrap();
            let got_events = other.run_events_blocking(&id).unwrap();
            other.close().unwrap();
            (got, got_events)
        })
        .await
        .unwrap();
        assert_eq!(got, Some(done));
        assert_eq!(got_events, events);
    }
}

store_test! {
    /// A fire has one run, across handles (restarts, nodes); other fires,
    /// manual runs and queued claims behave as their own.
    async fn a_fire_is_claimed_once_even_across_restarts(store, test) {
        let first = fire_run("a", 0, at(1, 0, 0));
        store.claim_run(first.clone()).await.unwrap();
        let err = store
            .claim_run(fire_run("a", 0, at(1, 0, 0)))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            StoreError::FireTaken {
                agent: "a".into(),
                schedule_id: sid("a", 0),
                scheduled_for: "2025-03-30T01:00:00.000Z".into(),
            }
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!(
                "schedule {} fire at 2025-03-30T01:00:00.000Z",
                sid("a", 0)
            )) && message.contains("at most once"),
            "{message}"
        );
        store.claim_run(fire_run("a", 1, at(1, 0, 0))).await.unwrap();
        store.claim_run(fire_run("b", 0, at(1, 0, 0))).await.unwrap();
        store.claim_run(fire_run("a", 0, at(1, 0, 1))).await.unwrap();
        let manual = new_run("a");
        store.claim_run(manual.clone()).await.unwrap();
        store.claim_run(new_run("a")).await.unwrap();
        let queued = NewRun {
            state: RunState::Queued,
            ..fire_run("a", 2, at(2, 0, 0))
        };
        store.claim_run(queued).await.unwrap();
        assert!(matches!(
            store.claim_run(fire_run("a", 2, at(2, 0, 0))).await,
            Err(StoreError::FireTaken { .. })
        ));
        let reused = NewRun {
            id: first.id.clone(),
            ..fire_run("a", 0, at(3, 0, 0))
        };
        assert!(matches!(store.claim_run(reused).await, Err(StoreError::Conflict(_))));
        let record = store.get_run(&first.id).await.unwrap().unwrap();
        assert_eq!(record.schedule_id, Some(sid("a", 0)));
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["schedule_id"], sid("a", 0).as_str());
        assert_eq!(json["scheduled_for"], "2025-03-30T01:00:00.000Z");
        let manual = store.get_run(&manual.id).await.unwrap().unwrap();
        assert_eq!((manual.schedule_id, manual.scheduled_for), (None, None));

        let other = test.reopen();
        assert!(matches!(
            other.claim_run(fire_run("a", 0, at(1, 0, 0))).await,
            Err(StoreError::FireTaken { .. })
        ));
        assert_eq!(other.list_runs(&RunFilter::default()).await.unwrap().len(), 7);
        close(other).await;
    }
}

store_test! {
    /// Only `queued` and `running` are claims; a final state is refused.
    async fn claims_are_queued_or_running_only(store) {
        for state in RunState::ALL.into_iter().filter(|s| s.is_final()) {
            let run = NewRun {
                state,
                ..new_run("a")
            };
            let err = store.claim_run(run).await.unwrap_err();
            assert!(
                matches!(&err, StoreError::Invalid(m) if m.contains("record_unrun")),
                "{err}"
            );
        }
        assert_eq!(store.list_runs(&RunFilter::default()).await.unwrap(), vec![]);
    }
}

store_test! {
    /// A queued run keeps its template variables while it waits and starts
    /// once.
    async fn a_queued_run_starts_once(store) {
        let run = NewRun {
            state: RunState::Queued,
            template_context: Some(r#"{"x":1}"#.into()),
            session_id: None,
            ..new_run("a")
        };
        store.claim_run(run.clone()).await.unwrap();
        let queued = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(queued.state, RunState::Queued);
        assert_eq!(queued.started_at, None);
        assert_eq!(queued.owner.as_deref(), Some("pid:1"));
        assert_eq!(
            store.queued_template_context(&run.id).await.unwrap().as_deref(),
            Some(r#"{"x":1}"#)
        );
        store.append_events(&run.id, vec![text("x")]).await.unwrap();
        assert!(store.start_run(&run.id, "pid:1").await.unwrap());
        let running = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(running.state, RunState::Running);
        assert!(running.started_at.unwrap() >= running.created_at);
        assert_eq!(store.queued_template_context(&run.id).await.unwrap(), None);
        assert!(!store.start_run(&run.id, "pid:1").await.unwrap());
        assert_eq!(store.get_run(&run.id).await.unwrap().unwrap(), running);
        let err = store.start_run("nope", "pid:1").await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    }
}

store_test! {
    /// A run finished while queued (cancelled) never starts.
    async fn a_run_cancelled_while_queued_never_starts(store) {
        let queued = || NewRun {
            state: RunState::Queued,
            ..new_run("a")
        };
        let (a, b) = (queued(), queued());
        store.claim_run(a.clone()).await.unwrap();
        store.claim_run(b.clone()).await.unwrap();
        let reason = "cancelled while queued".to_string();
        let finished = RunEvent::Finished {
            state: RunState::Cancelled,
            reason: Some(reason.clone()),
            output: None,
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        };
        let seq = store
            .finish_run_with_events(
                &a.id,
                vec![finished.clone()],
                RunState::Cancelled,
                Some(reason.clone()),
                None,
                Usage::default(),
            )
            .await
            .unwrap();
        assert_eq!(seq, 1);
        store
            .finish_run(&b.id, RunState::Cancelled, None, None, Usage::default())
            .await
            .unwrap();
        for id in [&a.id, &b.id] {
            assert!(!store.start_run(id, "pid:1").await.unwrap());
            let run = store.get_run(id).await.unwrap().unwrap();
            assert_eq!(run.state, RunState::Cancelled);
            assert_eq!(run.started_at, None);
            assert!(run.finished_at.is_some());
        }
        assert_eq!(store.get_run(&a.id).await.unwrap().unwrap().error, Some(reason));
        assert_eq!(store.run_events(&a.id).await.unwrap(), vec![finished]);
    }
}

store_test! {
    /// Appends return the last seq; events after a seq are read in order.
    async fn appends_return_seqs_and_events_after_a_seq_can_be_read(store) {
        let (run, other) = (new_run("a"), new_run("a"));
        store.claim_run(run.clone()).await.unwrap();
        store.claim_run(other.clone()).await.unwrap();
        let id = run.id.as_str();
        assert_eq!(store.append_events(id, vec![]).await.unwrap(), 0);
        assert_eq!(store.run_events_after(id, 0).await.unwrap(), vec![]);
        assert_eq!(store.append_events(id, vec![text("a"), text("b")]).await.unwrap(), 2);
        assert_eq!(store.append_events(&other.id, vec![text("z")]).await.unwrap(), 1);
        assert_eq!(store.append_events(id, vec![text("c")]).await.unwrap(), 3);
        assert_eq!(store.append_events(id, vec![]).await.unwrap(), 3);
        assert_eq!(
            store.run_events_after(id, 0).await.unwrap(),
            vec![(1, text("a")), (2, text("b")), (3, text("c"))]
        );
        assert_eq!(store.run_events_after(id, 2).await.unwrap(), vec![(3, text("c"))]);
        assert_eq!(store.run_events_after(id, 3).await.unwrap(), vec![]);
        assert_eq!(store.run_events_after(id, -5).await.unwrap().len(), 3);
        let last = store
            .finish_run_with_events(id, vec![text("d")], RunState::Succeeded, None, None, Usage::default())
            .await
            .unwrap();
        assert_eq!(last, 4);
        let last = store
            .finish_run_with_events(&other.id, vec![], RunState::Failed, None, None, Usage::default())
            .await
            .unwrap();
        assert_eq!(last, 1);
        let blocking = test_blocking_events(&store, id, 3).await;
        assert_eq!(blocking, vec![(4, text("d"))]);
        for err in [
            store.run_events_after("nope", 0).await.unwrap_err(),
            store.append_events("nope", vec![]).await.unwrap_err(),
        ] {
            assert!(matches!(err, StoreError::NotFound(_)), "{err}");
        }
    }
}

/// [`Store::run_events_after_blocking`] from a blocking thread.
async fn test_blocking_events(store: &Store, id: &str, after: i64) -> Vec<(i64, RunEvent)> {
    let (store, id) = (store.clone(), id.to_owned());
    tokio::task::spawn_blocking(move || store.run_events_after_blocking(&id, after))
        .await
        .unwrap()
        .unwrap()
}

fn usage_event(input: u64, output: u64, cost_usd: Option<f64>) -> RunEvent {
    RunEvent::Usage {
        iteration: 1,
        usage: Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cached_input_tokens: None,
        },
        cost_usd,
        model: None,
    }
}

store_test! {
    /// A running run's row carries what its stored `usage` events spent;
    /// final totals are the engine's own.
    async fn a_running_run_carries_what_its_stored_usage_events_spent(store) {
        let (run, queued) = (
            new_run("a"),
            NewRun {
                state: RunState::Queued,
                ..new_run("a")
            },
        );
        store.claim_run(run.clone()).await.unwrap();
        store.claim_run(queued.clone()).await.unwrap();
        let id = run.id.as_str();
        store.append_events(id, vec![text("a")]).await.unwrap();
        let row = store.get_run(id).await.unwrap().unwrap();
        assert_eq!((row.usage, row.cost_usd), (Usage::default(), None));
        store
            .append_events(
                id,
                vec![usage_event(10, 5, Some(0.25)), text("b"), usage_event(20, 1, None)],
            )
            .await
            .unwrap();
        store.append_events(id, vec![usage_event(1, 1, Some(0.5))]).await.unwrap();
        let row = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(row.usage.input_tokens, Some(31));
        assert_eq!(row.usage.output_tokens, Some(7));
        assert_eq!(row.usage.cached_input_tokens, None);
        assert_eq!(row.cost_usd, Some(0.75));
        let since = Utc::now() - chrono::Duration::hours(1);
        assert_eq!(store.cost_since("a", since, "other").await.unwrap(), 0.75);
        assert_eq!(store.cost_since("a", since, id).await.unwrap(), 0.0);
        let end = RunEnd {
            usage: Usage {
                input_tokens: Some(31),
                output_tokens: Some(7),
                cached_input_tokens: None,
            },
            cost_usd: Some(0.75),
            ..RunEnd::new(RunState::Succeeded, None)
        };
        store.finish_run_as(id, vec![], end).await.unwrap();
        store.append_events(id, vec![usage_event(100, 100, Some(9.0))]).await.unwrap();
        assert_eq!(store.get_run(id).await.unwrap().unwrap().cost_usd, Some(0.75));
        store.append_events(&queued.id, vec![usage_event(1, 1, Some(1.0))]).await.unwrap();
        assert_eq!(store.get_run(&queued.id).await.unwrap().unwrap().cost_usd, None);
        let stopped = new_run("a");
        store.claim_run(stopped.clone()).await.unwrap();
        store.append_events(&stopped.id, vec![usage_event(4, 2, Some(0.125))]).await.unwrap();
        store
            .finish_run(&stopped.id, RunState::Cancelled, Some("cancelled".into()), None, Usage::default())
            .await
            .unwrap();
        let row = store.get_run(&stopped.id).await.unwrap().unwrap();
        assert_eq!(row.state, RunState::Cancelled);
        assert_eq!((row.usage.input_tokens, row.cost_usd), (Some(4), Some(0.125)));
    }
}

store_test! {
    /// Unknown runs are `NotFound`, a reused id a `Conflict`, a non-final
    /// finish and a short id `Invalid`.
    async fn errors_for_unknown_runs_duplicates_and_bad_states(store) {
        let run = new_run("a");
        store.claim_run(run.clone()).await.unwrap();
        assert!(matches!(store.claim_run(run.clone()).await, Err(StoreError::Conflict(_))));
        assert!(matches!(
            store.append_events("nope", vec![text("x")]).await,
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.finish_run("nope", RunState::Failed, None, None, Usage::default()).await,
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            store.finish_run(&run.id, RunState::Running, None, None, Usage::default()).await,
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(store.run_events("nope").await, Err(StoreError::NotFound(_))));
        assert_eq!(store.run_events(&run.id).await.unwrap(), vec![]);
        store.append_events(&run.id, vec![]).await.unwrap();
        assert_eq!(store.get_run("ffffffff").await.unwrap(), None);
        assert!(matches!(store.get_run("abc").await, Err(StoreError::Invalid(_))));
    }
}

store_test! {
    /// A unique id prefix finds its run; an ambiguous one lists the
    /// matches; a whole id is found exactly.
    async fn prefix_lookup_and_ambiguity(store) {
        for id in ["abcd1111", "abcd2222", "abce3333"] {
            store.claim_run(NewRun { id: id.into(), ..new_run("a") }).await.unwrap();
        }
        assert_eq!(store.get_run("abcd1").await.unwrap().unwrap().id, "abcd1111");
        assert_eq!(store.get_run("abce").await.unwrap().unwrap().id, "abce3333");
        assert_eq!(store.get_run("abcd2222").await.unwrap().unwrap().id, "abcd2222");
        assert_eq!(store.get_run("abcf").await.unwrap(), None);
        let err = store.get_run("abcd").await.unwrap_err();
        assert_eq!(
            err,
            StoreError::Ambiguous {
                prefix: "abcd".into(),
                matches: vec!["abcd1111".into(), "abcd2222".into()]
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("abcd1111, abcd2222") && message.contains("more characters"),
            "{message}"
        );
        store.claim_run(NewRun { id: "abcd".into(), ..new_run("a") }).await.unwrap();
        assert_eq!(store.get_run("abcd").await.unwrap().unwrap().id, "abcd");
    }
}

store_test! {
    /// A unique id end of 6 or more hex digits (the short id the listings
    /// show) finds its run; a shared one is ambiguous; fewer digits, or
    /// other characters, are looked up as a start only.
    async fn id_end_lookup_and_ambiguity(store) {
        for id in ["0001-aaaa-12345678", "0002-bbbb-99345678", "0003-cccc-ab12cd"] {
            store.claim_run(NewRun { id: id.into(), ..new_run("a") }).await.unwrap();
        }
        assert_eq!(store.get_run("12345678").await.unwrap().unwrap().id, "0001-aaaa-12345678");
        assert_eq!(store.get_run("ab12cd").await.unwrap().unwrap().id, "0003-cccc-ab12cd");
        let err = store.get_run("345678").await.unwrap_err();
        assert_eq!(
            err,
            StoreError::Ambiguous {
                prefix: "345678".into(),
                matches: vec!["0001-aaaa-12345678".into(), "0002-bbbb-99345678".into()]
            }
        );
        assert_eq!(store.get_run("5678").await.unwrap(), None);
        assert_eq!(store.get_run("b12cd").await.unwrap(), None);
        // A start and an end of two runs: both are candidates.
        store.claim_run(NewRun { id: "ab12cd-9".into(), ..new_run("a") }).await.unwrap();
        assert!(matches!(
            store.get_run("ab12cd").await,
            Err(StoreError::Ambiguous { matches, .. }) if matches.len() == 2
        ));
    }
}

store_test! {
    /// Seqs continue across appends and handles, per run.
    async fn seq_continues_across_appends_and_handles_without_mixing_runs(store, test) {
        let (a, b) = (new_run("a"), new_run("b"));
        store.claim_run(a.clone()).await.unwrap();
        store.claim_run(b.clone()).await.unwrap();
        store.append_events(&a.id, vec![text("a1"), text("a2")]).await.unwrap();
        store.append_events(&b.id, vec![text("b1")]).await.unwrap();
        store.append_events(&a.id, vec![text("a3")]).await.unwrap();
        let other = test.reopen();
        other.append_events(&a.id, vec![text("a4")]).await.unwrap();
        other.append_events(&b.id, vec![text("b2"), text("b3")]).await.unwrap();
        assert_eq!(texts(&store.run_events(&a.id).await.unwrap()), ["a1", "a2", "a3", "a4"]);
        assert_eq!(texts(&other.run_events(&b.id).await.unwrap()), ["b1", "b2", "b3"]);
        assert_eq!(seqs(&store, &a.id).await, [1, 2, 3, 4]);
        assert_eq!(seqs(&store, &b.id).await, [1, 2, 3]);
        close(other).await;
    }
}

store_test! {
    /// Batches appended at once from two handles (processes, nodes) keep
    /// seqs unique, each batch whole and each writer's order.
    async fn concurrent_appends_keep_seq_unique(store, test) {
        let other = test.reopen();
        let run = new_run("a");
        store.claim_run(run.clone()).await.unwrap();
        let mut tasks = Vec::new();
        for task in 0..8 {
            let handle = if task % 2 == 0 { store.clone() } else { other.clone() };
            let id = run.id.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..10 {
                    let batch = vec![text(&format!("{task}.{i}.x")), text(&format!("{task}.{i}.y"))];
                    handle.append_events(&id, batch).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let events = texts(&store.run_events(&run.id).await.unwrap());
        assert_eq!(events.len(), 160);
        for pair in events.chunks(2) {
            assert_eq!(pair[0].trim_end_matches(".x"), pair[1].trim_end_matches(".y"), "{pair:?}");
        }
        for task in 0..8 {
            let mine: Vec<&String> = events.iter().filter(|e| e.starts_with(&format!("{task}."))).collect();
            let expected: Vec<String> = (0..10)
                .flat_map(|i| [format!("{task}.{i}.x"), format!("{task}.{i}.y")])
                .collect();
            assert_eq!(mine, expected.iter().collect::<Vec<_>>());
        }
        assert_eq!(seqs(&store, &run.id).await, (1..=160).collect::<Vec<i64>>());
        close(other).await;
    }
}

store_test! {
    /// Listing filters by agent and state, newest first, with a limit.
    async fn list_filters_limit_and_order(store) {
        let mut ids = Vec::new();
        for agent in ["a", "b", "a", "b", "a"] {
            let run = new_run(agent);
            store.claim_run(run.clone()).await.unwrap();
            ids.push(run.id);
        }
        store
            .finish_run(&ids[2], RunState::Failed, Some("boom".into()), None, Usage::default())
            .await
            .unwrap();
        let filter = |agent: Option<&str>, state: Option<RunState>, limit: usize| RunFilter {
            parent: None,
            agent: agent.map(String::from),
            state,
            limit,
        };
        let ids_of = |runs: Vec<crate::store::RunRecord>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
        let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
        assert_eq!(ids_of(store.list_runs(&filter(None, None, 0)).await.unwrap()), newest_first);
        assert_eq!(ids_of(store.list_runs(&filter(None, None, 2)).await.unwrap()), newest_first[..2]);
        assert_eq!(
            ids_of(store.list_runs(&filter(Some("a"), None, 0)).await.unwrap()),
            [ids[4].clone(), ids[2].clone(), ids[0].clone()]
        );
        assert_eq!(ids_of(store.list_runs(&filter(Some("a"), None, 1)).await.unwrap()), [ids[4].clone()]);
        assert_eq!(
            ids_of(store.list_runs(&filter(None, Some(RunState::Failed), 0)).await.unwrap()),
            [ids[2].clone()]
        );
        assert!(store.list_runs(&filter(Some("b"), Some(RunState::Failed), 0)).await.unwrap().is_empty());
        assert_eq!(
            ids_of(store.list_runs(&filter(Some("b"), Some(RunState::Running), 0)).await.unwrap()),
            [ids[3].clone(), ids[1].clone()]
        );
        assert!(store.list_runs(&filter(Some("zzz"), None, 0)).await.unwrap().is_empty());
        let id = ids[2].clone();
        let other = store.clone();
        let failed = tokio::task::spawn_blocking(move || other.get_run_blocking(&id))
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(failed.error.as_deref(), Some("boom"));
        let other = store.clone();
        let listed = tokio::task::spawn_blocking(move || other.list_runs_blocking(&RunFilter::default()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(listed.len(), 5);
    }
}
