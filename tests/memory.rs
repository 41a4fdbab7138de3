//! Long-term memory against a real SQLite file: the scoring
//! formula with a fixed clock, merge and cleanup rules, CJK/English/mixed
//! queries, namespaces, import, the memory tools, the `aurad memory` CLI,
//! and a property test of indexed recall against a brute-force full scan.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

use aurad::types::timestamp::millis_text;
use std::collections::HashMap;

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::memory::{Memory, NewMemory, Saved, context_block, memory_tools};
use aurad::store::Store;
use aurad::tools::ToolContext;
use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, 1, 0, 0, 0).unwrap()
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    (dir, store)
}

/// A memory `age_days` old with the given importance and access count.
fn entry(ns: &str, content: &str, importance: u8, age_days: f64, access: u64) -> NewMemory {
    let created = now() - Duration::milliseconds((age_days * 86_400_000.0) as i64);
    let mut new = NewMemory::new(ns, content);
    new.importance = importance;
    new.access_count = access;
    new.created_at = Some(created);
    new
}

fn tf(text: &str) -> HashMap<String, f64> {
    let mut map = HashMap::new();
    for t in aurad::text::tokenize(text) {
        *map.entry(t).or_insert(0.0) += 1.0;
    }
    map
}

/// The formula, by a full scan written independently of the crate.
fn brute(all: &[Memory], query: &str, now: DateTime<Utc>) -> Vec<(i64, f64)> {
    let docs: Vec<HashMap<String, f64>> = all.iter().map(|m| tf(&m.content)).collect();
    let n = all.len() as f64;
    let idf = |t: &str| {
        let df = docs.iter().filter(|d| d.contains_key(t)).count() as f64;
        if df == 0.0 { 1.0 } else { (n / df).ln() + 1.0 }
    };
    let q = tf(query);
    let qn = q
        .iter()
        .map(|(t, c)| (c * idf(t)).powi(2))
        .sum::<f64>()
        .sqrt();
    let mut out = Vec::new();
    for (m, d) in all.iter().zip(&docs) {
        let dn = d
            .iter()
            .map(|(t, c)| (c * idf(t)).powi(2))
            .sum::<f64>()
            .sqrt();
        let dot: f64 = q
            .iter()
            .filter_map(|(t, c)| d.get(t).map(|dc| c * dc * idf(t) * idf(t)))
            .sum();
        let cos = if qn == 0.0 || dn == 0.0 {
            0.0
        } else {
            dot / (qn * dn)
        };
        let created = m.created_at;
        let age = ((now - created).num_milliseconds() as f64 / 86_400_000.0).max(0.0);
        let score = cos
            * 0.5f64.powf(age / 30.0)
            * (0.5 + f64::from(m.importance) / 10.0)
            * (1.0 + 0.1 * (m.access_count as f64).ln_1p());
        out.push((m.id, score));
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// Asserts `got` is the formula's top `limit` above `min` (ties tolerated).
fn assert_matches_brute(got: &[(i64, f64)], expected: &[(i64, f64)], limit: usize, min: f64) {
    let want: Vec<&(i64, f64)> = expected.iter().filter(|e| e.1 >= min).take(limit).collect();
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    let exact: HashMap<i64, f64> = expected.iter().copied().collect();
    for ((id, score), (_, want_score)) in got.iter().zip(&want) {
        assert!(
            (score - exact[id]).abs() <= 1e-9 * exact[id].max(1.0),
            "memory {id}: {score} vs {}",
            exact[id]
        );
        assert!((score - want_score).abs() <= 1e-9, "{got:?} vs {want:?}");
    }
}

fn recall(store: &Store, ns: &str, q: &str, limit: usize, min: f64) -> Vec<(i64, f64)> {
    store
        .memory_recall_blocking(ns, q, limit, min, now())
        .unwrap()
        .into_iter()
        .map(|r| (r.memory.id, r.score))
        .collect()
}

#[test]
fn exact_scores_equal_the_formula() {
    let (_d, s) = store();
    let entries = vec![
        entry("n", "The user prefers dark mode in the editor", 7, 3.0, 2),
        entry("n", "The editor font is JetBrains Mono", 5, 40.0, 0),
        entry("n", "Deploys happen on Friday", 9, 1.0, 10),
        entry("n", "用户喜欢使用 Python 编程", 5, 0.0, 0),
    ];
    s.memory_import_blocking(entries, now()).unwrap();
    let all = s.memory_list_blocking("n", 0).unwrap();
    let query = "what editor mode does the user prefer";
    let expected = brute(&all, query, now());
    let got = recall(&s, "n", query, 10, 0.0001);
    assert_eq!(got.len(), 2);
    assert_matches_brute(&got, &expected, 10, 0.0001);
}

#[test]
fn recency_importance_and_access_each_change_the_order() {
    let (_d, s) = store();
    let ids = |got: Vec<(i64, f64)>| got.into_iter().map(|g| g.0).collect::<Vec<_>>();
    // Recency: same text, importance and count; the newer wins.
    s.memory_import_blocking(
        vec![
            entry("r", "likes green tea", 5, 60.0, 0),
            entry("r", "likes green tea", 5, 1.0, 0),
        ],
        now(),
    )
    .unwrap();
    let r = ids(recall(&s, "r", "green tea", 5, 0.05));
    // Importance: same age and count.
    s.memory_import_blocking(
        vec![
            entry("i", "likes green tea", 3, 1.0, 0),
            entry("i", "likes green tea", 8, 1.0, 0),
        ],
        now(),
    )
    .unwrap();
    let i = ids(recall(&s, "i", "green tea", 5, 0.05));
    // Access: same age and importance.
    s.memory_import_blocking(
        vec![
            entry("a", "likes green tea", 5, 1.0, 0),
            entry("a", "likes green tea", 5, 1.0, 50),
        ],
        now(),
    )
    .unwrap();
    let a = ids(recall(&s, "a", "green tea", 5, 0.05));
    assert!(
        r[0] > r[1] && i[0] > i[1] && a[0] > a[1],
        "{r:?} {i:?} {a:?}"
    );
}

#[test]
fn limit_and_min_score() {
    let (_d, s) = store();
    let texts = [
        "rust async runtime",
        "rust borrow checker",
        "rust macros",
        "python asyncio",
        "go channels",
    ];
    s.memory_import_blocking(
        texts.iter().map(|t| entry("n", t, 5, 0.0, 0)).collect(),
        now(),
    )
    .unwrap();
    assert_eq!(recall(&s, "n", "rust", 2, 0.05).len(), 2);
    assert_eq!(recall(&s, "n", "rust", 10, 0.05).len(), 3);
    assert!(recall(&s, "n", "rust", 10, 0.99).is_empty());
    assert!(recall(&s, "n", "haskell", 10, 0.05).is_empty());
    assert!(recall(&s, "n", "rust", 0, 0.05).is_empty());
}

#[test]
fn merge_above_threshold_and_not_below() {
    let (_d, s) = store();
    let save = |text: &str, imp: u8, at: DateTime<Utc>| {
        let mut new = NewMemory::new("n", text);
        new.importance = imp;
        s.memory_save_blocking(new, 500, at).unwrap()
    };
    let first = save("alpha beta gamma delta epsilon zeta", 5, now());
    // Cosine 5/6 = 0.833 (every idf is 1 with one memory): merges.
    let later = now() + Duration::hours(1);
    assert_eq!(
        save("alpha beta gamma delta epsilon eta", 8, later),
        Saved::Merged(first.id())
    );
    let m = s.memory_get_blocking("n", first.id()).unwrap().unwrap();
    assert_eq!(
        m.content,
        "alpha beta gamma delta epsilon zeta | alpha beta gamma delta epsilon eta"
    );
    assert_eq!((m.importance, m.access_count), (8, 1));
    assert_eq!(millis_text(m.updated_at), "2025-06-01T01:00:00.000Z");
    assert_eq!(millis_text(m.created_at), "2025-06-01T00:00:00.000Z");
    // Cosine 3/4 = 0.75 against a fresh namespace's only memory: a new memory.
    let mut other = NewMemory::new("m", "alpha beta gamma delta");
    other.importance = 5;
    let a = s.memory_save_blocking(other.clone(), 500, now()).unwrap();
    other.content = "alpha beta gamma omega".into();
    assert!(
        matches!(s.memory_save_blocking(other, 500, now()).unwrap(), Saved::Created(b) if b != a.id())
    );
    // Old content of 200+ characters is replaced by the new text.
    let long = "kappa lambda mu ".repeat(13);
    let c = s
        .memory_save_blocking(NewMemory::new("l", long.trim()), 500, now())
        .unwrap();
    let merged = s
        .memory_save_blocking(NewMemory::new("l", "kappa lambda mu"), 500, now())
        .unwrap();
    assert_eq!(merged, Saved::Merged(c.id()));
    assert_eq!(
        s.memory_get_blocking("l", c.id()).unwrap().unwrap().content,
        "kappa lambda mu"
    );
    // The merged memory is re-indexed: its new words find it, its old ones do not.
    assert_eq!(recall(&s, "l", "kappa", 5, 0.05).len(), 1);
}

#[test]
fn cleanup_keeps_the_best_80_percent() {
    let (_d, s) = store();
    let mut entries = Vec::new();
    for i in 0..10u8 {
        entries.push(entry(
            "n",
            &format!("note number {i}"),
            1 + i % 10,
            f64::from(i) * 7.0,
            u64::from(i % 3) * 20,
        ));
    }
    s.memory_import_blocking(entries, now()).unwrap();
    let before = s.memory_list_blocking("n", 0).unwrap();
    s.memory_save_blocking(NewMemory::new("n", "a brand new unrelated fact"), 10, now())
        .unwrap();
    let after = s.memory_list_blocking("n", 0).unwrap();
    assert_eq!(after.len(), 8);
    // Expected: the 8 best of the 11 by 0.3 recency + 0.4 importance + 0.3 access.
    let mut all = before.clone();
    all.extend(
        after
            .iter()
            .filter(|m| !before.iter().any(|b| b.id == m.id))
            .cloned(),
    );
    let keep = |m: &Memory| {
        let age = (now() - m.created_at).num_milliseconds() as f64 / 86_400_000.0;
        0.3 * (-age / 30.0).exp()
            + 0.4 * f64::from(m.importance) / 10.0
            + 0.3 * (m.access_count as f64).ln_1p() / 101f64.ln()
    };
    all.sort_by(|a, b| keep(b).total_cmp(&keep(a)));
    let mut want: Vec<i64> = all.iter().take(8).map(|m| m.id).collect();
    let mut got: Vec<i64> = after.iter().map(|m| m.id).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // The deleted ones left the index.
    assert_eq!(recall(&s, "n", "note number", 20, 0.01).len(), 7);
}

#[test]
fn cjk_english_and_mixed_queries() {
    let (_d, s) = store();
    let texts = [
        "用户喜欢使用 Python 编程",
        "The project uses pnpm",
        "部署在周五进行",
    ];
    s.memory_import_blocking(
        texts.iter().map(|t| entry("n", t, 5, 0.0, 0)).collect(),
        now(),
    )
    .unwrap();
    assert_eq!(recall(&s, "n", "Python programming", 5, 0.05)[0].0, 1);
    assert_eq!(recall(&s, "n", "编程语言", 5, 0.05)[0].0, 1);
    assert_eq!(recall(&s, "n", "什么时候部署", 5, 0.05)[0].0, 3);
    assert_eq!(recall(&s, "n", "pnpm 还是 npm", 5, 0.05)[0].0, 2);
}

#[test]
fn namespaces_are_isolated_and_recall_bumps_access() {
    let (_d, s) = store();
    s.memory_import_blocking(
        vec![
            entry("a", "likes tea", 5, 0.0, 0),
            entry("b", "likes tea", 5, 0.0, 0),
        ],
        now(),
    )
    .unwrap();
    assert_eq!(recall(&s, "a", "tea", 5, 0.05).len(), 1);
    assert_eq!(recall(&s, "a", "tea", 5, 0.05).len(), 1);
    assert_eq!(s.memory_list_blocking("a", 0).unwrap()[0].access_count, 2);
    assert_eq!(s.memory_list_blocking("b", 0).unwrap()[0].access_count, 0);
    assert!(recall(&s, "c", "tea", 5, 0.05).is_empty());
    assert!(
        !s.memory_delete_blocking("b", 1).unwrap(),
        "id 1 is in namespace a"
    );
}

#[test]
fn delete_removes_from_the_index() {
    let (_d, s) = store();
    s.memory_import_blocking(
        vec![
            entry("n", "likes tea", 5, 0.0, 0),
            entry("n", "likes coffee", 5, 0.0, 0),
        ],
        now(),
    )
    .unwrap();
    assert!(s.memory_delete_blocking("n", 1).unwrap());
    assert!(recall(&s, "n", "tea", 5, 0.0001).is_empty());
    let all = s.memory_list_blocking("n", 0).unwrap();
    let got = recall(&s, "n", "likes", 5, 0.0001);
    assert_matches_brute(&got, &brute(&all, "likes", now()), 5, 0.0001);
}

#[test]
fn import_keeps_timestamps_and_counts_and_validates() {
    let (_d, s) = store();
    let mut e = entry("n", "x", 9, 0.0, 7);
    e.created_at = Some(time("2024-01-02T03:04:05.678+02:00"));
    e.updated_at = Some(time("2024-02-02T03:04:05Z"));
    assert_eq!(s.memory_import_blocking(vec![e], now()).unwrap(), 1);
    let m = &s.memory_list_blocking("n", 0).unwrap()[0];
    assert_eq!(
        (millis_text(m.created_at), millis_text(m.updated_at)),
        (
            "2024-01-02T01:04:05.678Z".to_string(),
            "2024-02-02T03:04:05.000Z".to_string()
        )
    );
    assert_eq!((m.importance, m.access_count), (9, 7));
    let bad = entry("n", "y", 11, 0.0, 0);
    let err = s
        .memory_import_blocking(vec![entry("n", "ok", 5, 0.0, 0), bad.clone()], now())
        .unwrap_err();
    assert!(err.to_string().contains("entry 1: importance 11"), "{err}");
    // A time that is not RFC 3339 never gets this far: `memory import`
    // refuses the line that has it (`memory::import`'s tests).
    assert_eq!(s.memory_count_blocking("n").unwrap(), 1);
}

#[tokio::test]
async fn tools_save_search_and_delete() {
    let (_d, s) = store();
    let tools = memory_tools(s.clone(), "agent".into(), "run-1".into());
    let by_name = |n: &str| tools.iter().find(|t| t.spec().name == n).unwrap().clone();
    let ctx = ToolContext {
        root: std::env::temp_dir(),
        cancel: Default::default(),
        output_cap: 4096,
        sandbox: Default::default(),
    };
    for t in &tools {
        assert!(
            t.spec().parameters.to_string().contains("examples"),
            "{}",
            t.spec().name
        );
    }
    let save = by_name("memory_save");
    let out = save
        .call(
            json!({"content": "The user prefers pnpm", "category": "preference", "importance": 8}),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(out, "saved memory 1");
    let out = save
        .call(json!({"content": "The user prefers pnpm"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out, "merged into memory 1");
    let found = by_name("memory_search")
        .call(json!({"query": "pnpm"}), &ctx)
        .await
        .unwrap();
    assert!(
        found.starts_with("1. [preference] The user prefers pnpm") && found.contains("id 1"),
        "{found}"
    );
    let m = s.memory_get("agent", 1).await.unwrap().unwrap();
    assert_eq!(m.run_id.as_deref(), Some("run-1"));
    let block = context_block(
        &s.memory_recall("agent", "pnpm", 5, 0.05, Utc::now())
            .await
            .unwrap(),
    );
    assert!(
        block.starts_with("## Relevant memories\n1. [preference] The user prefers pnpm"),
        "{block}"
    );
    let delete = by_name("memory_delete");
    assert_eq!(
        delete.call(json!({"id": 1}), &ctx).await.unwrap(),
        "deleted memory 1"
    );
    let err = delete
        .call(json!({"id": 1}), &ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no memory 1"), "{err}");
}

fn aurad(dir: &std::path::Path, args: &[&str]) -> assert_cmd::assert::Assert {
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .assert()
}

fn json_out(assert: assert_cmd::assert::Assert) -> Value {
    serde_json::from_slice(&assert.success().get_output().stdout).unwrap()
}

#[test]
fn cli_add_search_list_forget_import() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    aurad(
        d,
        &[
            "memory",
            "add",
            "用户喜欢使用 Python 编程",
            "--importance",
            "7",
        ],
    )
    .success()
    .stdout("saved memory 1\n");
    let added = json_out(aurad(
        d,
        &[
            "memory",
            "add",
            "The project uses pnpm",
            "--category",
            "decision",
            "--json",
        ],
    ));
    assert_eq!(
        (added[0]["id"].as_i64(), added[0]["saved"].as_str()),
        (Some(2), Some("created"))
    );
    let found = json_out(aurad(
        d,
        &["memory", "search", "Python programming", "--json"],
    ));
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(
        (found[0]["id"].as_i64(), found[0]["importance"].as_i64()),
        (Some(1), Some(7))
    );
    assert!(found[0]["score"].as_f64().unwrap() > 0.05 && found[0]["category"] == "fact");
    assert!(
        json_out(aurad(
            d,
            &[
                "memory",
                "search",
                "Python",
                "--min-score",
                "0.99",
                "--json"
            ]
        ))
        .as_array()
        .unwrap()
        .is_empty()
    );
    let listed = json_out(aurad(d, &["memory", "list", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert!(
        json_out(aurad(
            d,
            &["memory", "list", "--namespace", "other", "--json"]
        ))
        .as_array()
        .unwrap()
        .is_empty()
    );
    aurad(d, &["memory", "forget", "2"])
        .success()
        .stdout("forgot memory 2\n");
    aurad(d, &["memory", "forget", "2"])
        .code(1)
        .stderr(predicates::str::contains("no memory 2"));
    aurad(d, &["memory", "add", "x", "--importance", "11"]).code(2);

    let array = d.join("memories.json");
    std::fs::write(&array, r#"[{"id":"m1","content":"likes tea","category":"preference","importance":6,"createdAt":"2024-01-02T03:04:05.678Z","updatedAt":"2024-03-02T03:04:05.678Z","accessCount":4}]"#).unwrap();
    aurad(
        d,
        &[
            "memory",
            "import",
            array.to_str().unwrap(),
            "--namespace",
            "old",
        ],
    )
    .success()
    .stdout(predicates::str::contains(
        "imported 1 memories (JSON array)",
    ));
    let lines = d.join("memories.jsonl");
    std::fs::write(&lines, "{\"content\":\"likes coffee\",\"createdAt\":\"2024-05-01T00:00:00.000Z\",\"accessCount\":2}\n\n{\"content\":\"likes cocoa\"}\n").unwrap();
    aurad(
        d,
        &[
            "memory",
            "import",
            lines.to_str().unwrap(),
            "--namespace",
            "old",
        ],
    )
    .success()
    .stdout(predicates::str::contains(
        "imported 2 memories (JSON Lines)",
    ));
    let old = json_out(aurad(
        d,
        &[
            "memory",
            "list",
            "--namespace",
            "old",
            "--json",
            "--limit",
            "0",
        ],
    ));
    let tea = old
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "likes tea")
        .unwrap();
    assert_eq!(
        (tea["created_at"].as_str(), tea["updated_at"].as_str()),
        (
            Some("2024-01-02T03:04:05.678Z"),
            Some("2024-03-02T03:04:05.678Z")
        )
    );
    assert_eq!(
        (
            tea["access_count"].as_u64(),
            tea["metadata"]["source_id"].as_str()
        ),
        (Some(4), Some("m1"))
    );
    std::fs::write(
        &lines,
        "{\"content\":\"a\"}\n{\"content\":\"b\",\"accessCount\":-1}\n",
    )
    .unwrap();
    aurad(d, &["memory", "import", lines.to_str().unwrap()])
        .code(2)
        .stderr(predicates::str::contains("line 2: `accessCount`"));
}

const WORDS: &[&str] = &[
    "rust", "tea", "deploy", "friday", "user", "likes", "editor", "dark", "mode", "python", "编",
    "程", "用", "户", "x1",
];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS), 1..7).prop_map(|w| w.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn indexed_recall_equals_a_full_scan(
        docs in prop::collection::vec((text(), 1u8..=10, 0.0f64..120.0, 0u64..30), 1..25),
        queries in prop::collection::vec(text(), 2),
        limit in 1usize..6,
        min in prop::sample::select(vec![0.001, 0.05, 0.3]),
        removed in any::<prop::sample::Index>(),
        added in text(),
    ) {
        let (_d, s) = store();
        let entries = docs.iter().map(|(t, imp, age, acc)| entry("p", t, *imp, *age, *acc)).collect();
        s.memory_import_blocking(entries, now()).unwrap();
        let all = s.memory_list_blocking("p", 0).unwrap();
        assert_matches_brute(&recall(&s, "p", &queries[0], limit, min), &brute(&all, &queries[0], now()), limit, min);
        // Change the namespace (N and df move, cached norms go stale), then recall again.
        let victim = all[removed.index(all.len())].id;
        s.memory_delete_blocking("p", victim).unwrap();
        s.memory_save_blocking(NewMemory::new("p", added), 1000, now()).unwrap();
        let all = s.memory_list_blocking("p", 0).unwrap();
        assert_matches_brute(&recall(&s, "p", &queries[1], limit, min), &brute(&all, &queries[1], now()), limit, min);
    }
}

/// `text`, an RFC 3339 time, in UTC.
fn time(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}
