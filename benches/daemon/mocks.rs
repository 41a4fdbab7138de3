//! Concurrent runs (figure 3), first half: the mock LLM alone, the
//! reference the daemon's throughput is compared with.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::process::own_cpu_time;
use crate::stats::percentile;
use crate::support::mock_llm::{MockLlm, Reply};
use crate::{DEADLINE, Table, ms, sorted};

/// The body the engine sends, in its shape: streamed, usage asked for.
pub(crate) fn chat_body(i: usize) -> Value {
    json!({
        "model": "m",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": format!("Run {i}: say ok.")}],
    })
}

/// `n` mock servers answering every completion with a short text, after
/// `latency` when given.
pub(crate) fn start_mocks(n: usize, latency: Option<Duration>) -> Vec<MockLlm> {
    (0..n)
        .map(|_| {
            let mock = MockLlm::start_in_thread();
            let text = Reply::Text("ok, done.".into());
            mock.set_fallback(match latency {
                Some(wait) => Reply::Delay(wait, Box::new(text)),
                None => text,
            });
            mock
        })
        .collect()
}

/// How a pass's mock answers, for the table.
pub(crate) fn mock_label(latency: Option<Duration>) -> String {
    match latency {
        Some(wait) => format!("mock answering after {} ms", wait.as_millis()),
        None => "mock answering at once".to_string(),
    }
}

/// A client for N concurrent requests: a connection each, no pooling limit.
pub(crate) fn burst_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(DEADLINE)
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .unwrap()
}

/// One streamed completion, read to the end; its latency.
pub(crate) async fn one_completion(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> Result<Duration, String> {
    let start = Instant::now();
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if response.status() != 200 {
        return Err(format!("status {}", response.status()));
    }
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !text.contains("[DONE]") {
        return Err("stream without [DONE]".into());
    }
    Ok(start.elapsed())
}

pub(crate) struct MockFigures {
    /// Completions per second, all N at once.
    pub(crate) throughput: f64,
    /// Median latency of one completion under that load.
    pub(crate) loaded_median: Duration,
    /// Median latency of one completion alone.
    pub(crate) alone_median: Duration,
}

pub(crate) async fn mock_alone(
    runs: usize,
    mocks: &[MockLlm],
    latency: Option<Duration>,
    table: &mut Table,
) -> MockFigures {
    let label = mock_label(latency);
    let client = burst_client();
    let urls: Vec<String> = mocks
        .iter()
        .map(|m| format!("{}/chat/completions", m.base_url()))
        .collect();
    // Unloaded: one at a time.
    let mut alone = Vec::new();
    // Fewer when each takes a model's latency.
    let samples = if latency.is_some() { 5 } else { 60 };
    for i in 0..samples {
        let latency = one_completion(&client, &urls[i % urls.len()], &chat_body(i))
            .await
            .expect("mock completion");
        if i >= samples / 6 {
            alone.push(ms(latency));
        }
    }
    let alone = sorted(alone);
    // N at once, three times: the best is the reference (a burst of new
    // connections now and then loses SYNs to a full accept queue and waits
    // a second for the retry, which would flatter the daemon).
    let client = Arc::new(client);
    let mut bursts: Vec<MockBurst> = Vec::new();
    for _ in 0..3 {
        bursts.push(mock_burst(runs, &client, &urls).await);
    }
    let (best, others) = best_of(bursts, |b| b.throughput);
    let MockBurst {
        throughput,
        wall,
        cpu,
        latencies,
        errors,
    } = best;
    let first_error = errors.first().cloned().unwrap_or_default();
    table.row(
        &format!("{label}, alone: {runs} concurrent streamed completions"),
        "(reference)",
        format!("**{throughput:.0} /s** ({:.0} ms wall)", ms(wall)),
        format!(
            "best of 3 bursts ({} /s); latency under load p50 {:.0} ms, p99 {:.0} ms; alone p50 {:.2} ms; errors {} {first_error}; {} mock server(s); bench-process CPU {:.2} s",
            others,
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            percentile(&alone, 0.5),
            errors.len(),
            mocks.len(),
            cpu.as_secs_f64()
        ),
    );
    MockFigures {
        throughput,
        loaded_median: Duration::from_secs_f64(percentile(&latencies, 0.5) / 1000.0),
        alone_median: Duration::from_secs_f64(percentile(&alone, 0.5) / 1000.0),
    }
}

/// The burst of highest `throughput`, and every burst's throughput as
/// "a, b, c" per second.
pub(crate) fn best_of<T>(bursts: Vec<T>, throughput: impl Fn(&T) -> f64) -> (T, String) {
    let all: Vec<String> = bursts
        .iter()
        .map(|b| format!("{:.0}", throughput(b)))
        .collect();
    let best = bursts
        .into_iter()
        .max_by(|a, b| throughput(a).total_cmp(&throughput(b)))
        .expect("at least one burst");
    (best, all.join(", "))
}

/// One burst of N concurrent completions straight at the mocks.
pub(crate) struct MockBurst {
    pub(crate) throughput: f64,
    pub(crate) wall: Duration,
    /// CPU time of this process (the mocks and the client) during it.
    pub(crate) cpu: Duration,
    /// Sorted, in ms.
    pub(crate) latencies: Vec<f64>,
    pub(crate) errors: Vec<String>,
}

pub(crate) async fn mock_burst(
    runs: usize,
    client: &Arc<reqwest::Client>,
    urls: &[String],
) -> MockBurst {
    let cpu_before = own_cpu_time();
    let start = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let client = client.clone();
            let url = urls[i % urls.len()].clone();
            tokio::spawn(async move { one_completion(&client, &url, &chat_body(i)).await })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(latency) => latencies.push(ms(latency)),
            Err(e) => errors.push(e),
        }
    }
    let wall = start.elapsed();
    MockBurst {
        throughput: runs as f64 / wall.as_secs_f64(),
        wall,
        cpu: own_cpu_time() - cpu_before,
        latencies: sorted(latencies),
        errors,
    }
}
