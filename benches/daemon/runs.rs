//! Concurrent runs (figure 3), second half: runs through the daemon, one
//! at a time, then N at once, against the same mocks' figures alone.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::mocks::{MockFigures, best_of, burst_client, mock_alone, mock_label, start_mocks};
use crate::process::{Daemon, Project, agent_yaml, own_cpu_time};
use crate::stats::percentile;
use crate::support::mock_llm::MockLlm;
use crate::{DEADLINE, Table, ms, sorted};

pub(crate) fn parse_time(value: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value.as_str()?)
        .ok()
        .map(|t| t.to_utc())
}

/// finished_at - created_at of a run, in ms.
pub(crate) fn run_duration(run: &Value) -> Option<f64> {
    let created = parse_time(&run["created_at"])?;
    let finished = parse_time(&run["finished_at"])?;
    Some((finished - created).num_microseconds()? as f64 / 1000.0)
}

pub(crate) async fn post_run(
    client: &reqwest::Client,
    url: &str,
    input: &str,
) -> Result<String, String> {
    let response = client
        .post(url)
        .json(&json!({ "input": input }))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    if status != 202 {
        return Err(format!("status {status}: {body}"));
    }
    body["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("no id in {body}"))
}

/// Polls `GET /v1/runs/{id}` until the run is final.
pub(crate) async fn wait_final(daemon: &Daemon, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let run = daemon.get_json(&format!("/v1/runs/{id}")).await;
        if run["finished_at"].is_string() {
            return run;
        }
        if Instant::now() > deadline {
            daemon.fail(&format!("run {id} not final within 30 s: {run}"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub(crate) async fn runs_bench(
    runs: usize,
    mock_count: usize,
    latency: Option<Duration>,
    table: &mut Table,
) {
    let mocks = start_mocks(mock_count, latency);
    let label = mock_label(latency);
    let mock = mock_alone(runs, &mocks, latency, table).await;

    // Agents spread over the mock servers, so no agent or provider has
    // much of its own to do.
    let agent_count = 20;
    let agents: Vec<(String, String)> = (0..agent_count)
        .map(|i| {
            (
                format!("w{i:02}"),
                agent_yaml(&format!("mock{}/m", i % mocks.len()), "Say ok.", None),
            )
        })
        .collect();
    let project = Project::new(&mocks, &format!("max_concurrent_runs: {runs}\n"), &agents);
    let daemon = Daemon::start(&project).await;
    let client = Arc::new(burst_client());

    if latency.is_none() {
        solo_runs(&daemon, &client, agent_count, &mock, table).await;
    }
    let pass = Pass {
        runs,
        agent_count,
        mocks: &mocks,
        mock,
        label,
    };
    burst(&pass, &daemon, &client, table).await;
    // Keep the project until the daemon is gone.
    drop(daemon);
    drop(project);
}

/// One run at a time: the overhead of a run with nothing else going on.
pub(crate) async fn solo_runs(
    daemon: &Daemon,
    client: &reqwest::Client,
    agent_count: usize,
    mock: &MockFigures,
    table: &mut Table,
) {
    let mut solo = Vec::new();
    for i in 0..23 {
        let url = daemon.url(&format!("/v1/agents/w{:02}/runs", i % agent_count));
        let id = post_run(client, &url, &format!("solo {i}"))
            .await
            .unwrap_or_else(|e| daemon.fail(&format!("POST {url}: {e}")));
        let run = wait_final(daemon, &id).await;
        if run["state"] != "succeeded" {
            daemon.fail(&format!("solo run not succeeded: {run}"));
        }
        if i >= 3 {
            solo.push(run_duration(&run).unwrap());
        }
    }
    let solo = sorted(solo);
    let alone_ms = ms(mock.alone_median);
    table.row(
        "one run at a time: created_at -> finished_at",
        "",
        format!("**{:.1} ms** median", percentile(&solo, 0.5)),
        format!(
            "p90 {:.1} ms; the mock alone answers in {alone_ms:.2} ms, so aurad adds about {:.1} ms per run (n={}; runs poll-awaited one by one; run times are stored to the millisecond, so this is +-1 ms)",
            percentile(&solo, 0.9),
            percentile(&solo, 0.5) - alone_ms,
            solo.len()
        ),
    );
    streamed_solo_runs(daemon, client, agent_count, table).await;
}

/// How many streamed runs [`streamed_solo_runs`] times.
const STREAMED_SOLO: usize = 200;

/// One run at a time again, each `POST` read to the end of its event stream
/// (no polling, whose requests the daemon would also serve): the daemon's
/// CPU per run when it has nothing else to do. Under a burst the same runs
/// cost far less CPU each, since the runtime's workers then go from one
/// run's step to the next instead of parking between steps.
async fn streamed_solo_runs(
    daemon: &Daemon,
    client: &reqwest::Client,
    agent_count: usize,
    table: &mut Table,
) {
    let stream = async |i: usize| {
        let url = daemon.url(&format!("/v1/agents/w{:02}/runs", i % agent_count));
        let start = Instant::now();
        let body = client
            .post(&url)
            .header("accept", "text/event-stream")
            .json(&json!({ "input": format!("streamed {i}") }))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| e.to_string());
        let text = match body {
            Ok(response) => response.text().await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        }
        .unwrap_or_else(|e| daemon.fail(&format!("POST {url} (streamed): {e}")));
        if !text.contains("\"succeeded\"") {
            daemon.fail(&format!("streamed solo run did not succeed:\n{text}"));
        }
        ms(start.elapsed())
    };
    for i in 0..10 {
        stream(i).await;
    }
    let cpu_before = daemon.cpu_time();
    let mut latencies = Vec::new();
    for i in 0..STREAMED_SOLO {
        latencies.push(stream(i).await);
    }
    let cpu = daemon.cpu_time() - cpu_before;
    let latencies = sorted(latencies);
    table.row(
        "one run at a time, streamed: daemon CPU per run",
        "",
        format!("**{:.2} ms**", ms(cpu) / STREAMED_SOLO as f64),
        format!(
            "{STREAMED_SOLO} runs, each POST read to the end of its event stream, one after another; POST to stream end p50 {:.2} ms, p90 {:.2} ms",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.9)
        ),
    );
}

/// What a burst of runs goes against.
pub(crate) struct Pass<'a> {
    pub(crate) runs: usize,
    /// Agents `w00`.. the runs are spread over.
    pub(crate) agent_count: usize,
    pub(crate) mocks: &'a [MockLlm],
    /// The same mocks' figures without the daemon.
    pub(crate) mock: MockFigures,
    pub(crate) label: String,
}

/// One burst of N runs through the daemon, followed until every one is
/// final.
pub(crate) struct RunBurst {
    /// Runs per second, first POST to the last run's `finished_at`.
    pub(crate) throughput: f64,
    /// The same span, in seconds.
    pub(crate) wall: f64,
    /// Until every POST was answered.
    pub(crate) all_accepted: Duration,
    /// When each POST was answered, from the first one sent; sorted, in ms.
    pub(crate) post_latencies: Vec<f64>,
    pub(crate) peak_running: u64,
    /// Completions the mocks served during the burst.
    pub(crate) requests: usize,
    pub(crate) daemon_cpu: Duration,
    pub(crate) own_cpu: Duration,
    pub(crate) post_errors: Vec<String>,
    pub(crate) not_succeeded: Vec<String>,
    pub(crate) missing: usize,
    /// `finished_at - created_at` of each run; sorted, in ms.
    pub(crate) durations: Vec<f64>,
}

impl RunBurst {
    pub(crate) fn errors(&self) -> usize {
        self.post_errors.len() + self.not_succeeded.len() + self.missing
    }
}

/// N runs at once, three times: like the mock-alone reference, the best
/// burst is the daemon's figure (disturbances on a shared machine only
/// ever slow a burst down), and the errors of all three count.
pub(crate) async fn burst(
    pass: &Pass<'_>,
    daemon: &Daemon,
    client: &Arc<reqwest::Client>,
    table: &mut Table,
) {
    let mut bursts = Vec::new();
    for _ in 0..3 {
        bursts.push(run_burst(pass, daemon, client).await);
    }
    let errors: usize = bursts.iter().map(RunBurst::errors).sum();
    let (b, others) = best_of(bursts, |b| b.throughput);
    let Pass {
        runs,
        ref mock,
        ref label,
        ..
    } = *pass;
    let loaded_ms = ms(mock.loaded_median);
    let overhead: Vec<f64> = b.durations.iter().map(|d| d - loaded_ms).collect();
    table.row(
        &format!("aurad, {label}: {runs} concurrent runs (max_concurrent_runs: {runs}), first POST -> last run final"),
        "",
        format!("**{:.0} runs/s** ({:.2} s)", b.throughput, b.wall),
        format!(
            "best of 3 bursts ({} runs/s); all {runs} POSTs answered after {:.2} s (POST done p50 {:.0} ms, p99 {:.0} ms); peak {} running seen; {} completions at the mock; daemon CPU {:.2} s ({:.2} ms/run), bench process CPU {:.2} s",
            others,
            b.all_accepted.as_secs_f64(),
            percentile(&b.post_latencies, 0.5),
            percentile(&b.post_latencies, 0.99),
            b.peak_running,
            b.requests,
            b.daemon_cpu.as_secs_f64(),
            ms(b.daemon_cpu) / runs as f64,
            b.own_cpu.as_secs_f64()
        ),
    );
    table.row(
        &format!("aurad throughput / mock-alone throughput ({label})"),
        ">= 80%",
        format!("**{:.0}%**", 100.0 * b.throughput / mock.throughput),
        format!("{:.0} vs {:.0} per second", b.throughput, mock.throughput),
    );
    table.row(
        &format!(
            "errors, {label}, 3 bursts (non-202 answers + runs not `succeeded` + runs not found)"
        ),
        "0",
        format!("**{errors}**"),
        format!(
            "best burst: {} non-202, {} not succeeded, {} missing",
            b.post_errors.len(),
            b.not_succeeded.len(),
            b.missing
        ),
    );
    table.row(
        &format!("run overhead under load, {label}: (finished_at - created_at) - mock median latency under load"),
        "",
        format!(
            "**{:.0} ms** p50, {:.0} ms p99",
            percentile(&overhead, 0.5),
            percentile(&overhead, 0.99)
        ),
        format!(
            "best burst's run durations p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; mock median under load {loaded_ms:.0} ms",
            percentile(&b.durations, 0.5),
            percentile(&b.durations, 0.99),
            b.durations.last().copied().unwrap_or(f64::NAN)
        ),
    );
}

pub(crate) async fn run_burst(
    pass: &Pass<'_>,
    daemon: &Daemon,
    client: &Arc<reqwest::Client>,
) -> RunBurst {
    let Pass {
        runs,
        agent_count,
        mocks,
        ..
    } = *pass;
    let before = mocks.iter().map(MockLlm::request_count).sum::<usize>();
    let daemon_cpu_before = daemon.cpu_time();
    let own_cpu_before = own_cpu_time();
    let first_post = SystemTime::now();
    let start = Instant::now();
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let client = client.clone();
            let url = daemon.url(&format!("/v1/agents/w{:02}/runs", i % agent_count));
            tokio::spawn(async move {
                let result = post_run(&client, &url, &format!("Run {i}: say ok.")).await;
                (result, start.elapsed())
            })
        })
        .collect();
    let mut ids = Vec::new();
    let mut post_errors = Vec::new();
    let mut post_latencies = Vec::new();
    for task in tasks {
        let (result, at) = task.await.unwrap();
        post_latencies.push(ms(at));
        match result {
            Ok(id) => ids.push(id),
            Err(e) => post_errors.push(e),
        }
    }
    let all_accepted = start.elapsed();
    // Until nothing is queued or running: the gauges of /metrics (cheap,
    // unlike listing up to N runs every poll).
    let deadline = Instant::now() + DEADLINE;
    let mut peak_running = 0;
    loop {
        let (running, queued) = daemon.gauges().await;
        peak_running = peak_running.max(running);
        if running == 0 && queued == 0 {
            break;
        }
        if Instant::now() > deadline {
            daemon.fail(&format!(
                "{running} running, {queued} queued after {DEADLINE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let daemon_cpu = daemon.cpu_time() - daemon_cpu_before;
    let own_cpu = own_cpu_time() - own_cpu_before;
    let listed = daemon
        .get_json(&format!("/v1/runs?limit={}", runs.min(1000)))
        .await;
    let listed = listed["runs"].as_array().cloned().unwrap_or_default();
    let by_id: std::collections::HashMap<&str, &Value> = listed
        .iter()
        .filter_map(|r| Some((r["id"].as_str()?, r)))
        .collect();
    let mut not_succeeded = Vec::new();
    let mut missing = 0;
    let mut last_finish: Option<DateTime<Utc>> = None;
    let mut durations = Vec::new();
    for id in &ids {
        let run = match by_id.get(id.as_str()) {
            Some(run) => (*run).clone(),
            // Beyond the listing's 1000: read it alone.
            None if runs > 1000 => wait_final(daemon, id).await,
            None => {
                missing += 1;
                continue;
            }
        };
        if run["state"] != "succeeded" {
            not_succeeded.push(format!("{}: {} {}", id, run["state"], run["error"]));
        }
        if let Some(finished) = parse_time(&run["finished_at"]) {
            last_finish = Some(last_finish.map_or(finished, |t| t.max(finished)));
        }
        if let Some(d) = run_duration(&run) {
            durations.push(d);
        }
    }
    for e in post_errors
        .iter()
        .take(3)
        .chain(not_succeeded.iter().take(3))
    {
        eprintln!("error: {e}");
    }
    let first_post: DateTime<Utc> = first_post.into();
    let wall = last_finish
        .map(|t| (t - first_post).num_microseconds().unwrap_or(0) as f64 / 1_000_000.0)
        .unwrap_or(f64::NAN);
    RunBurst {
        throughput: runs as f64 / wall,
        wall,
        all_accepted,
        post_latencies: sorted(post_latencies),
        peak_running,
        requests: mocks.iter().map(MockLlm::request_count).sum::<usize>() - before,
        daemon_cpu,
        own_cpu,
        post_errors,
        not_succeeded,
        missing,
        durations: sorted(durations),
    }
}
