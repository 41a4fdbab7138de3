//! One agent's run driven through the engine, its row already claimed:
//! memory recalled for its input, memory and agent tools added, the
//! approval gate, the engine's events recorded (redacted, batched per
//! step), the final state stored, `notify:` told. The way in is
//! [`super::Job`].

use std::sync::Arc;
use std::time::Duration;

use backon::Retryable;
use tokio_util::sync::CancellationToken;

use crate::config::MemoryConfig;
use crate::config::approval::NotifyEvent;
use crate::engine::{
    self, DaySpending, ModelRoute, Models, Parts, RecalledBlock, RunOutcome, RunSpec, SharedSpend,
};
use crate::llm::Provider;
use crate::llm::limits;
use crate::redact::Redactor;
use crate::store::{RunEnd, SessionSummary, SessionTurn, Store, StoreError};
use crate::types::{RecalledMemory, RunState};

use super::approvals::{Approvals, RunGate, Slots};
use super::claim::PendingClaim;
use super::events::{RunSink, append_retrying, batch_backoff, durable, is_transient, record};
use super::notify::{Notice, Notifier};
use super::prepare::PreparedRun;
use super::recorder::Recorder;
use super::traced::{TracedRun, TracedSink};

/// What a run uses besides its parts: where approvals are waited for and
/// decided, where `notify:` messages go, and (under the supervisor) how a
/// waiting run gives back its concurrency slot.
pub struct RunServices<'a> {
    pub approvals: &'a Approvals,
    pub notifier: &'a Notifier,
    pub slots: Option<&'a dyn Slots>,
    /// Cancelled when the daemon stops: a run waiting for approval then
    /// stops here and stays `waiting_approval` in the store.
    pub closing: Option<&'a CancellationToken>,
    /// The run's claim, when it is still committing: the run's first model
    /// answer, events and final state wait for it.
    pub claim: Option<&'a PendingClaim>,
}

/// The agent's spending today outside one run, read from the store: runs
/// in progress (in this process or another) count what they have spent so
/// far.
struct AgentDay<'a> {
    store: &'a Store,
    agent: &'a str,
    run_id: &'a str,
    /// Where the agent's day starts.
    timezone: chrono_tz::Tz,
}

impl DaySpending for AgentDay<'_> {
    /// A store that cannot answer is logged and counts as nothing spent:
    /// the run's own spending is still checked.
    fn others_today(&self) -> futures::future::BoxFuture<'_, f64> {
        Box::pin(async move {
            let start = day_start(chrono::Utc::now(), self.timezone);
            match self.store.cost_since(self.agent, start, self.run_id).await {
                Ok(spent) => spent,
                Err(e) => {
                    tracing::error!(
                        agent = self.agent,
                        "cannot read today's spending for the daily budget: {e}"
                    );
                    0.0
                }
            }
        })
    }
}

/// The start of `now`'s day in `timezone`. Where midnight falls in a DST
/// gap, the day starts at the first instant after it; where it repeats, at
/// the earlier one.
fn day_start(
    now: chrono::DateTime<chrono::Utc>,
    timezone: chrono_tz::Tz,
) -> chrono::DateTime<chrono::Utc> {
    let now = now.with_timezone(&timezone);
    let midnight = now.date_naive().and_time(chrono::NaiveTime::MIN);
    (0..=180)
        .find_map(|m| {
            (midnight + chrono::Duration::minutes(m))
                .and_local_timezone(timezone)
                .earliest()
        })
        .map_or(now.to_utc(), |t| t.to_utc())
}

/// The memories recalled for the run's input. A failed recall is logged and
/// the run goes on without them: memory helps a run, it is not worth failing
/// one for.
async fn recall(store: &Store, memory: &MemoryConfig, spec: &RunSpec) -> Option<RecalledBlock> {
    if memory.recall == 0 {
        return None;
    }
    let recalled = store
        .memory_recall(
            &memory.namespace,
            &spec.input,
            memory.recall,
            0.05,
            chrono::Utc::now(),
        )
        .await;
    match recalled {
        Ok(recalled) if !recalled.is_empty() => Some(RecalledBlock {
            namespace: memory.namespace.clone(),
            block: crate::memory::context_block(&recalled),
            memories: recalled
                .iter()
                .map(|r| RecalledMemory {
                    id: r.memory.id,
                    score: r.score,
                    category: r.memory.category.clone(),
                    content: r.memory.content.clone(),
                })
                .collect(),
        }),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(run = %spec.run_id, "memory recall failed: {e}");
            None
        }
    }
}

/// Runs `prepared`, whose row is claimed and `running`: streams events to
/// `sink` as they happen and to the store at each step, records the final
/// state. A store failure after the claim does not stop the run: events
/// that could not be stored go with the next batch, the last with the final
/// state, and an error is returned only when that final write fails (then
/// the run's record is incomplete). A run resumed from an approval
/// checkpoint (`spec.resume`) goes on after its stored events.
pub(super) async fn run_agent(
    prepared: PreparedRun,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
    services: RunServices<'_>,
) -> Result<RunOutcome, StoreError> {
    let PreparedRun {
        mut spec,
        memory,
        models,
        fallback_on,
        fallback_attempts,
        cluster_lease,
        tools,
        retry,
        timezone,
        fire: _,
        redactor,
        template_context: _,
        approval,
        origin: _,
        parent,
        sub_agents,
        session,
        history,
        skill_catalog,
    } = prepared;
    let mut traced = TracedSink::new(
        sink,
        TracedRun {
            run_id: &spec.run_id,
            agent: &spec.agent,
            model: &spec.model,
            trigger: spec.trigger,
            parent: parent.as_ref(),
            resumed: spec.resume.is_some(),
        },
    );
    // Each model of the chain traced, kept to the run's claim, and behind
    // its provider's limits (shared through the store across nodes).
    let shared = super::shared_limits::for_store(store, cluster_lease);
    let providers: Vec<Arc<dyn Provider>> = models
        .iter()
        .map(|m| {
            let provider = traced.provider(m, &redactor);
            match services.claim {
                Some(claim) => claim.gate(provider),
                None => provider,
            }
        })
        .collect();
    let routes = models
        .iter()
        .zip(&providers)
        .map(|(m, provider)| ModelRoute {
            model: m.model.clone(),
            model_name: m.model_name.clone(),
            provider: provider.as_ref(),
            price: m.price,
            gate: Some(limits::gate(
                &m.gate_key,
                &m.provider_name,
                m.limits,
                shared.clone(),
            )),
        })
        .collect();
    let mut tools = traced.tools(tools, &redactor);
    let sink: &mut dyn RunSink = &mut traced;
    // Events already stored: a resumed run numbers its own after them.
    let stored_seq = match spec.resume {
        Some(_) => store.append_events(&spec.run_id, Vec::new()).await?,
        None => {
            // A turn waits for the session's older turns, then reads the
            // history they left. One stopped while it waits runs no model
            // call and adds nothing to the session.
            if let Some(session) = &session
                && super::session::wait_for_turn(
                    store,
                    session,
                    &spec.run_id,
                    &cancel,
                    services.slots,
                )
                .await?
            {
                spec.history = Some(super::session::history(store, session, history).await?);
            }
            spec.memory = recall(store, &memory, &spec).await;
            0
        }
    };
    let day = AgentDay {
        store,
        agent: &spec.agent,
        run_id: &spec.run_id,
        timezone,
    };
    if memory.tools {
        let bound = crate::memory::memory_tools_with_limit(
            store.clone(),
            memory.namespace.clone(),
            spec.run_id.clone(),
            memory.max_entries,
        );
        for tool in bound {
            tools.add(tool);
        }
    }
    let sub_runs = SharedSpend::default();
    if let Some(sub_agents) = sub_agents {
        for tool in sub_agents.tools(&spec.run_id, store, &sub_runs) {
            tools.add(tool);
        }
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    if let Some(catalog) = skill_catalog {
        tools.add(catalog.tool(Some(tx.downgrade())));
    }
    let gate = RunGate {
        approvals: services.approvals,
        store,
        notifier: services.notifier,
        config: &approval,
        run_id: &spec.run_id,
        agent: &spec.agent,
        slots: services.slots,
        closing: services.closing,
    };
    let parts = Parts {
        models: Models {
            routes,
            fallback_on,
            attempts: fallback_attempts,
        },
        tools: &tools,
        retry,
        spending: Some(&day),
        redactor: &redactor,
        sub_runs: Some(&sub_runs),
        approvals: (!approval.approve.is_empty()).then_some(&gate as _),
    };
    let engine = engine::run(&spec, parts, cancel, tx);
    // Events come redacted: secrets never reach the sink or the store.
    let recorder = Recorder::after(redactor.clone(), stored_seq);
    let record = record(rx, recorder, sink, store, &spec.run_id, services.claim);
    let (mut outcome, last_batch) = tokio::join!(engine, record);
    redact_outcome(&redactor, &mut outcome);
    let state = outcome.state;
    if state == RunState::WaitingApproval {
        // Suspended: no end yet; the run waits on in the store.
        durable(services.claim).await?;
        let last_seq = append_retrying(store, &spec.run_id, &last_batch).await?;
        sink.committed(last_seq);
        return Ok(outcome);
    }
    debug_assert!(state != RunState::Running);
    let end = RunEnd {
        state,
        error: outcome.reason.clone(),
        output: outcome.output.clone(),
        usage: outcome.usage,
        cost_usd: outcome.cost_usd,
        result: outcome.result.clone(),
    };
    durable(services.claim).await?;
    // A turn's messages are stored with its end, in one transaction.
    let turn = session
        .as_deref()
        .zip(outcome.turn.take())
        .map(|(id, turn)| {
            let messages = turn
                .messages
                .into_iter()
                .map(|mut m| {
                    redactor.redact_message(&mut m);
                    m
                })
                .collect();
            (
                id,
                SessionTurn {
                    run_id: spec.run_id.clone(),
                    messages,
                    usage: outcome.usage,
                    cost_usd: outcome.cost_usd,
                    summary: turn
                        .summary
                        .map(|(text, through)| SessionSummary { text, through }),
                },
            )
        });
    // The final state is retried like a batch: a run left `running` by a
    // passing failure would stay so until the next start.
    let last_seq = (|| async {
        match &turn {
            Some((id, turn)) => {
                store
                    .finish_turn(&spec.run_id, last_batch.clone(), end.clone(), id, turn.clone())
                    .await
            }
            None => {
                store
                    .finish_run_as(&spec.run_id, last_batch.clone(), end.clone())
                    .await
            }
        }
    })
        .retry(batch_backoff())
        .sleep(tokio::time::sleep)
        .when(is_transient)
        .notify(|e: &StoreError, wait: Duration| {
            tracing::warn!(run = %spec.run_id, "recording the run's end failed, retrying in {wait:?}: {e}");
        })
        .await?;
    sink.committed(last_seq);
    if session.is_some() {
        super::session::turn_ended();
    }
    if let Some(notify) = &approval.notify {
        let event = match state {
            RunState::Failed | RunState::TimedOut => Some((NotifyEvent::Failed, "failed")),
            RunState::BudgetExceeded => Some((NotifyEvent::BudgetExceeded, "budget_exceeded")),
            _ => None,
        };
        if let Some((_, word)) = event.filter(|(kind, _)| notify.wants(*kind)) {
            services.notifier.send(
                notify,
                Notice::ended(
                    word,
                    &spec.agent,
                    &spec.run_id,
                    state,
                    outcome.reason.clone(),
                ),
            );
        }
    }
    Ok(outcome)
}

/// Redacts the texts of a run's outcome (as its events were), before they
/// are stored in the run row or returned.
fn redact_outcome(redactor: &Redactor, outcome: &mut RunOutcome) {
    for text in [&mut outcome.reason, &mut outcome.output]
        .into_iter()
        .flatten()
    {
        redactor.redact_in_place(text);
    }
    if let Some(result) = &mut outcome.result {
        redactor.redact_json(result);
    }
}
