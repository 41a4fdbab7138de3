//! An OpenAI-compatible chat-completions server on 127.0.0.1 that enforces
//! a provider's limits as a provider would: at most `concurrent` requests
//! at once and at most `per_minute` requests in any 60 s (a sliding,
//! half-open window), answering 429 with `Retry-After` beyond them, and,
//! during a storm, 429 with `Retry-After: 2` to everything. It records
//! what it saw: every arrival's time, the peak of requests at once, the
//! 429s and why. Each accepted request is answered after `latency`, as a
//! short SSE stream with usage.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The provider's window for `per_minute`.
pub const MINUTE: Duration = Duration::from_secs(60);

/// The `Retry-After` of a storm's 429s, in seconds.
pub const STORM_RETRY_AFTER: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Concurrency,
    Rate,
    Storm,
}

/// What the server saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// When each request arrived (its body read), in order.
    pub arrivals: Vec<Instant>,
    /// When each accepted request arrived.
    pub accepted: Vec<Instant>,
    /// Each 429: when it was sent and why.
    pub refused: Vec<(Instant, Refusal)>,
    /// The most requests it was answering at once.
    pub peak: usize,
    /// Accepted requests answered whole.
    pub served: usize,
}

impl Seen {
    /// The most arrivals in any 60 s window `[t, t + 60 s)`.
    pub fn max_per_minute(&self) -> usize {
        let mut most = 0;
        let mut first = 0;
        for (last, t) in self.arrivals.iter().enumerate() {
            while *t - self.arrivals[first] >= MINUTE {
                first += 1;
            }
            most = most.max(last + 1 - first);
        }
        most
    }

    /// Accepted requests per minute from the first to the last.
    pub fn per_minute(&self) -> f64 {
        match (self.accepted.first(), self.accepted.last()) {
            (Some(first), Some(last)) if self.accepted.len() > 1 => {
                (self.accepted.len() - 1) as f64 * 60.0 / (*last - *first).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    pub fn refused_for(&self, why: Refusal) -> usize {
        self.refused.iter().filter(|(_, w)| *w == why).count()
    }
}

struct State {
    concurrent: usize,
    per_minute: usize,
    latency: Duration,
    /// The storm: from the arrival after `after` accepted requests, for
    /// `length`; its start once it began.
    storm: Option<(usize, Duration)>,
    storm_began: Option<Instant>,
    active: usize,
    /// The accepted arrivals of the last 60 s, for the rate.
    window: VecDeque<Instant>,
    seen: Seen,
}

#[derive(Clone)]
pub struct CappedLlm {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl CappedLlm {
    /// Starts the server on a thread of its own with the caps, answering
    /// each accepted request after `latency`.
    pub fn start(concurrent: usize, per_minute: usize, latency: Duration) -> CappedLlm {
        let state = Arc::new(Mutex::new(State {
            concurrent,
            per_minute,
            latency,
            storm: None,
            storm_began: None,
            active: 0,
            window: VecDeque::new(),
            seen: Seen::default(),
        }));
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(serve(socket, shared.clone()));
                }
            });
        });
        CappedLlm {
            addr: rx.recv().unwrap(),
            state,
        }
    }

    /// A storm of 429s for `length`, beginning once `after` requests were
    /// accepted.
    pub fn storm(&self, after: usize, length: Duration) {
        self.state.lock().unwrap().storm = Some((after, length));
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn seen(&self) -> Seen {
        self.state.lock().unwrap().seen.clone()
    }
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<State>>) {
    let Some((path, body)) = read_request(&mut socket).await else {
        return;
    };
    if path != "/v1/chat/completions" {
        let _ = socket
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return;
    }
    let model = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["model"].as_str().map(str::to_string))
        .unwrap_or_default();
    let (verdict, latency) = {
        let mut s = state.lock().unwrap();
        let now = Instant::now();
        s.seen.arrivals.push(now);
        while s.window.front().is_some_and(|t| now - *t >= MINUTE) {
            s.window.pop_front();
        }
        if let Some((after, _)) = s.storm
            && s.storm_began.is_none()
            && s.seen.accepted.len() >= after
        {
            s.storm_began = Some(now);
        }
        let storming = match (s.storm, s.storm_began) {
            (Some((_, length)), Some(began)) => now - began < length,
            _ => false,
        };
        let verdict = if storming {
            Err(Refusal::Storm)
        } else if s.active >= s.concurrent {
            Err(Refusal::Concurrency)
        } else if s.window.len() >= s.per_minute {
            Err(Refusal::Rate)
        } else {
            s.active += 1;
            s.seen.peak = s.seen.peak.max(s.active);
            s.window.push_back(now);
            s.seen.accepted.push(now);
            Ok(())
        };
        if let Err(why) = verdict {
            s.seen.refused.push((now, why));
        }
        (verdict, s.latency)
    };
    match verdict {
        Err(why) => {
            let retry_after = if why == Refusal::Storm {
                STORM_RETRY_AFTER
            } else {
                1
            };
            let body = format!(r#"{{"error":{{"message":"rate limited ({why:?})"}}}}"#);
            let head = format!(
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {retry_after}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all((head + &body).as_bytes()).await;
        }
        Ok(()) => {
            tokio::time::sleep(latency).await;
            // No longer counted before the answer goes: the caller cannot
            // send its next request before it has this one's end.
            {
                let mut s = state.lock().unwrap();
                s.active -= 1;
                s.seen.served += 1;
            }
            let body = answer(&model);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all((head + &body).as_bytes()).await;
        }
    }
    let _ = socket.shutdown().await;
}

/// The SSE stream of a short answer with usage.
fn answer(model: &str) -> String {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        serde_json::json!({
            "id": "chatcmpl-capped", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        })
    };
    let events = [
        chunk(
            serde_json::json!({ "role": "assistant", "content": "done" }),
            serde_json::Value::Null,
        ),
        chunk(serde_json::json!({}), serde_json::json!("stop")),
        serde_json::json!({
            "id": "chatcmpl-capped", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [],
            "usage": { "prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11 },
        }),
    ];
    let mut out: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

/// The path and body of one HTTP/1.1 request.
async fn read_request(socket: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let path = head.split_whitespace().nth(1)?.to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((path, buf[head_end..head_end + length].to_vec()))
}
