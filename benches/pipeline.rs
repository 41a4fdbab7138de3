//! `cargo bench --bench pipeline`: what a pipeline adds per step (issue
//! #16, goal < 5 ms per step). A pipeline of 10 template steps (a chain,
//! each rendering the previous step's output) runs in process on a real
//! SQLite store, as `aurad run` runs it: claim, a row and an event for each
//! step's start and end, the final state. The steps' own work (rendering
//! one template each) is measured alone and subtracted.
//!
//! `AURAD_BENCH_RUNS` sets the number of pipeline runs (default 50).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

mod sizes;
mod stats;
use sizes::env_usize;
use stats::{percentile, summary};

use std::sync::Arc;
use std::time::Instant;

use aurad::run::RunRequest;
use aurad::run::{Job, PipelineJob, execute};
use aurad::store::Store;
use aurad::types::RunState;
use tokio_util::sync::CancellationToken;

const STEPS: usize = 10;

fn main() {
    let runs = env_usize("AURAD_BENCH_RUNS", 50);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("agents")).unwrap();
    let mut yaml = String::from("steps:\n  - id: s0\n    template: \"{{ input }}\"\n");
    for i in 1..STEPS {
        yaml.push_str(&format!(
            "  - id: s{i}\n    template: \"{{{{ steps.s{}.output }}}}+\"\n",
            i - 1
        ));
    }
    std::fs::write(root.join("agents/chain.yaml"), yaml).unwrap();
    let loaded = aurad::config::load(root, &|_| None);
    let (snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    let snapshot = Arc::new(snapshot);
    let env: aurad::run::Env = Arc::new(|_: &str| None);
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // The steps' own work: rendering each template with a context like the
    // pipeline's.
    let render_ms: Vec<f64> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let mut last = "go".to_string();
            for _ in 0..STEPS {
                let env = minijinja::Environment::new();
                let mut steps = serde_json::Map::new();
                steps.insert("prev".into(), serde_json::json!({ "output": last }));
                last = env
                    .render_str(
                        "{{ steps.prev.output }}+",
                        minijinja::context! { steps => minijinja::value::Serde(&steps), input => "go" },
                    )
                    .unwrap();
            }
            started.elapsed().as_secs_f64() * 1000.0 / STEPS as f64
        })
        .collect();

    let mut per_step = Vec::new();
    for _ in 0..runs {
        let request = RunRequest {
            input: Some("go".into()),
            ..RunRequest::new("chain", aurad::types::Trigger::Cli)
        };
        let job = PipelineJob::prepare(&snapshot, request, &env)
            .unwrap()
            .unwrap();
        let started = Instant::now();
        let outcome = runtime
            .block_on(execute(
                Job::Pipeline(Box::new(job)),
                &store,
                CancellationToken::new(),
                |_| {},
            ))
            .unwrap();
        per_step.push(started.elapsed().as_secs_f64() * 1000.0 / STEPS as f64);
        assert_eq!(outcome.state, RunState::Succeeded, "{outcome:?}");
    }
    let own = {
        let mut sorted = render_ms.clone();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        percentile(&sorted, 0.5)
    };
    summary(
        "pipeline, 10 template steps: time per step",
        per_step.clone(),
        "ms",
    );
    summary("  the steps' own work (render) per step", render_ms, "ms");
    summary(
        "  overhead per step (time - own work)",
        per_step.iter().map(|t| t - own).collect(),
        "ms",
    );
    drop(runtime);
    store.close().unwrap();
}
