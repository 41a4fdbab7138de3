//! Tests of `llm::retry`: scripted providers, the waits counted, not slept.

use futures::future::BoxFuture;

use super::*;
use crate::llm::CutKind;

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
    /// Per retry: its reason and whether it discarded output.
    notices: Vec<(RetryReason, bool)>,
    slept: Vec<Duration>,
    deltas: Vec<Delta>,
}

async fn run(script: Vec<Step>, policy: &RetryPolicy) -> Outcome {
    run_until(script, policy, None).await
}

async fn run_until(script: Vec<Step>, policy: &RetryPolicy, deadline: Option<Instant>) -> Outcome {
    let provider = Scripted::new(script);
    let request = ChatRequest {
        model: "m".into(),
        messages: vec![],
        tools: vec![],
        temperature: None,
        max_tokens: None,
        output_schema: None,
        cache_key: None,
    };
    let slept = std::sync::Arc::new(Mutex::new(Vec::new()));
    let slept2 = slept.clone();
    let sleep = move |d: Duration| -> BoxFuture<'static, ()> {
        slept2.lock().unwrap().push(d);
        Box::pin(async {})
    };
    let mut deltas = Vec::new();
    let mut retries = Vec::new();
    let mut notices = Vec::new();
    let result = retry_with_sleep(
        &provider,
        None,
        &request,
        policy,
        deadline,
        &mut |d| deltas.push(d),
        &mut |n| {
            retries.push((n.attempt, n.delay));
            notices.push((n.reason, n.discarded_output));
        },
        sleep,
    )
    .await;
    let slept = slept.lock().unwrap().clone();
    Outcome {
        result,
        attempts: provider.attempts.load(Ordering::SeqCst),
        retries,
        notices,
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
    match out.result {
        Err(ProviderError::GaveUp { last, why }) => {
            assert!(matches!(*last, ProviderError::Status { status: 502, .. }));
            assert_eq!(why, "gave up after 2 attempts");
        }
        other => panic!("{other:?}"),
    }
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
    let err = out.result.unwrap_err();
    assert!(
        matches!(&err, ProviderError::GaveUp { last, .. } if matches!(**last, ProviderError::Status { status: 429, .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("status 429"), "{err}");
    assert_eq!(out.attempts, 1);
    assert!(out.slept.is_empty());
}

#[tokio::test]
async fn a_retry_after_beyond_the_deadline_fails_at_once_and_says_so() {
    let deadline = Instant::now() + Duration::from_secs(3);
    let out = run_until(
        vec![(vec![], status(429, Some(5))), (vec![], ok("unused"))],
        &policy(),
        Some(deadline),
    )
    .await;
    let err = out.result.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("HTTP 429: status 429 ("), "{text}");
    assert!(
        text.contains("retry after 5.0s (Retry-After), which does not fit"),
        "{text}"
    );
    assert_eq!(out.attempts, 1);
    assert!(out.slept.is_empty());

    // One that fits is waited for, the deadline notwithstanding.
    let deadline = Instant::now() + Duration::from_secs(60);
    let out = run_until(
        vec![(vec![], status(429, Some(5))), (vec![], ok("x"))],
        &policy(),
        Some(deadline),
    )
    .await;
    assert!(out.result.is_ok());
    assert_eq!(out.slept, vec![Duration::from_secs(5)]);
}

#[test]
fn decisions_follow_the_time_left() {
    let p = RetryPolicy {
        max_attempts: 100,
        base_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(8),
    };
    let e500 = ProviderError::Status {
        status: 500,
        message: "m".into(),
        retry_after: None,
    };
    // Plenty of time: a jittered backoff within the cap.
    for attempt in 1..=6 {
        match p.decide(attempt, &e500, Some(Duration::from_secs(600))) {
            Next::Retry(d) => assert!(d <= p.backoff_cap(attempt), "{d:?}"),
            other => panic!("{other:?}"),
        }
    }
    // No time left: give up, saying so.
    match p.decide(1, &e500, Some(Duration::ZERO)) {
        Next::GiveUp(why) => assert!(why.contains("no time left"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Not retryable: fail as is, whatever the time.
    let e400 = ProviderError::Status {
        status: 400,
        message: "m".into(),
        retry_after: None,
    };
    assert_eq!(
        p.decide(1, &e400, Some(Duration::from_secs(600))),
        Next::Fail
    );
    // A Retry-After that fits is at least waited, and within the time.
    let e429 = ProviderError::Status {
        status: 429,
        message: "m".into(),
        retry_after: Some(Duration::from_secs(2)),
    };
    for _ in 0..50 {
        match p.decide(3, &e429, Some(Duration::from_millis(2500))) {
            Next::Retry(d) => {
                assert!(d >= Duration::from_secs(2) && d < Duration::from_millis(2500))
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        p.decide(3, &e429, Some(Duration::from_secs(2))),
        Next::GiveUp(_)
    ));
}

#[test]
fn model_retry_events_of_old_rows_still_read() {
    use crate::types::RunEvent;
    let old = r#"{"type":"model_retry","attempt":2,"delay_ms":750,"error":"HTTP 500: x"}"#;
    let event: RunEvent = serde_json::from_str(old).unwrap();
    assert_eq!(
        event,
        RunEvent::ModelRetry {
            attempt: 2,
            delay_ms: 750,
            error: "HTTP 500: x".into(),
            reason: RetryReason::Connection,
            discarded_output: false,
        }
    );
    let new = RunEvent::ModelRetry {
        attempt: 1,
        delay_ms: 0,
        error: "cut".into(),
        reason: RetryReason::InvalidChunk,
        discarded_output: true,
    };
    let json = serde_json::to_value(&new).unwrap();
    assert_eq!(json["reason"], "invalid_chunk");
    assert_eq!(json["discarded_output"], true);
    assert_eq!(serde_json::from_value::<RunEvent>(json).unwrap(), new);
}

#[test]
fn retried_statuses_and_cuts() {
    let status = |s: u16| ProviderError::Status {
        status: s,
        message: String::new(),
        retry_after: None,
    };
    for s in [408, 409, 429, 500, 502, 503, 504, 529] {
        assert_eq!(status(s).retry_reason(), Some(RetryReason::Status), "{s}");
    }
    for s in [400, 401, 403, 404, 413, 422] {
        assert_eq!(status(s).retry_reason(), None, "{s}");
    }
    let cut = |k| ProviderError::cut(k, "x");
    assert_eq!(
        cut(CutKind::Broken).retry_reason(),
        Some(RetryReason::StreamCut)
    );
    assert_eq!(
        cut(CutKind::EndedEarly).retry_reason(),
        Some(RetryReason::StreamCut)
    );
    assert_eq!(cut(CutKind::Idle).retry_reason(), Some(RetryReason::Idle));
    assert_eq!(
        cut(CutKind::InvalidChunk).retry_reason(),
        Some(RetryReason::InvalidChunk)
    );
}

#[tokio::test]
async fn a_cut_after_deltas_is_retried_and_its_output_declared_void() {
    let out = run(
        vec![
            (
                vec!["Hel"],
                Err(ProviderError::cut(CutKind::Broken, "reset")),
            ),
            (vec!["Hello"], ok("Hello")),
        ],
        &policy(),
    )
    .await;
    assert_eq!(out.result.unwrap().text, "Hello");
    assert_eq!(out.attempts, 2);
    assert_eq!(out.notices, vec![(RetryReason::StreamCut, true)]);
    assert_eq!(
        out.deltas,
        vec![Delta::Text("Hel".into()), Delta::Text("Hello".into())]
    );
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
        match p.decide(2, &err, None) {
            Next::Retry(d) => assert!(d <= Duration::from_millis(200)),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(p.decide(4, &err, None), Next::GiveUp(_)));
    let zero = RetryPolicy {
        max_attempts: 0,
        ..p
    };
    assert!(matches!(zero.decide(1, &err, None), Next::GiveUp(_)));
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
        cache_key: None,
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
