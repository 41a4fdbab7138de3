//! Retrying model calls, outside the providers. Connection errors, 408,
//! 409, 429, 5xx (Anthropic's 529 included) and cut answer streams (broken,
//! ended before their end marker, idle, a chunk that is not JSON) are tried
//! again ([`ProviderError::retry_reason`]); other errors fail at once.
//!
//! The waits are capped exponential backoff with full jitter: a random wait
//! in `[0, min(max_delay, base_delay * 2^(n-1))]` after failed attempt `n`.
//! The budget is the time left of the run (`limits.timeout`), passed in as
//! a deadline: a retry whose wait does not fit before it is not made, and
//! the call fails at once with the provider's last error saying why. A
//! `Retry-After` (seconds or an HTTP date) is waited for when it fits, and
//! makes the call fail at once when it does not. With a deadline, an
//! attempt that shows no progress (no delta) for half the time left (when
//! that is 2 s or more) is cut as idle and retried ([`patience`]): the
//! provider's own idle timeout (5 minutes) can outlast the whole run,
//! which then timed out instead.
//!
//! A cut stream is retried even when some of its text was already streamed
//! to the caller: the whole call is re-sent, the caller is told the output
//! it got from the failed attempt is void ([`RetryNotice::discarded_output`]),
//! and the turn returned holds the successful attempt's text only. This
//! repeats no side effect because the engine runs a turn's tools only
//! after its answer has ended whole: within one model call no tool has run,
//! and a tool that ran belongs to a call that already succeeded, which is
//! never re-sent.
//!
//! The loop (attempt, classify, wait, notify, attempt again) is `backon`'s
//! `Retryable`, the crate the daemon also retries its event batches with.
//! Its backoff is this module's full-jitter sequence (backon's own jitter
//! adds `[0, delay)` on top of the delay, which is not full jitter), and
//! its `adjust` hook applies [`RetryPolicy::decide`]: the deadline and
//! `Retry-After`, which backon's total-delay budget cannot express (it
//! counts the sleeps, not the time the attempts took). Why a retryable
//! error was not retried is kept beside the loop and put into the
//! [`ProviderError::GaveUp`] it returns. May depend on `backon`, `llm` and
//! `types` only.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{Retryable, Sleeper};
use rand::Rng;
use tokio::time::Instant;

use super::limits::ProviderGate;
use super::{ChatRequest, CutKind, Delta, ModelTurn, Provider, ProviderError};
use crate::types::RetryReason;

/// The longest `Retry-After` waited for when a call has no deadline; a
/// provider asking for more makes the call fail at once with its error.
/// With a deadline, the time left before it is the bound instead.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// How patiently a model call is retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, the first included (0 counts as 1): a backstop. The
    /// time left of the run is the real bound.
    pub max_attempts: u32,
    /// The backoff cap of the first retry; it doubles per attempt.
    pub base_delay: Duration,
    /// The largest backoff cap (a longer `Retry-After` is still honoured
    /// when it fits).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 500 ms doubling up to 30 s, 100 attempts at most: far more than the
    /// default 10 minute timeout leaves room for, so the run's time is
    /// what bounds the retries.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 100,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Wait this long, then try again.
    Retry(Duration),
    /// The error is not worth another attempt: fail with it as it is.
    Fail,
    /// The error was worth another attempt but none is made, for this
    /// reason: fail with [`ProviderError::GaveUp`].
    GiveUp(String),
}

impl RetryPolicy {
    /// The backoff ceiling after failed attempt `attempt` (1-based):
    /// `base_delay * 2^(attempt-1)`, at most `max_delay`.
    pub fn backoff_cap(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(31);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// A random wait in `[0, backoff_cap(attempt)]` (full jitter).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let cap = self.backoff_cap(attempt);
        let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::rng().random_range(0..=cap_nanos))
    }

    /// What to do after failed attempt `attempt` (1-based) ended with
    /// `err`, with `time_left` before the call's deadline (`None`: no
    /// deadline, and [`MAX_RETRY_AFTER`] bounds a `Retry-After`).
    pub fn decide(&self, attempt: u32, err: &ProviderError, time_left: Option<Duration>) -> Next {
        self.decide_with(attempt, err, self.backoff(attempt), time_left)
    }

    /// [`RetryPolicy::decide`] with the jittered backoff already drawn.
    fn decide_with(
        &self,
        attempt: u32,
        err: &ProviderError,
        jittered: Duration,
        time_left: Option<Duration>,
    ) -> Next {
        if !err.is_retryable() {
            return Next::Fail;
        }
        if attempt >= self.max_attempts.max(1) {
            return Next::GiveUp(format!("gave up after {attempt} attempts"));
        }
        let Some(asked) = err.retry_after() else {
            return match time_left {
                Some(left) if jittered >= left => Next::GiveUp(format!(
                    "no time left for another attempt: {} of the run's limits.timeout remained after {attempt} attempt(s)",
                    secs(left)
                )),
                _ => Next::Retry(jittered),
            };
        };
        match time_left {
            Some(left) if asked >= left => Next::GiveUp(format!(
                "the provider asked to retry after {} (Retry-After), which does not fit in the {} left of the run's limits.timeout",
                secs(asked),
                secs(left)
            )),
            // The jitter on top only where it fits too.
            Some(left) => Next::Retry(if jittered.max(asked) < left {
                jittered.max(asked)
            } else {
                asked
            }),
            None if asked > MAX_RETRY_AFTER => Next::GiveUp(format!(
                "the provider asked to retry after {} (Retry-After), more than the {} aurad waits",
                secs(asked),
                secs(MAX_RETRY_AFTER)
            )),
            None => Next::Retry(jittered.max(asked)),
        }
    }
}

/// `1.5s`, `600.0s`.
fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// A retry about to be made, told to the caller before its wait.
#[derive(Debug, Clone, Copy)]
pub struct RetryNotice<'a> {
    /// The failed attempt, 1-based.
    pub attempt: u32,
    /// The wait before the next attempt.
    pub delay: Duration,
    pub error: &'a ProviderError,
    pub reason: RetryReason,
    /// The failed attempt had already delivered deltas: they are void,
    /// and the next attempt's answer starts over.
    pub discarded_output: bool,
}

/// Calls `provider` until it answers, the error is not retryable, or the
/// policy gives up, without a deadline. `on_retry` is told the failed
/// attempt (1-based), the wait before the next one and the error, before
/// the wait. See [`stream_with_retry_until`].
pub async fn stream_with_retry(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    on_retry: &mut (dyn FnMut(u32, Duration, &ProviderError) + Send),
) -> Result<ModelTurn, ProviderError> {
    let mut notify = |n: &RetryNotice<'_>| on_retry(n.attempt, n.delay, n.error);
    stream_with_retry_until(provider, request, policy, None, on_delta, &mut notify).await
}

/// Calls `provider` until it answers, the error is not retryable, or no
/// retry fits before `deadline` (the end of the run's `limits.timeout`);
/// a give-up is a [`ProviderError::GaveUp`] carrying the last error and
/// why. `on_retry` is told of each retry before its wait.
pub async fn stream_with_retry_until(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    on_retry: &mut (dyn FnMut(&RetryNotice<'_>) + Send),
) -> Result<ModelTurn, ProviderError> {
    retry_with_sleep(
        provider,
        None,
        request,
        policy,
        deadline,
        on_delta,
        on_retry,
        tokio::time::sleep,
    )
    .await
}

/// A rough count of the tokens `request` sends (4 characters a token), to
/// charge a tokens-per-minute limit before the answer reports the real one.
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let text: usize = request
        .messages
        .iter()
        .map(|m| m.content().len())
        .sum::<usize>()
        + request
            .tools
            .iter()
            .map(|t| t.description.len() + t.parameters.to_string().len())
            .sum::<usize>();
    (text / 4) as u64 + u64::from(request.max_tokens.unwrap_or(0).min(4096))
}

/// How long an attempt may go without progress (a delta) when `left` is
/// the run's time left: half of it, so that a call that hangs is cut while
/// a retry still fits (the provider's own idle timeout, 5 minutes by
/// default, can be longer than a whole run). `None` (no cut but the
/// provider's) when that half is under [`MIN_PATIENCE`]: a retry would not
/// have the time to answer, and the run's own timeout ends it as before.
fn patience(left: Duration) -> Option<Duration> {
    Some(left / 2).filter(|half| *half >= MIN_PATIENCE)
}

/// The shortest wait for progress before a stalled attempt is cut.
const MIN_PATIENCE: Duration = Duration::from_secs(2);

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs `call`, cutting it as [`CutKind::Idle`] once `patience` passes
/// without progress (`progress`: ms after `started` of the last delta).
async fn cut_when_stalled(
    call: impl std::future::Future<Output = Result<ModelTurn, ProviderError>>,
    started: Instant,
    progress: &AtomicU64,
    patience: Duration,
) -> Result<ModelTurn, ProviderError> {
    let mut call = std::pin::pin!(call);
    loop {
        let last = started + Duration::from_millis(progress.load(Ordering::SeqCst));
        tokio::select! {
            result = call.as_mut() => return result,
            () = tokio::time::sleep_until(last + patience) => {
                let now = started + Duration::from_millis(progress.load(Ordering::SeqCst));
                if now == last {
                    return Err(ProviderError::Cut {
                        kind: CutKind::Idle,
                        detail: format!(
                            "nothing arrived for {:.1}s, half the run's time left; the call is cut so a retry fits",
                            patience.as_secs_f64()
                        ),
                    });
                }
            }
        }
    }
}

/// A provider's shared limits a call passes before each attempt
/// ([`super::limits`]), and who hears of the waits.
pub struct Gated<'a> {
    pub gate: &'a Arc<ProviderGate>,
    /// Told how long an attempt waited for its turn, when it waited.
    pub on_wait: &'a mut (dyn FnMut(Duration) + Send),
}

/// [`stream_with_retry_until`], each attempt passing `gated`'s gate first:
/// the wait for the gate is not an attempt's idleness, and a 429 an
/// attempt gets slows every caller of the provider.
pub async fn stream_gated_until(
    provider: &dyn Provider,
    gated: Option<Gated<'_>>,
    request: &ChatRequest,
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    on_retry: &mut (dyn FnMut(&RetryNotice<'_>) + Send),
) -> Result<ModelTurn, ProviderError> {
    retry_with_sleep(
        provider,
        gated,
        request,
        policy,
        deadline,
        on_delta,
        on_retry,
        tokio::time::sleep,
    )
    .await
}

/// [`stream_with_retry_until`] with the waiting supplied, so tests need not
/// wait.
#[allow(
    clippy::too_many_arguments,
    reason = "the private core of the public entries, each of which passes fewer"
)]
async fn retry_with_sleep(
    provider: &dyn Provider,
    gated: Option<Gated<'_>>,
    request: &ChatRequest,
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    on_retry: &mut (dyn FnMut(&RetryNotice<'_>) + Send),
    sleep: impl Sleeper,
) -> Result<ModelTurn, ProviderError> {
    // Attempts made so far, and whether the latest one delivered deltas.
    let attempts = AtomicU32::new(0);
    let delivered = AtomicBool::new(false);
    // Why a retryable error was not retried, when the policy says so.
    let gave_up: Mutex<Option<String>> = Mutex::new(None);
    // Each attempt borrows the caller's delta sink in turn.
    let on_delta = futures::lock::Mutex::new(on_delta);
    let (gate, on_wait) = match gated {
        Some(g) => (Some(g.gate), Some(futures::lock::Mutex::new(g.on_wait))),
        None => (None, None),
    };
    // Only a tokens-per-minute limit needs the estimate: every provider
    // has a gate, and this walks the whole conversation.
    let estimate = gate
        .filter(|g| g.limits().tokens_per_minute.is_some())
        .map_or(0, |_| estimate_tokens(request));
    let attempt = || async {
        attempts.fetch_add(1, Ordering::SeqCst);
        delivered.store(false, Ordering::SeqCst);
        let mut on_delta = on_delta.lock().await;
        let pass = match gate {
            Some(gate) => Some(gate.enter(estimate).await),
            None => None,
        };
        if let (Some(pass), Some(on_wait)) = (&pass, &on_wait)
            // As the gate counts a wait: passing a free gate takes a few
            // microseconds, which are no wait worth an event.
            && pass.waited >= Duration::from_millis(1)
        {
            (on_wait.lock().await)(pass.waited);
        }
        let started = Instant::now();
        // When the attempt last showed progress (ms after `started`).
        let progress = AtomicU64::new(0);
        let mut tracking = |d: Delta| {
            delivered.store(true, Ordering::SeqCst);
            progress.store(millis(started.elapsed()), Ordering::SeqCst);
            on_delta(d);
        };
        let call = provider.stream(request, &mut tracking);
        let result =
            match deadline.and_then(|d| patience(d.saturating_duration_since(Instant::now()))) {
                None => call.await,
                Some(patience) => cut_when_stalled(call, started, &progress, patience).await,
            };
        if let Some(pass) = pass {
            pass.leave(&result).await;
        }
        result
    };
    // Full jitter: the n-th wait is drawn from `[0, backoff_cap(n)]`.
    let full_jitter = (1..).map(|n| policy.backoff(n));
    let result = attempt
        .retry(full_jitter)
        .sleep(sleep)
        .when(ProviderError::is_retryable)
        .adjust(|err, jittered| {
            let attempt = attempts.load(Ordering::SeqCst);
            let time_left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let jittered = jittered.unwrap_or_else(|| policy.backoff(attempt));
            match policy.decide_with(attempt, err, jittered, time_left) {
                Next::Retry(delay) => Some(delay),
                Next::Fail => None,
                Next::GiveUp(why) => {
                    *gave_up.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                    None
                }
            }
        })
        .notify(|err, delay| {
            on_retry(&RetryNotice {
                attempt: attempts.load(Ordering::SeqCst),
                delay,
                error: err,
                reason: err.retry_reason().unwrap_or_default(),
                discarded_output: delivered.load(Ordering::SeqCst),
            })
        })
        .await;
    result.map_err(
        |last| match gave_up.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(why) => ProviderError::GaveUp {
                last: Box::new(last),
                why,
            },
            None => last,
        },
    )
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
