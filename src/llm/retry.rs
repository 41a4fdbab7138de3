//! Retrying model calls, outside the providers: connection errors, 5xx, 408
//! and 429 are tried again ([`ProviderError::is_retryable`]) with
//! exponential backoff and full jitter, honouring `Retry-After`. An attempt
//! that already delivered a delta is never retried, since its text may have
//! been shown.

use std::time::Duration;

use futures::future::BoxFuture;
use rand::Rng;

use super::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};

/// The longest `Retry-After` we wait for; a provider asking for more makes
/// the call fail at once with its error. The run's own timeout (and
/// cancellation) still bound any wait.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// How often and how patiently a model call is retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, the first included (0 counts as 1).
    pub max_attempts: u32,
    /// The backoff cap of the first retry; it doubles per attempt.
    pub base_delay: Duration,
    /// The largest backoff (a longer `Retry-After` up to
    /// [`MAX_RETRY_AFTER`] is still honoured).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
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

    /// The wait before retrying after failed attempt `attempt` (1-based)
    /// with `err`, or `None` when the call should give up: not retryable,
    /// out of attempts, or a `Retry-After` above [`MAX_RETRY_AFTER`].
    pub fn delay_for(&self, attempt: u32, err: &ProviderError) -> Option<Duration> {
        if !err.is_retryable() || attempt >= self.max_attempts.max(1) {
            return None;
        }
        let cap = self.backoff_cap(attempt);
        let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        let jittered = Duration::from_nanos(rand::rng().random_range(0..=cap_nanos));
        match err.retry_after() {
            Some(asked) if asked > MAX_RETRY_AFTER => None,
            Some(asked) => Some(asked.max(jittered)),
            None => Some(jittered),
        }
    }
}

/// Calls `provider` until it answers, the error is not retryable, or the
/// policy gives up; returns the last error then. `on_retry` is told the
/// failed attempt (1-based), the wait before the next one and the error,
/// before the wait.
pub async fn stream_with_retry(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    on_retry: &mut (dyn FnMut(u32, Duration, &ProviderError) + Send),
) -> Result<ModelTurn, ProviderError> {
    let sleep = |d: Duration| -> BoxFuture<'static, ()> { Box::pin(tokio::time::sleep(d)) };
    retry_with_sleep(provider, request, policy, on_delta, on_retry, &sleep).await
}

/// [`stream_with_retry`] with the waiting supplied, so tests need not wait.
async fn retry_with_sleep(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    on_delta: &mut (dyn FnMut(Delta) + Send),
    on_retry: &mut (dyn FnMut(u32, Duration, &ProviderError) + Send),
    sleep: &(dyn Fn(Duration) -> BoxFuture<'static, ()> + Sync),
) -> Result<ModelTurn, ProviderError> {
    let mut attempt = 1u32;
    loop {
        let mut delivered = false;
        let result = {
            let mut tracking = |d: Delta| {
                delivered = true;
                on_delta(d);
            };
            provider.stream(request, &mut tracking).await
        };
        let err = match result {
            Ok(turn) => return Ok(turn),
            Err(err) => err,
        };
        if delivered {
            return Err(err);
        }
        let Some(delay) = policy.delay_for(attempt, &err) else {
            return Err(err);
        };
        on_retry(attempt, delay, &err);
        sleep(delay).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// One scripted attempt: the deltas to send, then the result.
    type Step = (Vec<&'static str>, Result<ModelTurn, ProviderError>);

    /// A provider answering from a script, counting attempts.
    struct Scripted {
        script: Mutex<Vec<Step>>,
        attempts: AtomicU32,
    }

    impl Scripted {
        fn new(mut script: Vec<Step>) -> Self {
            script.reverse();
            Scripted {
                script: Mutex::new(script),
                attempts: AtomicU32::new(0),
            }
        }
    }

    impl Provider for Scripted {
        fn stream<'a>(
            &'a self,
            _request: &'a ChatRequest,
            on_delta: &'a mut (dyn FnMut(Delta) + Send),
        ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            let (deltas, result) = self.script.lock().unwrap().pop().expect("script exhausted");
            Box::pin(async move {
                for d in deltas {
                    on_delta(Delta::Text(d.into()));
                }
                result
            })
        }
    }

    fn ok(text: &str) -> Result<ModelTurn, ProviderError> {
        Ok(ModelTurn {
            text: text.into(),
            ..ModelTurn::default()
        })
    }

    fn status(code: u16, retry_after: Option<u64>) -> Result<ModelTurn, ProviderError> {
        Err(ProviderError::Status {
            status: code,
            message: format!("status {code}"),
            retry_after: retry_after.map(Duration::from_secs),
        })
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }

    struct Outcome {
        result: Result<ModelTurn, ProviderError>,
        attempts: u32,
        retries: Vec<(u32, Duration)>,
        slept: Vec<Duration>,
        deltas: Vec<Delta>,
    }

    async fn run(script: Vec<Step>, policy: &RetryPolicy) -> Outcome {
        let provider = Scripted::new(script);
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
        };
        let slept = std::sync::Arc::new(Mutex::new(Vec::new()));
        let slept2 = slept.clone();
        let sleep = move |d: Duration| -> BoxFuture<'static, ()> {
            slept2.lock().unwrap().push(d);
            Box::pin(async {})
        };
        let mut deltas = Vec::new();
        let mut retries = Vec::new();
        let result = retry_with_sleep(
            &provider,
            &request,
            policy,
            &mut |d| deltas.push(d),
            &mut |n, d, _e| retries.push((n, d)),
            &sleep,
        )
        .await;
        let slept = slept.lock().unwrap().clone();
        Outcome {
            result,
            attempts: provider.attempts.load(Ordering::SeqCst),
            retries,
            slept,
            deltas,
        }
    }

    #[tokio::test]
    async fn retries_connect_5xx_and_429_then_succeeds() {
        let out = run(
            vec![
                (vec![], Err(ProviderError::Connect("refused".into()))),
                (vec![], status(500, None)),
                (vec![], status(429, None)),
                (vec!["hi"], ok("hi")),
            ],
            &policy(),
        )
        .await;
        assert_eq!(out.result.unwrap().text, "hi");
        assert_eq!(out.attempts, 4);
        assert_eq!(out.deltas, vec![Delta::Text("hi".into())]);
        let attempts: Vec<u32> = out.retries.iter().map(|r| r.0).collect();
        assert_eq!(attempts, vec![1, 2, 3]);
        for (n, d) in &out.retries {
            assert!(*d <= policy().backoff_cap(*n), "attempt {n}: {d:?}");
        }
        let reported: Vec<Duration> = out.retries.iter().map(|r| r.1).collect();
        assert_eq!(out.slept, reported);
    }

    #[tokio::test]
    async fn client_errors_and_stream_errors_are_not_retried() {
        for err in [
            status(400, None),
            status(401, None),
            Err(ProviderError::Stream("broken".into())),
            Err(ProviderError::Config("no key".into())),
        ] {
            let want = err.clone().unwrap_err();
            let out = run(vec![(vec![], err)], &policy()).await;
            assert_eq!(out.result.unwrap_err(), want);
            assert_eq!(out.attempts, 1);
            assert!(out.retries.is_empty());
        }
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts_with_the_last_error() {
        let p = RetryPolicy {
            max_attempts: 2,
            ..policy()
        };
        let out = run(
            vec![(vec![], status(503, None)), (vec![], status(502, None))],
            &p,
        )
        .await;
        assert!(matches!(
            out.result,
            Err(ProviderError::Status { status: 502, .. })
        ));
        assert_eq!(out.attempts, 2);
        assert_eq!(out.retries.len(), 1);
    }

    #[tokio::test]
    async fn retry_after_is_honoured_and_too_long_gives_up() {
        let out = run(
            vec![(vec![], status(429, Some(5))), (vec![], ok("x"))],
            &policy(),
        )
        .await;
        assert!(out.result.is_ok());
        assert_eq!(out.retries, vec![(1, Duration::from_secs(5))]);
        assert_eq!(out.slept, vec![Duration::from_secs(5)]);

        let out = run(vec![(vec![], status(429, Some(601)))], &policy()).await;
        assert!(matches!(
            out.result,
            Err(ProviderError::Status { status: 429, .. })
        ));
        assert_eq!(out.attempts, 1);
        assert!(out.slept.is_empty());
    }

    #[tokio::test]
    async fn never_retries_after_a_delta() {
        let out = run(
            vec![
                (vec!["partial"], Err(ProviderError::Connect("reset".into()))),
                (vec![], ok("unused")),
            ],
            &policy(),
        )
        .await;
        assert!(matches!(out.result, Err(ProviderError::Connect(_))));
        assert_eq!(out.attempts, 1);
        assert_eq!(out.deltas, vec![Delta::Text("partial".into())]);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = policy();
        assert_eq!(p.backoff_cap(1), Duration::from_millis(100));
        assert_eq!(p.backoff_cap(3), Duration::from_millis(400));
        assert_eq!(p.backoff_cap(10), Duration::from_secs(1));
        assert_eq!(p.backoff_cap(1000), Duration::from_secs(1));
        let err = ProviderError::Connect("x".into());
        for _ in 0..100 {
            assert!(p.delay_for(2, &err).unwrap() <= Duration::from_millis(200));
        }
        assert_eq!(p.delay_for(4, &err), None);
        let zero = RetryPolicy {
            max_attempts: 0,
            ..p
        };
        assert_eq!(zero.delay_for(1, &err), None);
    }

    #[tokio::test]
    async fn real_sleep_path_with_tiny_delays() {
        let provider = Scripted::new(vec![(vec![], status(500, None)), (vec![], ok("y"))]);
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
        };
        let p = RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        };
        let mut retries = 0;
        let turn = stream_with_retry(&provider, &request, &p, &mut |_| {}, &mut |_, _, _| {
            retries += 1
        })
        .await
        .unwrap();
        assert_eq!(turn.text, "y");
        assert_eq!(retries, 1);
    }
}
