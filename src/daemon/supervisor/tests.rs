//! Supervisor tests without a model: the run counts when a slot outlives
//! its run, which in-flight runs `on_overlap: replace` cancels, which
//! requests are fires of a schedule, and what a second cancel finds.

use super::*;

fn supervisor(dir: &tempfile::TempDir, limit: usize) -> Arc<Supervisor> {
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    Arc::new(Supervisor::new(
        store,
        Arc::new(Metrics::default()),
        Arc::new(crate::scheduler::clock::SystemClock),
        Arc::new(|_: &str| None),
        limit,
    ))
}

fn token(s: &Supervisor, id: &str) -> CancellationToken {
    s.lock().runs[id].cancel.clone()
}

#[test]
fn counts_saturate_when_a_slot_outlives_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let s = supervisor(&dir, 2);
    let hub = Arc::new(Hub::default());
    let (_, slot) = s
        .enter("a", "r1", None, &hub, None, &Elsewhere::default())
        .unwrap();
    assert!(slot);
    assert_eq!(s.counts(), (1, 0));
    // The moment the old code's `forget` then `release_slot` left open:
    // the run gone, its slot still counted. `runs.len() - running`
    // underflowed here.
    s.lock().remove("r1");
    assert_eq!(s.counts(), (1, 0));
    s.release_slot();
    assert_eq!(s.counts(), (0, 0));
    // `forget` now drops the run and its slot under one lock.
    let (_, slot) = s
        .enter("a", "r2", None, &hub, None, &Elsewhere::default())
        .unwrap();
    s.forget("r2", slot);
    assert_eq!(s.counts(), (0, 0));
    // A slot released twice never wraps round.
    s.release_slot();
    assert_eq!(s.counts(), (0, 0));
}

#[test]
fn replace_cancels_only_a_run_of_the_same_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let s = supervisor(&dir, 8);
    let hub = Arc::new(Hub::default());
    let morning = Some(ScheduleId::of("a", "0 9 * * *", "UTC", None));
    let evening = Some(ScheduleId::of("a", "0 18 * * *", "UTC", None));
    s.enter("a", "api", None, &hub, None, &Elsewhere::default())
        .unwrap();
    s.enter(
        "a",
        "first",
        morning.clone(),
        &hub,
        Some(OnOverlap::Replace),
        &Elsewhere::default(),
    )
    .unwrap();
    assert!(
        !token(&s, "api").is_cancelled(),
        "an API run is never replaced"
    );
    s.enter(
        "a",
        "other",
        evening.clone(),
        &hub,
        Some(OnOverlap::Replace),
        &Elsewhere::default(),
    )
    .unwrap();
    assert!(!token(&s, "first").is_cancelled(), "another schedule's run");
    s.enter(
        "a",
        "second",
        morning.clone(),
        &hub,
        Some(OnOverlap::Replace),
        &Elsewhere::default(),
    )
    .unwrap();
    assert!(token(&s, "first").is_cancelled());
    assert!(!token(&s, "api").is_cancelled());
    assert!(!token(&s, "other").is_cancelled());
    assert!(!token(&s, "second").is_cancelled());
    // Another agent's run under the same key is not this one's.
    s.enter(
        "b",
        "b-first",
        morning.clone(),
        &hub,
        None,
        &Elsewhere::default(),
    )
    .unwrap();
    s.enter(
        "a",
        "third",
        morning.clone(),
        &hub,
        Some(OnOverlap::Replace),
        &Elsewhere::default(),
    )
    .unwrap();
    assert!(!token(&s, "b-first").is_cancelled());
    assert!(token(&s, "second").is_cancelled());
}

#[test]
fn only_scheduled_fires_have_a_schedule() {
    let id = ScheduleId::of("a", "0 9 * * *", "UTC", None);
    let fire = Some(crate::store::Fire {
        schedule_id: id.clone(),
        scheduled_for: chrono::Utc::now(),
    });
    let scheduled = RunRequest {
        fire: fire.clone(),
        schedule_id: Some(id.clone()),
        ..RunRequest::new("a", Trigger::Schedule)
    };
    assert_eq!(schedule_of(&scheduled), Some(id.clone()));
    for trigger in [Trigger::Api, Trigger::Cli, Trigger::Webhook, Trigger::Retry] {
        let request = RunRequest {
            fire: fire.clone(),
            schedule_id: Some(id.clone()),
            ..RunRequest::new("a", trigger)
        };
        assert_eq!(schedule_of(&request), None, "{trigger}");
    }
}

#[test]
fn a_second_cancel_finds_the_run_cancelling_already() {
    let dir = tempfile::tempdir().unwrap();
    let s = supervisor(&dir, 2);
    let hub = Arc::new(Hub::default());
    s.enter("a", "r1", None, &hub, None, &Elsewhere::default())
        .unwrap();
    assert_eq!(s.cancel("r1"), CancelOutcome::Cancelling);
    assert!(token(&s, "r1").is_cancelled());
    // A node's poll finding the stored request again says nothing new.
    assert_eq!(s.cancel("r1"), CancelOutcome::AlreadyCancelling);
    assert_eq!(s.cancel("r2"), CancelOutcome::NotInFlight);
}
