//! `approve: true` on a pipeline step: before the step's first attempt
//! (once, before a `for_each` fans out) the pipeline run waits for a
//! person's decision exactly as a tool call does: the request is stored in
//! the approvals table (call id: the step id) with a description of what
//! will run, the run is `waiting_approval`, `ApprovalRequested` and
//! `ApprovalDecided` are events of the pipeline run, `notify:` is told, and
//! `approval_timeout:` denies it. A resumed pipeline finds its stored
//! request (its timeout counted from the first asking) and any decision
//! taken meanwhile; a daemon stopping gracefully leaves it waiting in the
//! store. The pipeline keeps its concurrency slot while it waits;
//! the wait does not count against the pipeline's `limits.timeout`.
//!
//! May depend on `store`, `config`, `types` (and the daemon beside it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Map, Value as Json};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::context::{StepContext, render_strings};
use crate::config::approval::{ApprovalConfig, NotifyEvent};
use crate::config::steps::{Step, StepAction};
use crate::run::approvals::Approvals;
use crate::run::notify::{Notice, Notifier};
use crate::run::template::{environment, render_error};
use crate::store::{Store, StoreError};
use crate::types::RunEvent;
use crate::types::approval::ApprovalRequest;

/// What the steps of one pipeline run share for their approvals.
pub(crate) struct StepApprovals {
    approvals: Approvals,
    notifier: Notifier,
    /// One step waits at a time: a decision goes to the run's one pending
    /// request.
    turn: Mutex<()>,
    /// Steps waiting now.
    waiting: AtomicUsize,
    /// Time spent waiting not yet added to the pipeline's deadline.
    waited_ms: AtomicU64,
}

/// Counts a wait while it lasts.
struct Waiting<'a> {
    of: &'a StepApprovals,
    since: Instant,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.of.waited_ms.fetch_add(ms, Ordering::SeqCst);
        self.of.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl StepApprovals {
    pub fn new(store: Store) -> StepApprovals {
        StepApprovals {
            approvals: Approvals::new(store),
            notifier: Notifier::default(),
            turn: Mutex::new(()),
            waiting: AtomicUsize::new(0),
            waited_ms: AtomicU64::new(0),
        }
    }

    /// At the pipeline's deadline: how much later it now falls (a step is
    /// waiting for a person, or has waited since the last look), or `None`
    /// when the pipeline has truly run out of time.
    pub fn extension(&self) -> Option<Duration> {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            return Some(crate::run::approvals::POLL);
        }
        let waited = self.waited_ms.swap(0, Ordering::SeqCst);
        (waited > 0).then(|| Duration::from_millis(waited))
    }

    fn wait_started(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting {
            of: self,
            since: Instant::now(),
        }
    }
}

/// The approval settings of the pipeline of `ctx`.
fn config(ctx: &StepContext) -> ApprovalConfig {
    let job = &ctx.job;
    job.snapshot
        .project
        .agents
        .get(&job.agent)
        .map(|a| a.approval.clone())
        .unwrap_or_default()
}

/// What `step` will run, rendered as far as it can be now: `(label,
/// details)` as an approval's tool and arguments.
fn describe(ctx: &StepContext, step: &Step, steps: &Map<String, Json>) -> (String, String) {
    let env = environment();
    let context = ctx.context(steps, None);
    let render = |template: &str| {
        env.render_str(template, &context)
            .map_err(|e| format!("cannot render a template: {}", render_error(&e)))
    };
    let (label, details) = match &step.action {
        StepAction::Tool { tool, args } => (
            format!("tool {tool}"),
            render_strings(args, &render)
                .unwrap_or_else(|_| args.clone())
                .to_string(),
        ),
        StepAction::Agent { agent, input } => (
            format!("agent {agent}"),
            render(input).unwrap_or_else(|_| input.clone()),
        ),
        StepAction::Template(template) => (
            "template".to_string(),
            render(template).unwrap_or_else(|_| template.clone()),
        ),
    };
    let details = match &step.for_each {
        // Gated once for all items: the item templates are not rendered.
        Some(for_each) => format!(
            "for each of {}: {details}",
            render(for_each).unwrap_or_else(|_| for_each.clone()).trim()
        ),
        None => details,
    };
    let details = ctx.redact(Some(details)).unwrap_or_default();
    (format!("step {}: {label}", step.id), details)
}

/// How the wait for a step's approval ended.
pub(crate) enum Gate {
    Approved,
    /// Denied (by a person, by the timeout) or cancelled: why.
    Denied(String),
    /// The daemon stops: the run stays `waiting_approval` in the store.
    Suspended,
}

/// Waits for a person's decision on `step` (whose needs ended with
/// `steps`).
pub(crate) async fn gate(
    ctx: &Arc<StepContext>,
    step: &Step,
    steps: &Map<String, Json>,
    stop: &CancellationToken,
) -> Result<Gate, StoreError> {
    let shared = &ctx.approvals;
    let cancelled = || Gate::Denied("cancelled while waiting for approval".into());
    let turn = tokio::select! {
        turn = shared.turn.lock() => turn,
        () = stop.cancelled() => return Ok(cancelled()),
    };
    let config = config(ctx);
    let (label, details) = describe(ctx, step, steps);
    let request = ApprovalRequest {
        call_id: step.id.clone(),
        tool: label.clone(),
        arguments: details,
    };
    // Asked by an earlier process: the same request, its times kept.
    let fresh = ctx.store.approval(&ctx.run_id, &step.id).await?.is_none();
    let now = Utc::now();
    let timeout = chrono::Duration::from_std(config.timeout).unwrap_or(chrono::Duration::MAX);
    let stored = ctx
        .store
        .wait_for_approval(
            &ctx.run_id,
            "{}".to_string(),
            request.clone(),
            now,
            now + timeout,
        )
        .await?;
    if fresh {
        let event = RunEvent::ApprovalRequested {
            id: step.id.clone(),
            name: label.clone(),
            arguments: stored.request.arguments.clone(),
            timeout_at: stored.timeout_at,
        };
        ctx.record(event).await?;
        if let Some(notify) = config
            .notify
            .as_ref()
            .filter(|n| n.wants(NotifyEvent::Approval))
        {
            let mut notice = Notice::approval(&ctx.job.agent, &ctx.run_id, &stored);
            notice.reason = Some(format!(
                "step `{}` of the pipeline waits for a person's approval",
                step.id
            ));
            shared.notifier.send(notify, notice);
        }
    }
    let decision = {
        let _waiting = shared.wait_started();
        let closing = async {
            match &ctx.job.closing {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(cancelled()),
            () = closing => return Ok(Gate::Suspended),
            decision = shared.approvals.wait(&ctx.run_id, &stored.request) => decision?,
        }
    };
    let resumed = ctx
        .store
        .resume_after_approval(&ctx.run_id, crate::run::owner::this_process())
        .await?;
    drop(turn);
    if !resumed {
        return Ok(Gate::Denied(
            "the run is no longer waiting for approval (cancelled?)".into(),
        ));
    }
    let event = RunEvent::ApprovalDecided {
        id: step.id.clone(),
        name: label,
        approved: decision.approved,
        by: decision.by,
        reason: decision.reason.clone(),
    };
    ctx.record(event).await?;
    Ok(if decision.approved {
        Gate::Approved
    } else {
        Gate::Denied(decision.denial_text())
    })
}
