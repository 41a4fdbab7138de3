//! The one ReAct loop every run goes through, whatever started it: assemble
//! the context, trim it, call the model (streaming), run the tool calls,
//! feed the results back, repeat until an answer or a limit. It emits typed
//! [`RunEvent`]s and never touches the store or the registry: it is handed
//! resolved parts. May depend on `llm`, `tools`, `config` (limits), `redact`
//! and `types`.

pub mod approval;
mod compact;
pub mod context;
mod emit;
pub mod history;
mod model_call;
pub mod output;
pub mod sub_runs;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::config::duration::format_duration;
use crate::llm::retry::RetryPolicy;
use crate::llm::{ChatRequest, EarlyStop, ModelTurn};
use crate::redact::Redactor;
use crate::tools::{DEFAULT_OUTPUT_CAP, ToolContext, ToolSet};
use crate::types::approval::ApprovalRequest;
use crate::types::{
    Message, Price, RecalledMemory, RunEvent, RunState, SkillActivation, ToolCall, Trigger, Usage,
};
use approval::{ApprovalGate, CallResult, Checkpoint, NoDecision, RunClock};
use emit::announce;
use history::{TurnHistory, TurnRecord};
pub use model_call::{ModelRoute, Models, fallback_reason};
use output::OutputCheck;
pub use sub_runs::{SharedSpend, SubRunSpend};

/// Everything about one run that the engine needs, already resolved.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub run_id: String,
    pub agent: String,
    /// The model as the user named it (`openai/gpt-4o-mini`, `test`).
    pub model: String,
    /// The model name sent to the provider.
    pub model_name: String,
    pub trigger: Trigger,
    pub definition_hash: String,
    /// The rendered system prompt.
    pub system: Option<String>,
    /// The rendered input.
    pub input: String,
    pub limits: Limits,
    pub temperature: Option<f32>,
    /// The most tokens one model answer may have.
    pub max_tokens: Option<u32>,
    /// The JSON Schema the final answer must match.
    pub output_schema: Option<serde_json::Value>,
    /// The model's price; `None`: costs are unknown.
    pub price: Option<Price>,
    /// The project root: where tools run.
    pub root: PathBuf,
    /// Skills put in as one system message after the system prompt.
    pub skills: Option<ActiveSkills>,
    /// Memories put ahead of the input.
    pub memory: Option<RecalledBlock>,
    /// Where a run that waited for approval goes on from (after a
    /// restart); `None`: from the start.
    pub resume: Option<Checkpoint>,
    /// A turn of a session: the session's earlier messages, put before
    /// the input. `None`: a run on its own.
    pub history: Option<TurnHistory>,
}

/// What the agent's other runs have spent today (in US dollars), for
/// `limits.max_cost_usd_per_day`. Asked before each model call, so runs in
/// progress at the same time share one budget: each sees what the others
/// have spent so far.
pub trait DaySpending: Send + Sync {
    fn others_today(&self) -> BoxFuture<'_, f64>;
}

/// The skills of a run, resolved before it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveSkills {
    pub names: Vec<String>,
    /// `auto` or `pinned` (injected), or `catalog` (listed to load from).
    pub how: SkillActivation,
    /// The system message that carries them.
    pub message: String,
}

/// The memories recalled for a run's input, resolved before it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct RecalledBlock {
    pub namespace: String,
    pub memories: Vec<RecalledMemory>,
    /// The text put ahead of the input.
    pub block: String,
}

/// The parts a run uses.
pub struct Parts<'a> {
    /// The agent's model, and the rest of its chain.
    pub models: Models<'a>,
    pub tools: &'a ToolSet,
    pub retry: RetryPolicy,
    /// Where the agent's other spending today is read, for a daily budget;
    /// `None` counts it as nothing.
    pub spending: Option<&'a dyn DaySpending>,
    /// Replaces known secrets in tool results before the model (or an
    /// event) sees them.
    pub redactor: &'a Redactor,
    /// Shared with the run's sub-run tools (agents called as tools): what
    /// their sub-runs spent is added to this run's usage and cost; `None`
    /// when the run has none.
    pub sub_runs: Option<&'a SharedSpend>,
    /// Where calls to tools matching the agent's `approve:` wait for a
    /// person; `None`: no call waits.
    pub approvals: Option<&'a dyn ApprovalGate>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub state: RunState,
    pub reason: Option<String>,
    pub output: Option<String>,
    pub usage: Usage,
    /// US dollars; `None`: unknown.
    pub cost_usd: Option<f64>,
    /// The final answer as JSON, for agents with an `output_schema`.
    pub result: Option<serde_json::Value>,
    pub iterations: u32,
    /// A session turn's messages and new summary, to store with its end.
    pub turn: Option<TurnRecord>,
}

/// Runs the loop to its end. `cancel` ends it as `cancelled`; the run's own
/// timeout ends it as `timed_out`. The last event sent is always
/// [`RunEvent::Finished`], with the same state and reason as the outcome,
/// except for a run suspended while it waits for approval (the daemon
/// stops): its outcome is `waiting_approval`, and it has no end yet.
pub async fn run(
    spec: &RunSpec,
    parts: Parts<'_>,
    cancel: CancellationToken,
    events: UnboundedSender<RunEvent>,
) -> RunOutcome {
    // A resumed run announced its start (and skills, memories) already.
    let resumed = spec.resume.is_some();
    if !resumed {
        announce(spec, &events);
    }
    // One token for the whole run: cancelled by the caller or by the
    // timeout, whose clock stops while the run waits for a person.
    let token = cancel.child_token();
    let timed_out = Arc::new(AtomicBool::new(false));
    let left = spec.resume.as_ref().map_or(spec.limits.timeout, |c| {
        Duration::from_millis(c.remaining_ms)
    });
    let clock = Arc::new(RunClock::new(left));
    let timer = {
        let (token, timed_out, clock) = (token.clone(), timed_out.clone(), clock.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = clock.expired() => {
                    timed_out.store(true, Ordering::SeqCst);
                    token.cancel();
                }
                _ = token.cancelled() => {}
            }
        })
    };
    let mut state = LoopState {
        spec,
        parts: &parts,
        token: token.clone(),
        events: &events,
        usage: Usage::default(),
        own_usage: Usage::default(),
        sub_runs_cost: None,
        model_index: 0,
        fallback_cost: None,
        iterations: 0,
        clock,
        turn_start: 0,
        compacted: None,
    };
    let mut messages = Vec::new();
    let end = state.run_loop(&mut messages).await;
    // Sub-runs that ended while the run was being stopped still count.
    state.take_sub_runs();
    let turn = spec.history.as_ref().map(|_| {
        let answer = match &end {
            End::Answer(text, _) => Some(text.as_str()),
            _ => None,
        };
        let after_input = messages.get(state.turn_start + 1..).unwrap_or_default();
        TurnRecord {
            messages: history::turn_messages(&spec.input, after_input, answer),
            summary: state.compacted.take(),
        }
    });
    let (usage, iterations) = (state.usage, state.iterations);
    let cost_usd = state.cost();
    token.cancel();
    // Stopped, not awaited: the end must not yield between the last
    // model turn's `usage` and `finished`, so the two reach the recorder
    // together and are stored with the final state in one commit. The
    // timer sets `timed_out` before it cancels the token, so a run it
    // stopped is seen as timed out without waiting for it.
    timer.abort();
    let mut result = None;
    let (run_state, reason, output) = match end {
        End::Answer(text, value) => {
            result = value;
            (RunState::Succeeded, None, Some(text))
        }
        End::Failed(reason) => (RunState::Failed, Some(reason), None),
        End::OverBudget(reason) => (RunState::BudgetExceeded, Some(reason), None),
        End::Stopped if timed_out.load(Ordering::SeqCst) => (
            RunState::TimedOut,
            Some(format!(
                "the run exceeded its timeout of {}",
                format_duration(spec.limits.timeout)
            )),
            None,
        ),
        End::Stopped => (RunState::Cancelled, Some("cancelled".into()), None),
        End::Suspended => {
            // Not an end: the run waits on in the store, and a later
            // process goes on from its checkpoint.
            return RunOutcome {
                state: RunState::WaitingApproval,
                reason: None,
                output: None,
                usage,
                cost_usd,
                result: None,
                iterations,
                turn: None,
            };
        }
    };
    let _ = events.send(RunEvent::Finished {
        state: run_state,
        reason: reason.clone(),
        output: output.clone(),
        usage,
        cost_usd,
        result: result.clone(),
    });
    RunOutcome {
        state: run_state,
        reason,
        output,
        usage,
        cost_usd,
        result,
        iterations,
        turn,
    }
}

enum End {
    /// The final answer, and its JSON for an agent with an output schema.
    Answer(String, Option<serde_json::Value>),
    Failed(String),
    /// A spending limit was reached before a model call.
    OverBudget(String),
    /// The run's token fired: cancelled or timed out.
    Stopped,
    /// The daemon stops while the run waits for approval: it stays
    /// waiting in the store.
    Suspended,
}

struct LoopState<'a> {
    spec: &'a RunSpec,
    parts: &'a Parts<'a>,
    token: CancellationToken,
    events: &'a UnboundedSender<RunEvent>,
    /// The run's tokens: its own model calls and its finished sub-runs.
    usage: Usage,
    /// Its own model calls only (priced at its model's price).
    own_usage: Usage,
    /// What its sub-runs cost, at their own models' prices.
    sub_runs_cost: Option<f64>,
    /// The model of the chain the run calls now (an index into
    /// `parts.models.routes`).
    model_index: usize,
    /// What its calls answered by a fallback model cost, at their prices.
    fallback_cost: Option<f64>,
    iterations: u32,
    /// The run's time for `limits.timeout`, stopped while waiting.
    clock: Arc<RunClock>,
    /// Where the turn's own messages start in the conversation: the input
    /// (after the system messages and a session's history).
    turn_start: usize,
    /// The summary a session turn wrote and the seq of the last message it
    /// covers.
    compacted: Option<(String, u64)>,
}

/// Loop counters a checkpoint keeps besides the conversation.
#[derive(Clone, Copy)]
struct Resumable {
    tool_calls_made: u32,
    repairing: bool,
}

/// The tool calls of one turn and what is known of their results.
struct Turn {
    calls: Vec<ToolCall>,
    results: Vec<Option<CallResult>>,
    /// A resumed run's call that was waiting when it stopped: its request
    /// is recorded already.
    waiting: Option<usize>,
}

impl LoopState<'_> {
    async fn run_loop(&mut self, messages: &mut Vec<Message>) -> End {
        let spec = self.spec;
        let output_check = match spec.output_schema.as_ref().map(OutputCheck::new) {
            Some(Ok(check)) => Some(check),
            Some(Err(reason)) => return End::Failed(reason),
            None => None,
        };
        // Set while the one repair turn of a schema-violating answer runs.
        let mut repairing = false;
        let mut tool_calls_made: u32 = 0;
        // A resumed run first finishes the turn it stopped in.
        let mut pending: Option<Turn> = None;
        match &spec.resume {
            Some(checkpoint) => {
                *messages = checkpoint.messages.clone();
                self.turn_start = checkpoint.turn_start;
                self.usage = checkpoint.usage;
                self.own_usage = checkpoint.own_usage;
                self.sub_runs_cost = checkpoint.sub_runs_cost;
                self.fallback_cost = checkpoint.fallback_cost;
                self.model_index = checkpoint
                    .model_index
                    .min(self.parts.models.routes.len().saturating_sub(1));
                self.iterations = checkpoint.iterations;
                tool_calls_made = checkpoint.tool_calls_made;
                repairing = checkpoint.repairing;
                pending = Some(Turn {
                    calls: checkpoint.calls.clone(),
                    results: checkpoint.results.clone(),
                    waiting: Some(checkpoint.waiting),
                });
            }
            None => self.opening_messages(messages),
        }
        let tools = self.parts.tools.specs();
        let tools_tokens =
            context::estimate_text(&serde_json::to_string(&tools).unwrap_or_default());
        let budget = spec.limits.max_context_tokens.saturating_sub(tools_tokens);
        if spec.resume.is_none()
            && let Some(history) = spec.history.as_ref().filter(|h| h.compact)
            && let Err(end) = self.compact(messages, history, budget).await
        {
            return end;
        }
        let ctx = ToolContext {
            root: spec.root.clone(),
            cancel: self.token.clone(),
            output_cap: DEFAULT_OUTPUT_CAP,
            sandbox: Default::default(),
        };
        loop {
            if let Some(turn) = pending.take() {
                let state = Resumable {
                    tool_calls_made,
                    repairing,
                };
                if let Err(end) = self.run_calls(messages, turn, state, &ctx).await {
                    return end;
                }
            }
            let others = self.others_spent_today().await;
            if let Some(reason) = self.over_budget(others) {
                return End::OverBudget(reason);
            }
            // The repair turn is granted even on the last iteration: the
            // answer is there, only its form is wrong.
            if self.iterations >= spec.limits.max_iterations && !repairing {
                return End::Failed(format!(
                    "reached max_iterations ({}) without a final answer; raise limits.max_iterations or simplify the task",
                    spec.limits.max_iterations
                ));
            }
            self.iterations += 1;
            let trimmed = context::trim_keeping(messages, budget, self.turn_start);
            if trimmed.dropped > 0 {
                self.emit(RunEvent::ContextTrimmed {
                    dropped_messages: trimmed.dropped,
                    estimated_tokens: trimmed.estimated_tokens,
                    budget,
                });
            }
            let request = ChatRequest {
                model: spec.model_name.clone(),
                messages: trimmed.messages,
                tools: tools.clone(),
                temperature: spec.temperature,
                max_tokens: spec.max_tokens,
                output_schema: spec.output_schema.clone(),
                cache_key: Some(spec.agent.clone()),
            };
            let (turn, answered_by) = match self.call_model(request).await {
                Ok(answer) => answer,
                Err(end) => return end,
            };
            self.count_usage(&turn, answered_by);
            if turn.tool_calls.is_empty() {
                if let Some(reason) = cut_off(&turn) {
                    return End::Failed(reason);
                }
                let Some(check) = &output_check else {
                    return End::Answer(turn.text, None);
                };
                match check.check(&turn.text) {
                    Ok(value) => return End::Answer(turn.text, Some(value)),
                    Err(errors) if repairing => {
                        return End::Failed(format!(
                            "the final answer does not match output_schema after one repair turn: {}",
                            errors.join("; ")
                        ));
                    }
                    Err(errors) => {
                        repairing = true;
                        messages.push(self.echo(turn.text, &[], turn.provider_items));
                        messages.push(Message::user(output::repair_message(&errors)));
                        continue;
                    }
                }
            }
            let calls = turn.tool_calls;
            tool_calls_made = tool_calls_made.saturating_add(calls.len() as u32);
            if tool_calls_made > spec.limits.max_tool_calls {
                return End::Failed(format!(
                    "reached max_tool_calls ({}): the model asked for {} more; raise limits.max_tool_calls if the task needs them",
                    spec.limits.max_tool_calls,
                    calls.len()
                ));
            }
            messages.push(self.echo(turn.text, &calls, turn.provider_items));
            for call in &calls {
                self.emit(RunEvent::ToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                });
            }
            pending = Some(Turn {
                results: vec![None; calls.len()],
                calls,
                waiting: None,
            });
        }
    }

    /// The messages a run starts with: system prompt, skills, the output
    /// schema's instruction, a session's history, memories and the input.
    fn opening_messages(&mut self, messages: &mut Vec<Message>) {
        let spec = self.spec;
        if let Some(system) = spec.system.as_deref().filter(|s| !s.trim().is_empty()) {
            messages.push(Message::system(system));
        }
        if let Some(skills) = &spec.skills {
            messages.push(Message::system(skills.message.clone()));
        }
        if let Some(schema) = &spec.output_schema {
            messages.push(Message::system(output::instruction(schema)));
        }
        if let Some(history) = &spec.history {
            if let Some(summary) = &history.summary {
                messages.push(history::summary_message(summary));
            }
            messages.extend(history.messages.iter().cloned());
        }
        self.turn_start = messages.len();
        match spec.memory.as_ref().filter(|m| !m.memories.is_empty()) {
            Some(memory) => {
                messages.push(Message::user(format!("{}\n\n{}", memory.block, spec.input)))
            }
            None => messages.push(Message::user(spec.input.clone())),
        }
    }

    /// Runs the tool calls of `turn` and appends their results to
    /// `messages`, in call order. Calls that need no approval run first,
    /// together; then each call that does waits for its decision in turn
    /// (the run's clock stopped) and runs if approved, or gets the denial as
    /// its result. `Err` ends the run.
    async fn run_calls(
        &mut self,
        messages: &mut Vec<Message>,
        mut turn: Turn,
        state: Resumable,
        ctx: &ToolContext,
    ) -> Result<(), End> {
        let gate = self.parts.approvals;
        let gated = |call: &ToolCall| gate.is_some_and(|g| g.required(&call.name));
        let free: Vec<usize> = (0..turn.calls.len())
            .filter(|&i| turn.results[i].is_none() && !gated(&turn.calls[i]))
            .collect();
        let running = futures::future::join_all(
            free.iter()
                .map(|&i| self.parts.tools.execute(&turn.calls[i], ctx)),
        );
        let outcomes = tokio::select! {
            outcomes = running => outcomes,
            // Tools see the token and stop; give them a moment to clean up.
            _ = async { self.token.cancelled().await; tokio::time::sleep(Duration::from_secs(5)).await } => return Err(End::Stopped),
        };
        for (&i, mut outcome) in free.iter().zip(outcomes) {
            // A tool that prints a secret never shows it to the model.
            self.parts.redactor.redact_in_place(&mut outcome.output);
            turn.results[i] = Some(CallResult {
                output: outcome.output,
                is_error: outcome.is_error,
                duration_ms: outcome.duration_ms,
            });
        }
        if let Some(gate) = gate {
            for i in 0..turn.calls.len() {
                if turn.results[i].is_some() || self.token.is_cancelled() {
                    continue;
                }
                let result = self
                    .approve_and_run(gate, messages, &turn, i, state, ctx)
                    .await?;
                turn.results[i] = Some(result);
            }
        }
        self.take_sub_runs();
        // Results are recorded even when the run was stopped meanwhile:
        // a tool that finished may have had effects.
        let stopped = self.token.is_cancelled();
        for (call, result) in turn.calls.iter().zip(turn.results) {
            let Some(result) = result else { continue };
            self.emit(RunEvent::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                output: result.output.clone(),
                is_error: result.is_error,
                duration_ms: result.duration_ms,
            });
            messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: result.output,
                is_error: result.is_error,
            });
        }
        if stopped {
            return Err(End::Stopped);
        }
        Ok(())
    }

    /// Asks `gate` about call `i` of `turn`, waits for the decision with the
    /// run's clock stopped, and runs the call if approved.
    async fn approve_and_run(
        &mut self,
        gate: &dyn ApprovalGate,
        messages: &[Message],
        turn: &Turn,
        i: usize,
        state: Resumable,
        ctx: &ToolContext,
    ) -> Result<CallResult, End> {
        let call = &turn.calls[i];
        let redactor = self.parts.redactor;
        let request = ApprovalRequest {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: redactor.redact(&call.arguments).into_owned(),
        };
        let left = self.clock.stop();
        let checkpoint = Checkpoint {
            messages: messages.to_vec(),
            usage: self.usage,
            own_usage: self.own_usage,
            sub_runs_cost: self.sub_runs_cost,
            model_index: self.model_index,
            fallback_cost: self.fallback_cost,
            iterations: self.iterations,
            tool_calls_made: state.tool_calls_made,
            repairing: state.repairing,
            calls: turn.calls.clone(),
            results: turn.results.clone(),
            waiting: i,
            remaining_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
            turn_start: self.turn_start,
        };
        let asked = async {
            let timeout_at = gate
                .request(&request, &checkpoint)
                .await
                .map_err(NoDecision::Failed)?;
            if turn.waiting != Some(i) {
                self.emit(RunEvent::ApprovalRequested {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: request.arguments.clone(),
                    timeout_at,
                });
            }
            gate.decision(&request).await
        };
        let decision = tokio::select! {
            biased;
            _ = self.token.cancelled() => return Err(End::Stopped),
            decision = asked => decision,
        };
        self.clock.restart(left);
        let decision = decision.map_err(|e| match e {
            NoDecision::Suspended => End::Suspended,
            NoDecision::Failed(e) => End::Failed(format!(
                "cannot wait for the approval of `{}`: {e}",
                call.name
            )),
        })?;
        self.emit(RunEvent::ApprovalDecided {
            id: call.id.clone(),
            name: call.name.clone(),
            approved: decision.approved,
            by: decision.by,
            reason: decision.reason.clone(),
        });
        if !decision.approved {
            return Ok(CallResult {
                output: decision.denial_text(),
                is_error: true,
                duration_ms: 0,
            });
        }
        let outcome = tokio::select! {
            outcome = self.parts.tools.execute(call, ctx) => outcome,
            _ = async { self.token.cancelled().await; tokio::time::sleep(Duration::from_secs(5)).await } => return Err(End::Stopped),
        };
        let mut output = outcome.output;
        redactor.redact_in_place(&mut output);
        Ok(CallResult {
            output,
            is_error: outcome.is_error,
            duration_ms: outcome.duration_ms,
        })
    }

    /// The model's answer as it goes back to the model in the next
    /// requests: with known secrets redacted, like everything else it is
    /// sent (the calls themselves run with their arguments as given).
    /// `provider_items` is what the wire format asked to get back with the
    /// answer (reasoning items it needs before the calls).
    fn echo(
        &self,
        text: String,
        calls: &[ToolCall],
        provider_items: Option<serde_json::Value>,
    ) -> Message {
        let redactor = self.parts.redactor;
        let provider_items = provider_items.map(|mut items| {
            redactor.redact_json(&mut items);
            items
        });
        Message::Assistant {
            content: redactor.redact(&text).into_owned(),
            tool_calls: calls
                .iter()
                .map(|call| ToolCall {
                    arguments: redactor.redact(&call.arguments).into_owned(),
                    ..call.clone()
                })
                .collect(),
            provider_items,
        }
    }

    fn emit(&self, event: RunEvent) {
        let _ = self.events.send(event);
    }

    /// Adds a model answer's tokens to the run's, priced at the price of
    /// the model of the chain that gave it, with a `usage` event.
    fn count_usage(&mut self, turn: &ModelTurn, answered_by: usize) {
        let route = &self.parts.models.routes[answered_by];
        self.usage.add(&turn.usage);
        let cost_usd = route.price.and_then(|p| p.cost(&turn.usage));
        if answered_by == 0 {
            self.own_usage.add(&turn.usage);
        } else if let Some(cost) = cost_usd {
            self.fallback_cost = Some(self.fallback_cost.unwrap_or(0.0) + cost);
        }
        if let Some(shared) = self.parts.sub_runs {
            shared.set_counted(self.usage.total_tokens());
        }
        self.emit(RunEvent::Usage {
            iteration: self.iterations,
            usage: turn.usage,
            cost_usd,
            model: (self.parts.models.routes.len() > 1).then(|| route.model.clone()),
        });
    }

    /// Adds what the sub-runs that ended since the last call spent to the
    /// run's usage and cost, each with a `usage` event (so the stored run
    /// counts it as it goes).
    fn take_sub_runs(&mut self) {
        let Some(shared) = self.parts.sub_runs else {
            return;
        };
        for spend in shared.take() {
            self.usage.add(&spend.usage);
            if let Some(cost) = spend.cost_usd {
                self.sub_runs_cost = Some(self.sub_runs_cost.unwrap_or(0.0) + cost);
            }
            self.emit(RunEvent::Usage {
                iteration: self.iterations,
                usage: spend.usage,
                cost_usd: spend.cost_usd,
                model: None,
            });
        }
        shared.set_counted(self.usage.total_tokens());
    }

    /// The run's cost so far (its sub-runs' included), where the prices and
    /// the counts are known.
    fn cost(&self) -> Option<f64> {
        let own = self.spec.price.and_then(|p| p.cost(&self.own_usage));
        let parts = [own, self.fallback_cost, self.sub_runs_cost];
        parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().sum())
    }

    /// What the agent's other runs have spent today; 0 when the agent has
    /// no daily budget.
    async fn others_spent_today(&self) -> f64 {
        match (self.spec.limits.max_cost_usd_per_day, self.parts.spending) {
            (Some(_), Some(spending)) => spending.others_today().await,
            _ => 0.0,
        }
    }

    /// Why no further model call may be made, if a spending limit is
    /// reached; `others` is what the agent's other runs spent today.
    fn over_budget(&self, others: f64) -> Option<String> {
        let limits = &self.spec.limits;
        if let Some(max) = limits.max_tokens_per_run {
            let used = self.usage.total_tokens();
            if used >= max {
                return Some(format!(
                    "the run used {used} tokens, reaching limits.max_tokens_per_run ({max}); no further model call was made"
                ));
            }
        }
        let limit = limits.max_cost_usd_per_day?;
        let spent = others + self.cost().unwrap_or(0.0);
        (spent >= limit).then(|| {
            format!(
                "the agent has spent ${spent:.4} today, reaching limits.max_cost_usd_per_day (${limit}); no further model call was made until the day ends"
            )
        })
    }
}

/// Why an answer without tool calls is not a final answer, if it is not.
fn cut_off(turn: &ModelTurn) -> Option<String> {
    let reason = turn.finish_reason.as_deref().unwrap_or_default();
    Some(match turn.early_stop()? {
        EarlyStop::OutputLimit => format!(
            "the answer was cut off at the model's output limit (finish reason: {reason}); raise max_tokens"
        ),
        EarlyStop::Filtered => {
            format!("the provider's content filter stopped the answer (finish reason: {reason})")
        }
    })
}
