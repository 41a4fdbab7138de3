//! One step of a pipeline run ([`pipeline`](crate::run::pipeline)): its `when:`,
//! its `for_each:` fan-out under `concurrency`, and each attempt (per step,
//! or per item) with `retry:` and `timeout:`, each start and end stored
//! with its event. What was stored finished by an earlier process is taken
//! as it is, never run again.
//!
//! May depend on `registry`, `engine`, `store`, `tools`, `config`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value as Json};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::approval::{Gate, gate};
use super::context::{StepContext, render_strings};
use super::job::StepResult;
use crate::config::steps::{Step, StepAction};
use crate::registry::ceiling::Ceiling;
use crate::run::template::{environment, render_error};
use crate::run::{Job, RunRequest, execute};
use crate::store::{RunParent, StepEnd, StepRecord, StoreError};
use crate::tools::sandbox::Sandbox;
use crate::tools::{DEFAULT_OUTPUT_CAP, ToolContext};
use crate::types::{RunEvent, RunState, StepState, ToolCall, Trigger, Usage};

/// A step ran to its end (which may be `failed`), or, `running`, was left
/// waiting for approval by the daemon stopping.
pub(crate) struct StepDone(pub StepResult);

/// One attempt's result.
struct Attempt {
    output: Result<String, String>,
    usage: Usage,
    cost_usd: Option<f64>,
    child_run_id: Option<String>,
}

impl Attempt {
    fn plain(output: Result<String, String>) -> Attempt {
        Attempt {
            output,
            usage: Usage::default(),
            cost_usd: None,
            child_run_id: None,
        }
    }
}

impl StepContext {
    /// [`publish`](Self::publish), returning once the run's sink has the
    /// event: a step's child run then starts with the step's span open, so
    /// its trace sits under it.
    async fn publish_seen(&self, seq: i64, event: RunEvent) {
        let (seen, handed) = oneshot::channel();
        if self.events.send((seq, event, Some(seen))).is_ok() {
            // An error: the loop ended without it, nobody waits for it.
            let _ = handed.await;
        }
    }

    async fn finish(
        &self,
        step: &str,
        index: Option<usize>,
        attempt: u32,
        started: Instant,
        state: StepState,
        done: &Attempt,
    ) -> Result<(), StoreError> {
        let (output, error) = match &done.output {
            Ok(output) => (self.redact(Some(output.clone())), None),
            Err(error) => (None, self.redact(Some(error.clone()))),
        };
        let event = RunEvent::StepFinished {
            step: step.to_string(),
            index,
            state,
            attempt,
            output: output.clone(),
            error: error.clone(),
            retrying: false,
            duration_ms: started.elapsed().as_millis() as u64,
            usage: done.usage,
            cost_usd: done.cost_usd,
            child_run_id: done.child_run_id.clone(),
        };
        let end = StepEnd {
            state,
            output,
            error,
            usage: done.usage,
            cost_usd: done.cost_usd,
            child_run_id: done.child_run_id.clone(),
        };
        let seq = self
            .store
            .step_finished(&self.run_id, step, index, end, event.clone())
            .await?;
        self.publish(seq, event);
        Ok(())
    }
}

/// The result a stored, finished row stands for.
fn stored_result(row: &StepRecord, outputs: Option<Vec<String>>) -> StepResult {
    StepResult {
        state: row.state,
        output: row.output.clone().unwrap_or_default(),
        outputs,
        error: row.error.clone(),
        usage: row.usage,
        cost_usd: row.cost_usd,
    }
}

/// The items `for_each` rendered to: a JSON list (strings as they are,
/// other values as JSON), else one item per non-empty line.
fn split_items(rendered: &str) -> Vec<String> {
    if let Ok(Json::Array(items)) = serde_json::from_str::<Json>(rendered.trim()) {
        return items
            .into_iter()
            .map(|v| match v {
                Json::String(s) => s,
                other => other.to_string(),
            })
            .collect();
    }
    rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Runs `step` (whose `needs` have ended; `steps` holds their results) to
/// its end, resuming from its stored rows `prior`.
pub(crate) async fn run_step(
    ctx: Arc<StepContext>,
    step: Step,
    prior: Vec<StepRecord>,
    steps: Map<String, Json>,
    stop: CancellationToken,
) -> Result<StepDone, StoreError> {
    let own = prior.iter().find(|r| r.item.is_none());
    let item_row = |i: usize| prior.iter().find(|r| r.item == Some(i));
    if let Some(row) = own.filter(|r| r.state.is_final()) {
        let outputs = row.items.as_ref().map(|items| {
            (0..items.len())
                .map(|i| {
                    item_row(i)
                        .and_then(|r| r.output.clone())
                        .unwrap_or_default()
                })
                .collect()
        });
        return Ok(StepDone(stored_result(row, outputs)));
    }
    let started = Instant::now();
    if own.is_none()
        && let Some(when) = &step.when
    {
        let env = environment();
        let holds = env
            .compile_expression(when)
            .and_then(|e| e.eval(ctx.context(&steps, None)))
            .map(|v| v.is_true());
        match holds {
            Ok(true) => {}
            Ok(false) => {
                let done = Attempt::plain(Err(format!("`when` is false: {when}")));
                ctx.finish(&step.id, None, 0, started, StepState::Skipped, &done)
                    .await?;
                return Ok(StepDone(StepResult {
                    state: StepState::Skipped,
                    output: String::new(),
                    outputs: step.for_each.is_some().then(Vec::new),
                    error: done.output.err(),
                    usage: Usage::default(),
                    cost_usd: None,
                }));
            }
            Err(e) => {
                let done = Attempt::plain(Err(format!("cannot evaluate `when`: {e}")));
                ctx.finish(&step.id, None, 1, started, StepState::Failed, &done)
                    .await?;
                return Ok(StepDone(failed(done)));
            }
        }
    }
    if step.approve && own.is_none() {
        match gate(&ctx, &step, &steps, &stop).await? {
            Gate::Approved => {}
            Gate::Denied(why) => {
                let done = Attempt::plain(Err(why));
                ctx.finish(&step.id, None, 0, started, StepState::Failed, &done)
                    .await?;
                return Ok(StepDone(failed(done)));
            }
            // Not ended: nothing is stored for the step.
            Gate::Suspended => {
                return Ok(StepDone(StepResult {
                    state: StepState::Running,
                    ..failed(Attempt::plain(Ok(String::new())))
                }));
            }
        }
    }
    let Some(for_each) = &step.for_each else {
        let attempts = own.map_or(0, |r| r.attempts);
        let done = run_attempts(&ctx, &step, None, attempts, &steps, &stop).await?;
        return Ok(StepDone(done));
    };
    // The items: as first rendered (a resumed step fans out over the same).
    let items = match own.and_then(|r| r.items.clone()) {
        Some(items) => items,
        None => match environment().render_str(for_each, ctx.context(&steps, None)) {
            Ok(rendered) => split_items(&rendered),
            Err(e) => {
                let done = Attempt::plain(Err(format!(
                    "cannot render `for_each`: {}",
                    render_error(&e)
                )));
                ctx.finish(&step.id, None, 1, started, StepState::Failed, &done)
                    .await?;
                return Ok(StepDone(failed(done)));
            }
        },
    };
    if own.is_none() {
        let event = RunEvent::StepStarted {
            step: step.id.clone(),
            index: None,
            attempt: 1,
        };
        let seq = ctx
            .store
            .step_started(&ctx.run_id, &step.id, None, 1, Some(&items), event.clone())
            .await?;
        ctx.publish(seq, event);
    }
    let gate = Arc::new(Semaphore::new(step.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, item) in items.iter().enumerate() {
        let row = item_row(index).cloned();
        let (ctx, step, steps, stop, gate) = (
            ctx.clone(),
            step.clone(),
            steps.clone(),
            stop.clone(),
            gate.clone(),
        );
        let item = item.clone();
        tasks.spawn(async move {
            if let Some(row) = row.as_ref().filter(|r| r.state.is_final()) {
                return (index, Ok(stored_result(row, None)));
            }
            let Ok(_permit) = gate.acquire_owned().await else {
                return (index, Err(StoreError::Closed));
            };
            let attempts = row.map_or(0, |r| r.attempts);
            let mut steps = steps;
            steps.insert(
                "__item".to_string(),
                serde_json::json!({ "index": index, "item": item }),
            );
            let result = run_attempts(&ctx, &step, Some(index), attempts, &steps, &stop).await;
            (index, result)
        });
    }
    let mut results: Vec<Option<StepResult>> = vec![None; items.len()];
    let mut store_error = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Ok(result))) => results[index] = Some(result),
            Ok((_, Err(e))) => store_error = Some(e),
            Err(e) => {
                store_error = Some(StoreError::Internal(format!("a step item panicked: {e}")))
            }
        }
    }
    if let Some(e) = store_error {
        return Err(e);
    }
    let results: Vec<StepResult> = results.into_iter().flatten().collect();
    let mut total = Attempt::plain(Ok(String::new()));
    for r in &results {
        total.usage.add(&r.usage);
        if let Some(c) = r.cost_usd {
            total.cost_usd = Some(total.cost_usd.unwrap_or(0.0) + c);
        }
    }
    let outputs: Vec<String> = results.iter().map(|r| r.output.clone()).collect();
    let first_failure = results
        .iter()
        .enumerate()
        .find(|(_, r)| r.state != StepState::Succeeded);
    let state = match first_failure {
        Some((index, r)) => {
            total.output = Err(format!(
                "item {index} ({:?}): {}",
                items[index],
                r.error.clone().unwrap_or_default()
            ));
            StepState::Failed
        }
        None => {
            total.output = Ok(outputs.join("\n"));
            StepState::Succeeded
        }
    };
    ctx.finish(&step.id, None, 1, started, state, &total)
        .await?;
    let (output, error) = match total.output {
        Ok(output) => (output, None),
        Err(error) => (String::new(), Some(error)),
    };
    Ok(StepDone(StepResult {
        state,
        output,
        outputs: Some(outputs),
        error,
        usage: total.usage,
        cost_usd: total.cost_usd,
    }))
}

fn failed(done: Attempt) -> StepResult {
    StepResult {
        state: StepState::Failed,
        output: String::new(),
        outputs: None,
        error: done.output.err(),
        usage: done.usage,
        cost_usd: done.cost_usd,
    }
}

/// Runs the attempts of `step` (item `index`) after the `done` attempts
/// an earlier process started, until one succeeds or `retry.attempts` are
/// used up (a step cut off by a crash always gets one more).
async fn run_attempts(
    ctx: &Arc<StepContext>,
    step: &Step,
    index: Option<usize>,
    done: u32,
    steps: &Map<String, Json>,
    stop: &CancellationToken,
) -> Result<StepResult, StoreError> {
    let mut attempt = done;
    let mut usage = Usage::default();
    let mut cost_usd: Option<f64> = None;
    loop {
        attempt += 1;
        let started = Instant::now();
        let event = RunEvent::StepStarted {
            step: step.id.clone(),
            index,
            attempt,
        };
        let seq = ctx
            .store
            .step_started(&ctx.run_id, &step.id, index, attempt, None, event.clone())
            .await?;
        ctx.publish_seen(seq, event).await;
        let mut result = run_attempt(ctx, step, steps, stop).await;
        usage.add(&result.usage);
        if let Some(c) = result.cost_usd {
            cost_usd = Some(cost_usd.unwrap_or(0.0) + c);
        }
        let retry = result.output.is_err() && attempt < step.retry.attempts && !stop.is_cancelled();
        if retry {
            let event = RunEvent::StepFinished {
                step: step.id.clone(),
                index,
                state: StepState::Running,
                attempt,
                output: None,
                error: ctx.redact(result.output.clone().err()),
                retrying: true,
                duration_ms: started.elapsed().as_millis() as u64,
                usage: result.usage,
                cost_usd: result.cost_usd,
                child_run_id: result.child_run_id.clone(),
            };
            ctx.record(event).await?;
            tokio::select! {
                () = tokio::time::sleep(step.retry.delay(attempt)) => continue,
                () = stop.cancelled() => {}
            }
        }
        result.usage = usage;
        result.cost_usd = cost_usd;
        let state = if result.output.is_ok() {
            StepState::Succeeded
        } else {
            StepState::Failed
        };
        ctx.finish(&step.id, index, attempt, started, state, &result)
            .await?;
        let (output, error) = match result.output {
            Ok(output) => (ctx.redact(Some(output)).unwrap_or_default(), None),
            Err(error) => (String::new(), ctx.redact(Some(error))),
        };
        return Ok(StepResult {
            state,
            output,
            outputs: None,
            error,
            usage,
            cost_usd,
        });
    }
}

/// One attempt of `step`, cut at its `timeout` (its child run or tool is
/// cancelled, and waited for, so nothing is left running).
async fn run_attempt(
    ctx: &Arc<StepContext>,
    step: &Step,
    steps: &Map<String, Json>,
    stop: &CancellationToken,
) -> Attempt {
    if stop.is_cancelled() {
        return Attempt::plain(Err("cancelled".to_string()));
    }
    let cancel = stop.child_token();
    let work = attempt_once(ctx, step, steps, cancel.clone());
    tokio::pin!(work);
    let Some(timeout) = step.timeout else {
        return work.await;
    };
    tokio::select! {
        done = &mut work => done,
        () = tokio::time::sleep(timeout) => {
            cancel.cancel();
            let done = work.await;
            Attempt {
                output: Err(format!(
                    "timed out after {} (the step's timeout)",
                    humantime::format_duration(timeout)
                )),
                ..done
            }
        }
    }
}

async fn attempt_once(
    ctx: &Arc<StepContext>,
    step: &Step,
    steps: &Map<String, Json>,
    cancel: CancellationToken,
) -> Attempt {
    let mut steps = steps.clone();
    let item = steps.remove("__item");
    let item = item.as_ref().and_then(|v| {
        Some((
            v.get("index")?.as_u64()? as usize,
            v.get("item")?.as_str()?.to_string(),
        ))
    });
    let context = ctx.context(&steps, item.as_ref().map(|(i, s)| (*i, s.as_str())));
    let env = environment();
    let render = |template: &str| {
        env.render_str(template, &context)
            .map_err(|e| format!("cannot render a template: {}", render_error(&e)))
    };
    match &step.action {
        StepAction::Template(template) => Attempt::plain(render(template)),
        StepAction::Tool { tool, args } => {
            let args = match render_strings(args, &render) {
                Ok(args) => args,
                Err(e) => return Attempt::plain(Err(e)),
            };
            Attempt::plain(call_tool(ctx, step, tool, args, cancel).await)
        }
        StepAction::Agent { agent, input } => {
            let input = match render(input) {
                Ok(input) => input,
                Err(e) => return Attempt::plain(Err(e)),
            };
            run_agent(ctx, agent, input, cancel).await
        }
    }
}

async fn call_tool(
    ctx: &Arc<StepContext>,
    step: &Step,
    tool: &str,
    args: Json,
    cancel: CancellationToken,
) -> Result<String, String> {
    let job = &ctx.job;
    let Some(agent) = job.snapshot.project.agents.get(&job.agent) else {
        return Err(format!("agent `{}` is gone from the project", job.agent));
    };
    let root = job.snapshot.project.root.clone();
    let ceiling = job.ceiling.clone().unwrap_or_default();
    let tools = crate::run::prepare::agent_tools(&job.snapshot, agent, &ceiling, &ctx.run_id);
    let call = ToolCall {
        id: step.id.clone(),
        name: tool.to_string(),
        arguments: args.to_string(),
    };
    let tool_ctx = ToolContext {
        root,
        cancel,
        output_cap: DEFAULT_OUTPUT_CAP,
        sandbox: Sandbox::default(),
    };
    let outcome = tools.execute(&call, &tool_ctx).await;
    if outcome.is_error {
        Err(outcome.output)
    } else {
        Ok(outcome.output)
    }
}

/// An agent step: a child run of `agent` through the normal run path.
async fn run_agent(
    ctx: &Arc<StepContext>,
    agent: &str,
    input: String,
    cancel: CancellationToken,
) -> Attempt {
    let job = &ctx.job;
    let Some(pipeline) = job.snapshot.project.agents.get(&job.agent) else {
        return Attempt::plain(Err(format!(
            "agent `{}` is gone from the project",
            job.agent
        )));
    };
    let request = RunRequest {
        input: Some(input),
        vars: job.request.vars.clone(),
        parent: Some(RunParent {
            run_id: job.run_id.clone(),
            depth: 1,
        }),
        // The step runs under the pipeline's limits (and those above it).
        ceiling: Some(Ceiling::under(pipeline, job.ceiling.as_ref())),
        ..RunRequest::new(agent, Trigger::Pipeline)
    };
    let child_job =
        match Job::prepare_blocking(job.snapshot.clone(), request, job.env.clone()).await {
            Ok(child_job) => child_job,
            Err(e) => return Attempt::plain(Err(e)),
        };
    let child = child_job.id().to_string();
    let outcome = execute(child_job, &ctx.store, cancel, |_| {}).await;
    let (output, usage, cost_usd) = match outcome {
        Ok(o) if o.state == RunState::Succeeded => {
            (Ok(o.output.unwrap_or_default()), o.usage, o.cost_usd)
        }
        Ok(o) => (
            Err(format!(
                "run {child} of agent `{agent}` {}: {}",
                o.state,
                o.reason.unwrap_or_default()
            )),
            o.usage,
            o.cost_usd,
        ),
        Err(e) => (
            Err(format!(
                "run {child} of agent `{agent}`: the store failed: {e}"
            )),
            Usage::default(),
            None,
        ),
    };
    Attempt {
        output,
        usage,
        cost_usd,
        child_run_id: Some(child),
    }
}

#[cfg(test)]
mod tests {
    use super::split_items;

    #[test]
    fn items_are_a_json_list_or_lines() {
        assert_eq!(
            split_items(r#"["a", 2, {"x":1}]"#),
            ["a", "2", r#"{"x":1}"#]
        );
        assert_eq!(split_items("one\n\n two \n"), ["one", "two"]);
        assert!(split_items("  ").is_empty());
    }
}
