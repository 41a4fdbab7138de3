//! Generated memory text shared by the memory benches (`memory`,
//! `pg_memory`): English and CJK sentences with Zipf-like word use, stop
//! words, importances, access counts and ages, reproducible from a seed.
#![allow(dead_code, reason = "shared by several benches, each using a part")]

use aurad::memory::NewMemory;
use chrono::{Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const STOP: &[&str] = &[
    "the", "a", "is", "to", "of", "and", "in", "for", "with", "on", "user", "it",
];
pub const WORDS: &str = "project deploy friday server database backup editor theme dark light mode \
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
pub const CJK: &str = "用户喜欢使用编程项目部署周五服务器数据库备份编辑器主题深色模式测试发布版本分支合并\
    代码审查会议时间咖啡茶午餐晚餐生日城市航班酒店预算密码钥匙日志错误警告监控报警仪表盘迁移升级";

pub struct Gen {
    pub rng: StdRng,
    words: Vec<&'static str>,
    cjk: Vec<char>,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            words: WORDS.split_whitespace().collect(),
            cjk: CJK.chars().filter(|c| !c.is_whitespace()).collect(),
        }
    }

    /// A Zipf-like index into `n` items (small indexes are common).
    pub fn skewed(&mut self, n: usize) -> usize {
        let u: f64 = self.rng.random();
        ((n as f64) * u * u * u) as usize % n
    }

    pub fn sentence(&mut self, words: usize) -> String {
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

    pub fn entry(&mut self, ns: &str, now: chrono::DateTime<Utc>) -> NewMemory {
        let words = self.rng.random_range(6..16);
        let mut new = NewMemory::new(ns, self.sentence(words));
        new.importance = self.rng.random_range(1..=10);
        new.access_count = self.skewed(40) as u64;
        let age = Duration::minutes(self.rng.random_range(0..60 * 24 * 120));
        new.created_at = Some(now - age);
        new
    }
}
