//! The memory scoring math (docs/skills-and-memory.md), as pure functions: term
//! counts, IDF, vector norms, the recall score, the cleanup score, the upper
//! bound recall prunes with, and the merge rule for content. No I/O; depends
//! on `text` (the shared tokenizer) and `chrono` only. Part of the store
//! (the SQL's pruning bounds are computed with it, so the SQL side and any
//! full scan agree to the last bit); `memory` reads its constants and
//! `parse_time` as `store::memory_score`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::text::tokenize;

/// Half-life of the recency factor, in days.
pub const HALF_LIFE_DAYS: f64 = 30.0;
/// Default minimum score of a recalled memory.
pub const DEFAULT_MIN_SCORE: f64 = 0.05;
/// A saved text whose best match scores above this merges into it.
pub const MERGE_THRESHOLD: f64 = 0.8;
/// Old content under this many characters is kept when merging (`old | new`).
pub const MERGE_CONTENT_LIMIT: usize = 200;
/// Highest access count the cleanup's access score saturates at (ln(1+100)).
const CLEANUP_ACCESS_SCALE: f64 = 100.0;

/// Raw term counts of a text, in term order (so sums are deterministic).
pub type TermCounts = BTreeMap<String, u32>;

/// The term counts of `text` (tokens of [`crate::text::tokenize`]).
pub fn term_counts(text: &str) -> TermCounts {
    let mut counts = TermCounts::new();
    for token in tokenize(text) {
        *counts.entry(token).or_insert(0) += 1;
    }
    counts
}

/// IDF of a term contained in `df` of the namespace's `n` memories:
/// `ln(n/df) + 1`; a term in none of them weighs 1.
pub fn idf(n: u64, df: u64) -> f64 {
    if df == 0 || n == 0 {
        1.0
    } else {
        (n as f64 / df as f64).ln() + 1.0
    }
}

/// Euclidean norm of the TF-IDF vector of `counts`, summed in term order.
pub fn norm(counts: &TermCounts, mut idf_of: impl FnMut(&str) -> f64) -> f64 {
    counts
        .iter()
        .map(|(term, &tf)| {
            let w = f64::from(tf) * idf_of(term);
            w * w
        })
        .sum::<f64>()
        .sqrt()
}

/// Dot product of the query and document TF-IDF vectors, summed in the
/// query's term order.
pub fn dot(query: &TermCounts, doc: &TermCounts, mut idf_of: impl FnMut(&str) -> f64) -> f64 {
    query
        .iter()
        .filter_map(|(term, &qtf)| {
            doc.get(term).map(|&dtf| {
                let w = idf_of(term);
                (f64::from(qtf) * w) * (f64::from(dtf) * w)
            })
        })
        .sum()
}

/// Cosine of two vectors given their dot product and norms (0 if either is 0).
pub fn cosine(dot: f64, query_norm: f64, doc_norm: f64) -> f64 {
    if query_norm == 0.0 || doc_norm == 0.0 {
        0.0
    } else {
        dot / (query_norm * doc_norm)
    }
}

/// Parses a stored RFC 3339 timestamp.
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Days from `created` to `now`, never negative (a timestamp in the future,
/// e.g. from another machine's clock, counts as brand new).
pub fn age_days(created: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    ((now - created).num_milliseconds() as f64 / 86_400_000.0).max(0.0)
}

/// `0.5^(age/30)`.
pub fn recency_factor(age_days: f64) -> f64 {
    0.5f64.powf(age_days / HALF_LIFE_DAYS)
}

/// `0.5 + importance/10`.
pub fn importance_factor(importance: u8) -> f64 {
    0.5 + f64::from(importance) / 10.0
}

/// `1 + 0.1 ln(1 + access_count)`.
pub fn access_factor(access_count: u64) -> f64 {
    1.0 + 0.1 * (access_count as f64).ln_1p()
}

/// The recall score: cosine x recency x importance x access.
pub fn score(cosine: f64, age_days: f64, importance: u8, access_count: u64) -> f64 {
    cosine * recency_factor(age_days) * importance_factor(importance) * access_factor(access_count)
}

/// The access count a stored bound assumes: the next `2^k - 1` at or above
/// `count` (0, 1, 3, 7, 15...), so bounds change only when it doubles.
pub fn access_cap(count: u64) -> u64 {
    if count == 0 {
        0
    } else {
        count
            .saturating_add(1)
            .checked_next_power_of_two()
            .map_or(u64::MAX, |p| p - 1)
    }
}

/// Days since the Unix epoch of `t` (fractional).
fn epoch_days(t: DateTime<Utc>) -> f64 {
    t.timestamp_millis() as f64 / 86_400_000.0
}

/// A memory's "impact": log2 of an upper bound of its three boosts with the
/// clock at the Unix epoch. Independent of `now`, so postings can be stored
/// in its order: the boosts at `now` are at most
/// [`boost_bound`]`(impact, now)` (exactly the recency factor times the
/// importance factor times the access factor at [`access_cap`]).
pub fn impact(importance: u8, access_count: u64, created: DateTime<Utc>) -> f64 {
    importance_factor(importance).log2()
        + access_factor(access_cap(access_count)).log2()
        + epoch_days(created) / HALF_LIFE_DAYS
}

/// The upper bound at `now` of the boosts of a memory of this [`impact`].
pub fn boost_bound(impact: f64, now: DateTime<Utc>) -> f64 {
    (impact - epoch_days(now) / HALF_LIFE_DAYS).exp2()
}

/// Cleanup's keep score: 0.3 recency + 0.4 importance + 0.3 access, with
/// recency `exp(-age/30)` and access `ln(1+count)/ln(1+100)` (the seed's).
pub fn cleanup_score(age_days: f64, importance: u8, access_count: u64) -> f64 {
    let recency = (-age_days / HALF_LIFE_DAYS).exp();
    let importance = f64::from(importance) / 10.0;
    let access = (access_count as f64).ln_1p() / CLEANUP_ACCESS_SCALE.ln_1p();
    0.3 * recency + 0.4 * importance + 0.3 * access
}

/// How many memories cleanup keeps of a namespace over `max_entries`: 80%.
pub fn cleanup_keep(max_entries: usize) -> usize {
    max_entries.saturating_mul(4) / 5
}

/// Content after merging `new` into `old`: `old | new` while `old` has
/// fewer than 200 characters, else `new` alone.
pub fn merge_content(old: &str, new: &str) -> String {
    if old.chars().count() < MERGE_CONTENT_LIMIT {
        format!("{old} | {new}")
    } else {
        new.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors() {
        assert_eq!(idf(10, 0), 1.0);
        assert!((idf(10, 10) - 1.0).abs() < 1e-15);
        assert!((idf(100, 10) - (10f64.ln() + 1.0)).abs() < 1e-15);
        assert!((recency_factor(30.0) - 0.5).abs() < 1e-15);
        assert_eq!(importance_factor(5), 1.0);
        assert_eq!(access_factor(0), 1.0);
        assert_eq!(cleanup_keep(500), 400);
        assert_eq!(cleanup_keep(1), 0);
        assert_eq!(merge_content("a", "b"), "a | b");
        let long = "x".repeat(200);
        assert_eq!(merge_content(&long, "b"), "b");
        assert_eq!(merge_content(&"长".repeat(199), "b").chars().count(), 203);
    }

    #[test]
    fn impact_bounds_the_boosts() {
        use chrono::TimeZone;
        assert_eq!(
            [0, 1, 2, 3, 4, 7, 8].map(access_cap),
            [0, 1, 3, 3, 7, 7, 15]
        );
        let created = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
        let now = Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap();
        for (imp, acc) in [(1, 0), (5, 2), (10, 9), (7, 100)] {
            let exact = recency_factor(age_days(created, now))
                * importance_factor(imp)
                * access_factor(acc);
            let bound = boost_bound(impact(imp, acc, created), now);
            assert!(
                exact <= bound * (1.0 + 1e-12),
                "{imp} {acc}: {exact} > {bound}"
            );
            if acc == access_cap(acc) {
                assert!((exact - bound).abs() < 1e-9 * bound);
            }
        }
        // A memory from the future is at most as boosted as one made now.
        let future = boost_bound(impact(5, 0, now + chrono::Duration::days(3)), now);
        assert!(future >= 1.0);
    }

    #[test]
    fn identical_texts_have_cosine_one() {
        let a = term_counts("Rust is fast, rust is safe");
        let d = dot(&a, &a, |_| 1.7);
        let n = norm(&a, |_| 1.7);
        assert!((cosine(d, n, n) - 1.0).abs() < 1e-12);
        assert_eq!(cosine(1.0, 0.0, 1.0), 0.0);
    }
}
