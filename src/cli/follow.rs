//! `aurad logs -f AGENT`: follows an agent's runs from the store, with or
//! without a daemon in this process's view: the newest run if it is still
//! going, else the next one to start; each run's events as they are stored,
//! its closing line, then the run created after it, and so on until Ctrl-C.

use std::io::Write;

use super::EXIT_FAILED;
use super::render::Renderer;
use super::runs::{FOLLOW_POLL, Output, print_events};
use crate::app::run_or_agent::{newest_run, newest_runs};
use crate::app::{RunRecord, Store, StoreError};

/// How many of an agent's newest runs are looked at for the next one.
const LOOK_BACK: usize = 50;

/// Is `run` created after `than` (creation time, then id: ids are
/// time-ordered)?
fn is_after(run: &RunRecord, than: &RunRecord) -> bool {
    (run.created_at, run.id.as_str()) > (than.created_at, than.id.as_str())
}

/// The oldest run of `agent` created after `after` (any run when `None`).
fn next_run(
    store: &Store,
    agent: &str,
    after: Option<&RunRecord>,
) -> Result<Option<RunRecord>, StoreError> {
    Ok(newest_runs(store, agent, LOOK_BACK)?
        .into_iter()
        .filter(|run| after.is_none_or(|a| is_after(run, a)))
        .min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id))))
}

/// Follows the runs of `agent` until the process is stopped; returns only
/// on an error (its exit code).
pub(super) fn agent(store: &Store, agent: &str, json: bool) -> i32 {
    let fail = |e: StoreError| {
        eprintln!("error: {e}");
        EXIT_FAILED
    };
    let mut renderer = Renderer::for_terminal();
    let output = Output {
        json,
        run_id_in_json: true,
    };
    // The newest run is followed if it is still going; else the next one.
    let mut after = match newest_run(store, agent) {
        Ok(run) => run,
        Err(e) => return fail(e),
    };
    let mut current = after.take_if(|run| !run.state.is_final());
    if current.is_some() {
        after = None;
    }
    let mut waiting = false;
    loop {
        let run = match current.take() {
            Some(run) => run,
            None => match next_run(store, agent, after.as_ref()) {
                Ok(Some(run)) => run,
                Ok(None) => {
                    if !waiting && !json {
                        eprintln!(
                            "(waiting for a run of {agent} to start; Ctrl-C stops following)"
                        );
                    }
                    waiting = true;
                    std::thread::sleep(FOLLOW_POLL);
                    continue;
                }
                Err(e) => return fail(e),
            },
        };
        waiting = false;
        if !json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "── run {} of {agent} ({}, {}) ──",
                run.id,
                run.trigger,
                run.created_at.format("%Y-%m-%d %H:%M:%S")
            );
            let _ = out.flush();
        }
        let (run, _) = match print_events(store, run, true, output, &mut renderer) {
            Ok(done) => done,
            Err(code) => return code,
        };
        if !json {
            renderer.finish(
                &run.id,
                run.state,
                run.error.as_deref(),
                &run.usage,
                run.cost_usd,
            );
        }
        after = Some(run);
    }
}
