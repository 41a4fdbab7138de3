//! `cargo bench --bench memory`: long-term memory at scale (issue 4).
//!
//! (a) recall latency (median, p99) at 1k, 10k and 100k memories of one
//!     namespace, with realistic text: sentences of a Zipf-like draw from an
//!     English word list plus common stop words, a quarter of them Chinese;
//!     queries are drawn the same way (so they include stop words);
//! (b) save latency with the merge check at 10k (a fifth are near-duplicates
//!     that merge);
//! (c) import of 100k entries, total time.
//!
//! `AURAD_BENCH_QUERIES` sets the number of timed recalls per size (default 300).

mod stats;
use stats::percentile;

use std::time::Instant;

use aurad::memory::NewMemory;
use aurad::store::Store;
use chrono::{Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const STOP: &[&str] = &[
    "the", "a", "is", "to", "of", "and", "in", "for", "with", "on", "user", "it",
];
const WORDS: &str = "project deploy friday server database backup editor theme dark light mode \
    python rust typescript golang java kotlin swift ruby node deno bun pnpm npm yarn cargo docker \
    kubernetes helm terraform aws gcp azure linux macos windows vim emacs vscode jetbrains git \
    github gitlab review merge branch release version tag changelog test unit integration bench \
    latency memory cpu disk network proxy cache redis postgres mysql sqlite mongo kafka queue \
    cron schedule timezone utc meeting monday tuesday wednesday thursday weekend morning evening \
    coffee tea lunch dinner vegetarian allergy peanut gluten birthday anniversary wife husband \
    daughter son dog cat berlin paris tokyo london shanghai beijing flight hotel train budget \
    invoice salary tax bank card password token key secret ssh gpg vpn wifi printer monitor \
    keyboard mouse laptop phone tablet camera photo video music podcast book novel chess tennis \
    football running cycling swimming yoga doctor dentist insurance contract lawyer client \
    customer feedback bug crash error warning log metric alert dashboard grafana prometheus \
    oncall incident outage postmortem retro sprint standup roadmap okr goal deadline estimate \
    refactor migrate upgrade deprecate license apache mit gpl api rest grpc graphql webhook \
    oauth jwt cookie session cors csrf xss sql index query join schema table column";
const CJK: &str = "用户喜欢使用编程项目部署周五服务器数据库备份编辑器主题深色模式测试发布版本分支合并\
    代码审查会议时间咖啡茶午餐晚餐生日城市航班酒店预算密码钥匙日志错误警告监控报警仪表盘迁移升级";

struct Gen {
    rng: StdRng,
    words: Vec<&'static str>,
    cjk: Vec<char>,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            words: WORDS.split_whitespace().collect(),
            cjk: CJK.chars().filter(|c| !c.is_whitespace()).collect(),
        }
    }

    /// A Zipf-like index into `n` items (small indexes are common).
    fn skewed(&mut self, n: usize) -> usize {
        let u: f64 = self.rng.random();
        ((n as f64) * u * u * u) as usize % n
    }

    fn sentence(&mut self, words: usize) -> String {
        if self.rng.random_bool(0.25) {
            return (0..words * 2)
                .map(|_| {
                    let i = self.skewed(self.cjk.len());
                    self.cjk[i]
                })
                .collect();
        }
        let mut out = Vec::new();
        for _ in 0..words {
            if self.rng.random_bool(0.35) {
                out.push(STOP[self.rng.random_range(0..STOP.len())].to_string());
            } else {
                let i = self.skewed(self.words.len());
                let w = self.words[i];
                out.push(w.to_string());
            }
        }
        out.join(" ")
    }

    fn entry(&mut self, ns: &str, now: chrono::DateTime<Utc>) -> NewMemory {
        let words = self.rng.random_range(6..16);
        let mut new = NewMemory::new(ns, self.sentence(words));
        new.importance = self.rng.random_range(1..=10);
        new.access_count = self.skewed(40) as u64;
        let age = Duration::minutes(self.rng.random_range(0..60 * 24 * 120));
        new.created_at = Some((now - age).to_rfc3339());
        new
    }
}

fn row(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "| {name:<36} | {:>9.3} | {:>9.3} | {:>9.3} | {:>6} |",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms[ms.len() - 1],
        ms.len()
    );
}

fn main() {
    let queries: usize = std::env::var("AURAD_BENCH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let now = Utc::now();
    println!(
        "| {:<36} | {:>9} | {:>9} | {:>9} | {:>6} |",
        "operation (ms)", "median", "p99", "max", "n"
    );
    println!(
        "|{:-<38}|{:->11}|{:->11}|{:->11}|{:->8}|",
        "", "", "", "", ""
    );
    let mut import_100k = None;
    for size in [1_000usize, 10_000, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("aurad.db")).unwrap();
        let mut g = Gen::new(size as u64);
        let entries: Vec<NewMemory> = (0..size).map(|_| g.entry("bench", now)).collect();
        let start = Instant::now();
        assert_eq!(store.memory_import_blocking(entries, now).unwrap(), size);
        if size == 100_000 {
            import_100k = Some(start.elapsed().as_secs_f64());
        }
        let mut ms = Vec::new();
        let mut returned = 0;
        for i in 0..queries + 20 {
            let words = g.rng.random_range(2..6);
            let q = g.sentence(words);
            let start = Instant::now();
            let found = store
                .memory_recall_blocking("bench", &q, 5, 0.05, now)
                .unwrap();
            if i >= 20 {
                ms.push(start.elapsed().as_secs_f64() * 1000.0);
                returned += found.len();
            }
        }
        row(&format!("recall top 5, {size} memories"), ms);
        eprintln!(
            "  ({:.1} memories returned per recall)",
            returned as f64 / queries as f64
        );
        if size == 10_000 {
            let mut ms = Vec::new();
            let mut merged = 0;
            for i in 0..queries {
                let new = if i % 5 == 0 {
                    let old = store.memory_list_blocking("bench", 1).unwrap().remove(0);
                    NewMemory::new("bench", old.content)
                } else {
                    g.entry("bench", now)
                };
                let start = Instant::now();
                let saved = store.memory_save_blocking(new, 1_000_000, now).unwrap();
                ms.push(start.elapsed().as_secs_f64() * 1000.0);
                merged += matches!(saved, aurad::memory::Saved::Merged(_)) as usize;
            }
            row("save with merge check, 10000 memories", ms);
            eprintln!("  ({merged} of {queries} saves merged)");
        }
        store.close().unwrap();
    }
    if let Some(secs) = import_100k {
        println!(
            "\nimport of 100000 entries (one transaction, index and norms included): {secs:.2} s"
        );
    }
}
