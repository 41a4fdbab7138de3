//! A pipeline run (an agent with `steps:`): one run row, its steps run as
//! their `needs:` allow (independent steps at once), each step's start and
//! end stored with its event, so a run cut by a crash resumes where it
//! stopped: a step stored `succeeded` or `skipped` is never run again, one
//! stored `running` runs again with the next attempt. A failed step (after
//! its retries) fails the run, naming it; steps not started are recorded
//! `skipped`. How one step runs is in [`step`].
//!
//! Agent steps are child runs through the one way in
//! ([`Job::prepare`](crate::run::Job::prepare), [`execute`](crate::run::execute)); they
//! run inside the pipeline's own `max_concurrent_runs` slot and never take
//! another, so a pipeline can never wait for slots it holds: its
//! parallelism is bounded by its DAG and `for_each` `concurrency` instead.
//!
//! May depend on `registry`, `engine`, `store`, `tools`, `config`.

mod approval;
mod context;
mod job;
mod step;

pub use job::PipelineJob;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::RunOutcome;
use crate::run::events::RunSink;
use crate::run::traced::{TracedRun, TracedSink};
use crate::store::{RunEnd, StepEnd, StepRecord, Store, StoreError};
use crate::types::{RunEvent, RunState, StepState, Usage};
use approval::StepApprovals;
use context::{Published, StepContext};
use job::StepResult;
use step::{StepDone, run_step};

/// Sums `add` into `total` (cost unknown only while every part is).
fn add_cost(total: &mut Option<f64>, add: Option<f64>) {
    if let Some(add) = add {
        *total = Some(total.unwrap_or(0.0) + add);
    }
}

/// Runs the pipeline of `job`, whose row is claimed and `running`, to its
/// end: streams its events to `sink` as they are stored, records the final
/// state. Cancelling `cancel` cancels its steps (and their child runs).
///
/// Boxed: an agent step's child run goes back through the run door, which
/// runs pipelines, so the future refers to itself.
pub fn run_pipeline<'a>(
    job: PipelineJob,
    store: &'a Store,
    cancel: CancellationToken,
    sink: &'a mut dyn RunSink,
) -> futures::future::BoxFuture<'a, Result<RunOutcome, StoreError>> {
    Box::pin(drive(job, store, cancel, sink))
}

async fn drive(
    job: PipelineJob,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
) -> Result<RunOutcome, StoreError> {
    let run_id = job.run_id.clone();
    let mut traced = TracedSink::new(
        sink,
        TracedRun {
            run_id: &run_id,
            agent: &job.agent,
            model: "pipeline",
            trigger: job.trigger,
            parent: None,
            resumed: job.resumed,
        },
    );
    let sink: &mut dyn RunSink = &mut traced;
    store.begin_pipeline(&run_id, job.context()).await?;
    if !job.resumed {
        let started = RunEvent::Started {
            run_id: run_id.clone(),
            agent: job.agent.clone(),
            model: "pipeline".to_string(),
            trigger: job.trigger,
            definition_hash: job.definition_hash.clone(),
            input: job.redactor.redact(&job.input).into_owned(),
        };
        let seq = store.append_events(&run_id, vec![started.clone()]).await?;
        sink.event(seq, &started);
        sink.committed(seq);
    }
    let mut prior: HashMap<String, Vec<StepRecord>> = HashMap::new();
    for record in store.steps_of(&run_id).await? {
        prior.entry(record.step.clone()).or_default().push(record);
    }
    let pipeline = job.pipeline.clone();
    // Cancelled by the caller, or by the pipeline's timeout.
    let stop = cancel.child_token();
    let (tx, mut rx) = mpsc::unbounded_channel::<Published>();
    let shared = Arc::new(StepContext {
        store: store.clone(),
        run_id: run_id.clone(),
        job,
        events: tx,
        approvals: StepApprovals::new(store.clone()),
    });
    let mut results: BTreeMap<String, StepResult> = BTreeMap::new();
    let mut waiting: Vec<usize> = (0..pipeline.steps.len()).collect();
    let mut tasks = tokio::task::JoinSet::new();
    let mut failed: Option<String> = None;
    let mut timed_out = false;
    let mut suspended = false;
    let deadline = tokio::time::sleep(shared.job.timeout);
    tokio::pin!(deadline);
    loop {
        if failed.is_none() && !suspended && !stop.is_cancelled() {
            let (ready, rest): (Vec<usize>, Vec<usize>) = waiting.iter().partition(|&&i| {
                pipeline.steps[i]
                    .needs
                    .iter()
                    .all(|need| results.contains_key(need))
            });
            waiting = rest;
            for i in ready {
                let step = pipeline.steps[i].clone();
                let steps: serde_json::Map<String, serde_json::Value> = results
                    .iter()
                    .map(|(id, r)| (id.clone(), r.to_json()))
                    .collect();
                let prior = prior.remove(&step.id).unwrap_or_default();
                let shared = shared.clone();
                let stop = stop.clone();
                tasks.spawn(async move {
                    let id = step.id.clone();
                    (id, run_step(shared, step, prior, steps, stop).await)
                });
            }
        }
        if tasks.is_empty() {
            break;
        }
        tokio::select! {
            joined = tasks.join_next() => {
                let Some(joined) = joined else { continue };
                let (id, done) = match joined {
                    Ok(pair) => pair,
                    Err(e) => {
                        failed.get_or_insert_with(|| format!("a step task panicked: {e}"));
                        continue;
                    }
                };
                match done {
                    Ok(StepDone(result)) if result.state == StepState::Running => {
                        // Waiting for approval when the daemon stops.
                        suspended = true;
                    }
                    Ok(StepDone(result)) => {
                        if result.state == StepState::Failed && failed.is_none() {
                            failed = Some(format!(
                                "step `{id}` failed: {}",
                                result.error.clone().unwrap_or_default()
                            ));
                        }
                        results.insert(id, result);
                    }
                    Err(e) => {
                        failed.get_or_insert_with(|| format!("step `{id}`: the store failed: {e}"));
                    }
                }
            }
            Some((seq, event, seen)) = rx.recv() => {
                sink.event(seq, &event);
                sink.committed(seq);
                if let Some(seen) = seen {
                    let _ = seen.send(());
                }
            }
            () = &mut deadline, if !timed_out => {
                // Time spent waiting for a person does not count.
                match shared.approvals.extension() {
                    Some(later) => deadline.as_mut().reset(tokio::time::Instant::now() + later),
                    None => {
                        timed_out = true;
                        stop.cancel();
                    }
                }
            }
        }
    }
    while let Ok((seq, event, _)) = rx.try_recv() {
        sink.event(seq, &event);
        sink.committed(seq);
    }
    if suspended && failed.is_none() && !stop.is_cancelled() {
        // Not ended: the next daemon resumes it, still waiting.
        return Ok(RunOutcome {
            turn: None,
            state: RunState::WaitingApproval,
            reason: None,
            output: None,
            usage: Usage::default(),
            cost_usd: None,
            result: None,
            iterations: 0,
        });
    }
    // Steps never started are recorded skipped.
    let why = if cancel.is_cancelled() {
        "not started: the pipeline was cancelled"
    } else if timed_out {
        "not started: the pipeline timed out"
    } else {
        "not started: an earlier step failed"
    };
    for i in waiting {
        let step = &pipeline.steps[i];
        let event = RunEvent::StepFinished {
            step: step.id.clone(),
            index: None,
            state: StepState::Skipped,
            attempt: 0,
            output: None,
            error: Some(why.to_string()),
            retrying: false,
            duration_ms: 0,
            usage: Usage::default(),
            cost_usd: None,
            child_run_id: None,
        };
        let end = StepEnd {
            state: StepState::Skipped,
            output: None,
            error: Some(why.to_string()),
            usage: Usage::default(),
            cost_usd: None,
            child_run_id: None,
        };
        let seq = store
            .step_finished(&run_id, &step.id, None, end, event.clone())
            .await?;
        sink.event(seq, &event);
        sink.committed(seq);
    }
    let mut usage = Usage::default();
    let mut cost_usd = None;
    for result in results.values() {
        usage.add(&result.usage);
        add_cost(&mut cost_usd, result.cost_usd);
    }
    let (state, reason) = if cancel.is_cancelled() {
        (RunState::Cancelled, Some("cancelled".to_string()))
    } else if timed_out {
        (
            RunState::TimedOut,
            Some(format!(
                "the pipeline ran longer than its limits.timeout ({})",
                humantime::format_duration(shared.job.timeout)
            )),
        )
    } else if let Some(reason) = failed {
        (RunState::Failed, Some(reason))
    } else {
        (RunState::Succeeded, None)
    };
    let output = (state == RunState::Succeeded).then(|| {
        pipeline
            .leaves()
            .iter()
            .filter_map(|id| results.get(*id))
            .filter(|r| r.state == StepState::Succeeded)
            .map(|r| r.output.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    });
    let finished = RunEvent::Finished {
        state,
        reason: reason.clone(),
        output: output.clone(),
        usage,
        cost_usd,
        result: None,
    };
    let end = RunEnd {
        state,
        error: reason.clone(),
        output: output.clone(),
        usage,
        cost_usd,
        result: None,
    };
    let seq = store
        .finish_run_as(&run_id, vec![finished.clone()], end)
        .await?;
    sink.event(seq, &finished);
    sink.committed(seq);
    Ok(RunOutcome {
        turn: None,
        state,
        reason,
        output,
        usage,
        cost_usd,
        result: None,
        iterations: 0,
    })
}
