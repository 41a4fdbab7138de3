//! A scripted mock of a model server for tests and benches: real HTTP/1.1
//! on 127.0.0.1 (tokio `TcpListener`, minimal parsing), one scripted
//! [`Reply`] per model request, every request recorded before it is
//! answered. It speaks the four wire formats at once, chosen by the route:
//! OpenAI `POST /v1/chat/completions` and `POST /v1/responses` (base URL
//! [`MockLlm::base_url`]),
//! Anthropic `POST /v1/messages` and Gemini
//! `POST /v1beta/models/{model}:streamGenerateContent` (base URL
//! [`MockLlm::root_url`]). Streams are sent chunked, each SSE event
//! split over two separate flushed writes, so client-side chunk splitting is
//! real. Every answer carries `Connection: close`.
//!
//! ```ignore
//! let mock = MockLlm::start().await;
//! mock.push(Reply::Text("hello".into()));
//! // point the provider at mock.base_url(), then:
//! let reqs = mock.wait_for_requests(1, Duration::from_secs(5)).await;
//! ```
#![allow(dead_code, reason = "shared by several test crates, each using a part")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};

mod anthropic;
mod faults;
mod gemini;
mod http;
pub mod responses;

#[allow(unused_imports, reason = "not every test crate uses each of them")]
pub use faults::{Fault, FaultPlan, Injected, RetryAfter};

use http::{read_request, write_raw, write_stream};

/// The wire format a request asked for, by its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    OpenAiResponses,
    Anthropic,
    Gemini,
}

impl Wire {
    /// The wire format of `route` (the path without the query), or `None`
    /// for a route that is not a model request.
    fn of_route(route: &str) -> Option<Wire> {
        if route == "/v1/chat/completions" {
            Some(Wire::OpenAi)
        } else if route == "/v1/responses" {
            Some(Wire::OpenAiResponses)
        } else if route == "/v1/messages" {
            Some(Wire::Anthropic)
        } else if route.starts_with("/v1beta/models/") && route.ends_with(":streamGenerateContent")
        {
            Some(Wire::Gemini)
        } else {
            None
        }
    }
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Content chunks of ~3 characters, finish_reason `stop`, a usage chunk
    /// (10 prompt / 5 completion tokens), `[DONE]`.
    Text(String),
    /// Per call (id, name, arguments JSON): id and name in a first chunk,
    /// the arguments in several pieces; calls one after another (index 0,
    /// 1, ..); finish_reason `tool_calls`, usage, `[DONE]`.
    ToolCalls(Vec<(String, String, String)>),
    /// Like `ToolCalls`, but the id and the name each come split over two
    /// chunks and the argument pieces of the calls are interleaved (some
    /// chunks carry pieces of several calls).
    ToolCallsInterleaved(Vec<(String, String, String)>),
    /// (reasoning, content): `reasoning_content` chunks, then content chunks.
    Reasoning(String, String),
    /// Raw chunk objects, each sent as `data: {json}`, then `[DONE]`.
    Chunks(Vec<Value>),
    /// Any non-streamed answer. `Content-Type` defaults to
    /// `application/json` when the body parses as JSON, else `text/plain`;
    /// a 200 with `Content-Type: text/event-stream` sends a hand-written
    /// SSE body.
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Closes the connection without answering.
    Drop,
    /// Reads the request and never answers; the socket is held until the
    /// client goes away.
    Hang,
    /// Waits, then answers.
    Delay(Duration, Box<Reply>),
}

impl Reply {
    /// An error status with an OpenAI-shaped body `{"error":{"message":..}}`.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::Raw {
            status,
            headers: vec![],
            body: json!({ "error": { "message": message, "type": "mock_error" } }).to_string(),
        }
    }

    /// A single tool call, streamed like [`Reply::ToolCalls`].
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Reply {
        Reply::ToolCalls(vec![(id.into(), name.into(), arguments.into())])
    }
}

/// One request the mock received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// The request target as sent, query included.
    pub path: String,
    /// Names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Null` when empty, a JSON string when not JSON.
    pub body: Value,
    /// When the whole request had arrived.
    pub received_at: std::time::Instant,
    /// The same moment by the wall clock (to compare with HTTP dates).
    pub received_at_wall: std::time::SystemTime,
}

static NO_MESSAGES: Vec<Value> = Vec::new();

impl Recorded {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `body["messages"]`, empty when absent.
    pub fn messages(&self) -> &Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .unwrap_or(&NO_MESSAGES)
    }

    /// The messages but the system prompt, as (role, text content).
    pub fn conversation(&self) -> Vec<(String, String)> {
        self.messages()
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| {
                (
                    m["role"].as_str().unwrap_or_default().to_string(),
                    m["content"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// Answers a request from its content (see [`MockLlm::set_responder`]).
pub type Responder = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

struct State {
    script: VecDeque<Reply>,
    fallback: Reply,
    requests: Vec<Recorded>,
    responder: Option<Responder>,
    faults: Option<FaultPlan>,
    /// Model requests (POSTs to a model route) so far.
    model_requests: usize,
    injected: Vec<Injected>,
}

struct Shared {
    addr: SocketAddr,
    state: Mutex<State>,
    /// Wakes async waiters on every recorded request.
    notify: Notify,
    /// Wakes blocking waiters on every recorded request.
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Stops the accept loop (and, for `start_in_thread`, the runtime) when the
/// last handle is dropped.
struct StopOnDrop(Option<oneshot::Sender<()>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// A handle on a running mock server; clones share it. The server stops
/// when the last clone is dropped.
#[derive(Clone)]
pub struct MockLlm {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm")
            .field("addr", &self.shared.addr)
            .finish()
    }
}

impl MockLlm {
    /// Starts the server on the current tokio runtime. It is served only
    /// while that runtime runs: a test that blocks its thread (say, waiting
    /// on a child process) needs [`MockLlm::start_in_thread`] instead.
    pub async fn start() -> MockLlm {
        let listener = bind_loopback();
        let (mock, stop_rx) = MockLlm::new(listener.local_addr().expect("mock LLM: local addr"));
        tokio::spawn(accept_loop(listener, mock.shared.clone(), stop_rx));
        mock
    }

    /// Starts the server on its own runtime in a background thread, for
    /// sync tests and benches. Callable from anywhere.
    pub fn start_in_thread() -> MockLlm {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mock-llm")
            .enable_all()
            .build()
            .expect("mock LLM: build runtime");
        // `enter`, not `block_on`: the caller may be inside a runtime.
        let listener = {
            let _context = runtime.enter();
            bind_loopback()
        };
        let addr = listener.local_addr().expect("mock LLM: local addr");
        let (mock, stop_rx) = MockLlm::new(addr);
        let shared = mock.shared.clone();
        std::thread::Builder::new()
            .name("mock-llm".into())
            .spawn(move || {
                runtime.block_on(accept_loop(listener, shared, stop_rx));
                // Dropping the runtime here ends the connection tasks.
            })
            .expect("mock LLM: spawn thread");
        mock
    }

    fn new(addr: SocketAddr) -> (MockLlm, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let shared = Arc::new(Shared {
            addr,
            state: Mutex::new(State {
                script: VecDeque::new(),
                fallback: Reply::error(500, "mock: no scripted reply left"),
                requests: Vec::new(),
                responder: None,
                faults: None,
                model_requests: 0,
                injected: Vec::new(),
            }),
            notify: Notify::new(),
            changed: Condvar::new(),
        });
        let mock = MockLlm {
            shared,
            _stop: Arc::new(StopOnDrop(Some(tx))),
        };
        (mock, rx)
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL of an OpenAI provider.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.shared.addr)
    }

    /// `http://127.0.0.1:PORT`: the base URL of an Anthropic or Gemini
    /// provider.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Adds a reply to the script; replies are used in push order, one per
    /// chat-completions request.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().script.push_back(reply);
    }

    /// The reply used once the script is empty (default: a 500 with
    /// "mock: no scripted reply left").
    pub fn set_fallback(&self, reply: Reply) {
        self.shared.lock().fallback = reply;
    }

    /// Answers with `responder(request)` once the script is empty, before
    /// the fallback: concurrent runs can each get the reply their own
    /// conversation calls for.
    pub fn set_responder(&self, responder: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) {
        self.shared.lock().responder = Some(Arc::new(responder));
    }

    /// Injects `plan`'s faults from the next model request on (numbered
    /// from 1 over all model requests the mock has received).
    pub fn set_faults(&self, plan: FaultPlan) {
        self.shared.lock().faults = Some(plan);
    }

    /// The faults injected so far, in order.
    pub fn injected(&self) -> Vec<Injected> {
        self.shared.lock().injected.clone()
    }

    /// Scripted replies not used yet.
    pub fn remaining(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// Drops the requests recorded so far (a long benchmark keeps its
    /// memory flat this way); `request_count` starts again from 0.
    pub fn forget_requests(&self) {
        self.shared.lock().requests.clear();
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Waits until at least `n` requests arrived and returns them all;
    /// panics with what did arrive when `timeout` passes first.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let requests = self.requests();
            if requests.len() >= n {
                return requests;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.timed_out(n, timeout);
            }
        }
    }

    /// [`MockLlm::wait_for_requests`] for sync code.
    pub fn wait_for_requests_blocking(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        while state.requests.len() < n {
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                self.timed_out(n, timeout);
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state.requests.clone()
    }

    fn timed_out(&self, n: usize, timeout: Duration) -> ! {
        let got: Vec<String> = self
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        panic!(
            "mock LLM at {}: expected at least {n} request(s) within {timeout:?}, got {}: {got:?}",
            self.base_url(),
            got.len()
        );
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    tokio::spawn(serve(socket, shared.clone()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Handles one connection: one request, one answer, close.
async fn serve(mut socket: TcpStream, shared: Arc<Shared>) {
    let _ = socket.set_nodelay(true);
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let route = request.path.split('?').next().unwrap_or("").to_string();
    let wire = Wire::of_route(&route);
    let is_chat = wire.is_some();
    let is_post = request.method == "POST";
    let model = match wire {
        Some(Wire::Gemini) => route
            .trim_start_matches("/v1beta/models/")
            .trim_end_matches(":streamGenerateContent")
            .to_string(),
        _ => request
            .body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("mock-model")
            .to_string(),
    };
    let (reply, fault) = {
        let mut state = shared.lock();
        let (mut reply, mut fault) = (None, None);
        if is_chat && is_post {
            state.model_requests += 1;
            let number = state.model_requests;
            let injected = state
                .faults
                .as_mut()
                .and_then(|plan| plan.fault_for(number));
            // The answer this request is due; a fault leaves it in the
            // script and only shows its first events, if any.
            let due = match (&injected, state.script.front()) {
                (Some(_), Some(front)) => front.clone(),
                (Some(_), None) => state
                    .responder
                    .as_ref()
                    .map_or_else(|| state.fallback.clone(), |respond| respond(&request)),
                (None, _) => match state.script.pop_front() {
                    Some(scripted) => scripted,
                    None => state
                        .responder
                        .as_ref()
                        .map_or_else(|| state.fallback.clone(), |respond| respond(&request)),
                },
            };
            if let Some(injected) = injected {
                let retry_after = match injected {
                    Fault::RateLimited(after) => Some(faults::retry_after_value(after)),
                    _ => None,
                };
                state.injected.push(Injected {
                    request: number,
                    fault: injected.clone(),
                    retry_after: retry_after.clone(),
                });
                fault = Some((injected, retry_after));
            }
            reply = Some(due);
        }
        state.requests.push(request);
        shared.changed.notify_all();
        shared.notify.notify_waiters();
        (reply, fault)
    };
    if let (Some((fault, retry_after)), Some(partial)) = (&fault, &reply) {
        let _ = faults::send_fault(
            &mut socket,
            fault,
            retry_after.as_deref(),
            partial,
            wire.unwrap_or(Wire::OpenAi),
            &model,
        )
        .await;
        return;
    }
    let reply = reply.unwrap_or_else(|| {
        let (status, message) = if is_chat {
            (405, "mock: use POST")
        } else {
            (404, "mock: not found")
        };
        Reply::error(status, message)
    });
    let _ = answer(&mut socket, reply, wire.unwrap_or(Wire::OpenAi), &model).await;
}

/// A listener on a free loopback port whose accept queue holds a burst of
/// a few thousand connections (std's default of 128 drops SYNs when a
/// benchmark opens 1000 at once, and each dropped one waits 1 s for the
/// retry). Needs a runtime context.
fn bind_loopback() -> TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().expect("mock LLM: socket");
    socket
        .bind(([127, 0, 0, 1], 0).into())
        .expect("mock LLM: bind 127.0.0.1:0");
    socket.listen(4096).expect("mock LLM: listen")
}

async fn answer(
    socket: &mut TcpStream,
    reply: Reply,
    wire: Wire,
    model: &str,
) -> std::io::Result<()> {
    let mut reply = reply;
    loop {
        match reply {
            Reply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                reply = *inner;
            }
            Reply::Drop => return Ok(()),
            Reply::Hang => {
                // Hold the socket until the client closes it.
                let mut sink = [0u8; 1024];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                return Ok(());
            }
            Reply::Raw {
                status,
                headers,
                body,
            } => return write_raw(socket, status, &headers, &body).await,
            other => {
                let frames = match wire {
                    Wire::OpenAi => stream_chunks(&other, model)
                        .iter()
                        .map(|data| format!("data: {data}\n\n"))
                        .collect(),
                    Wire::OpenAiResponses => responses::frames(&other, model),
                    Wire::Anthropic => anthropic::frames(&other, model),
                    Wire::Gemini => gemini::frames(&other, model),
                };
                return write_stream(socket, &frames).await;
            }
        }
    }
}

/// The SSE data payloads of a streamed reply, `[DONE]` included.
pub(super) fn stream_chunks(reply: &Reply, model: &str) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        })
    };
    let usage = json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [],
        "usage": { "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 },
    });
    let tool_piece = |index: usize, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut call = json!({ "index": index, "function": { "arguments": args } });
        if let Some(id) = id {
            call["id"] = json!(id);
            call["type"] = json!("function");
        }
        if let Some(name) = name {
            call["function"]["name"] = json!(name);
        }
        call
    };
    let mut out: Vec<Value> = Vec::new();
    let finish = match reply {
        Reply::Text(text) => {
            out.push(chunk(
                json!({ "role": "assistant", "content": "" }),
                Value::Null,
            ));
            for piece in pieces(text, 3) {
                out.push(chunk(json!({ "content": piece }), Value::Null));
            }
            "stop"
        }
        Reply::Reasoning(reasoning, text) => {
            out.push(chunk(
                json!({ "role": "assistant", "content": "" }),
                Value::Null,
            ));
            for piece in pieces(reasoning, 3) {
                out.push(chunk(json!({ "reasoning_content": piece }), Value::Null));
            }
            for piece in pieces(text, 3) {
                out.push(chunk(json!({ "content": piece }), Value::Null));
            }
            "stop"
        }
        Reply::ToolCalls(calls) => {
            out.push(chunk(
                json!({ "role": "assistant", "content": null }),
                Value::Null,
            ));
            for (i, (id, name, args)) in calls.iter().enumerate() {
                out.push(chunk(json!({ "tool_calls": [tool_piece(i, Some(id.as_str()), Some(name.as_str()), "")] }), Value::Null));
                for piece in pieces(args, 4) {
                    out.push(chunk(
                        json!({ "tool_calls": [tool_piece(i, None, None, &piece)] }),
                        Value::Null,
                    ));
                }
            }
            "tool_calls"
        }
        Reply::ToolCallsInterleaved(calls) => {
            out.push(chunk(
                json!({ "role": "assistant", "content": null }),
                Value::Null,
            ));
            let halves = |s: &str| {
                let mid = s
                    .char_indices()
                    .nth(s.chars().count() / 2)
                    .map_or(s.len(), |(i, _)| i);
                (s[..mid].to_string(), s[mid..].to_string())
            };
            for (i, (id, name, _)) in calls.iter().enumerate() {
                let (id_a, id_b) = halves(id);
                let (name_a, name_b) = halves(name);
                out.push(chunk(
                    json!({ "tool_calls": [tool_piece(i, Some(&id_a), Some(&name_a), "")] }),
                    Value::Null,
                ));
                let rest = tool_piece(
                    i,
                    Some(id_b.as_str()).filter(|s| !s.is_empty()),
                    Some(&name_b),
                    "",
                );
                out.push(chunk(json!({ "tool_calls": [rest] }), Value::Null));
            }
            let split: Vec<Vec<String>> = calls.iter().map(|(_, _, a)| pieces(a, 3)).collect();
            let rounds = split.iter().map(Vec::len).max().unwrap_or(0);
            for round in 0..rounds {
                let here: Vec<Value> = split
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.get(round).map(|piece| tool_piece(i, None, None, piece)))
                    .collect();
                if round % 2 == 1 {
                    // Pieces of several calls in one chunk.
                    out.push(chunk(json!({ "tool_calls": here }), Value::Null));
                } else {
                    // One chunk per call, last index first.
                    for piece in here.into_iter().rev() {
                        out.push(chunk(json!({ "tool_calls": [piece] }), Value::Null));
                    }
                }
            }
            "tool_calls"
        }
        Reply::Chunks(chunks) => {
            let mut events: Vec<String> = chunks.iter().map(Value::to_string).collect();
            events.push("[DONE]".into());
            return events;
        }
        Reply::Raw { .. } | Reply::Drop | Reply::Hang | Reply::Delay(..) => {
            unreachable!("not a stream")
        }
    };
    out.push(chunk(json!({}), json!(finish)));
    out.push(usage);
    let mut events: Vec<String> = out.iter().map(Value::to_string).collect();
    events.push("[DONE]".into());
    events
}

/// `text` cut into pieces of `size` characters (one empty piece for "").
pub(super) fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}
