//! SQLite-only parts of the scheduler's store tests, which edit the file
//! behind the store: last fire and last run (ties, a corrupt instant) and
//! old webhook delivery rows being deleted. The interface tests run on
//! both backends in `store/fires_tests.rs`.

use chrono::{Duration, TimeZone, Utc};

use super::tests::{db, fire_run, new_run, raw, sid};
use super::*;
use crate::store::*;
use crate::types::RunState;

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 10, 26, h, m, 0).unwrap()
}
#[tokio::test]
async fn last_fire_and_last_run() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.last_fire("a", &sid("a", 0)).await.unwrap(), None);
    assert_eq!(store.last_run("a").await.unwrap(), None);
    store.claim_run(fire_run("a", 0, at(1, 0))).await.unwrap();
    store
        .record_unrun(fire_run("a", 0, at(3, 0)), RunState::Missed, "m".into())
        .await
        .unwrap();
    store.claim_run(fire_run("a", 0, at(2, 0))).await.unwrap();
    store.claim_run(fire_run("a", 1, at(4, 0))).await.unwrap();
    store.claim_run(fire_run("b", 0, at(5, 0))).await.unwrap();
    let manual = new_run("a");
    store.claim_run(manual.clone()).await.unwrap();
    assert_eq!(
        store.last_fire("a", &sid("a", 0)).await.unwrap(),
        Some(at(3, 0))
    );
    assert_eq!(
        store.last_fire("a", &sid("a", 1)).await.unwrap(),
        Some(at(4, 0))
    );
    assert_eq!(store.last_fire("a", &sid("a", 2)).await.unwrap(), None);
    assert_eq!(
        store.last_fire("b", &sid("b", 0)).await.unwrap(),
        Some(at(5, 0))
    );
    assert_eq!(store.last_fire("c", &sid("c", 0)).await.unwrap(), None);
    assert_eq!(store.last_run("a").await.unwrap().unwrap().id, manual.id);
    assert_eq!(store.last_run("zzz").await.unwrap(), None);
    // Sub-second instants keep their milliseconds.
    let precise = at(6, 0) + Duration::milliseconds(250);
    store.claim_run(fire_run("a", 0, precise)).await.unwrap();
    assert_eq!(
        store.last_fire("a", &sid("a", 0)).await.unwrap(),
        Some(precise)
    );
    // Equal creation times: the greatest id is the newest.
    let conn = raw(&path);
    for id in ["zz-2", "zz-1"] {
        conn.execute(
            "INSERT INTO runs (id, agent, state, \"trigger\", input, model, definition_hash,
                               created_at)
             VALUES (?1, 't', 'succeeded', 'cli', '', 'm', 'h', '2099-01-01T00:00:00.000Z')",
            [id],
        )
        .unwrap();
    }
    assert_eq!(store.last_run("t").await.unwrap().unwrap().id, "zz-2");
    conn.execute(
        "UPDATE runs SET scheduled_for = 'yesterday', schedule_id = ?1 WHERE id = 'zz-1'",
        [sid("t", 9).as_str()],
    )
    .unwrap();
    let err = store.last_fire("t", &sid("t", 9)).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRun { run_id, .. } if run_id == "zz-1"),
        "{err}"
    );
    store.close().unwrap();
}
#[tokio::test]
async fn webhook_deliveries_are_deduplicated_for_a_day() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let t0 = at(12, 0);
    assert!(store.claim_delivery("a", "d1", t0).await.unwrap());
    assert!(!store.claim_delivery("a", "d1", t0).await.unwrap());
    // Another agent or delivery id is new.
    assert!(store.claim_delivery("b", "d1", t0).await.unwrap());
    assert!(store.claim_delivery("a", "d2", t0).await.unwrap());
    // Still remembered 24 hours later, to the millisecond.
    let day = Duration::hours(24);
    assert!(!store.claim_delivery("a", "d1", t0 + day).await.unwrap());
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    assert!(
        !store
            .claim_delivery("a", "d1", t0 + Duration::hours(1))
            .await
            .unwrap()
    );
    // Forgotten after that: it counts as new, and old rows are deleted.
    let later = t0 + day + Duration::milliseconds(1);
    assert!(store.claim_delivery("a", "d1", later).await.unwrap());
    assert!(!store.claim_delivery("a", "d1", later).await.unwrap());
    let left: Vec<(String, String)> = raw(&path)
        .prepare("SELECT agent, delivery_id FROM webhook_deliveries ORDER BY agent, delivery_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(left, [("a".to_string(), "d1".to_string())]);
    store.close().unwrap();
}
