//! OpenTelemetry traces end to end: a real OTLP/HTTP receiver on 127.0.0.1
//! (`POST /v1/traces`, protobuf decoded with `opentelemetry-proto`), the
//! real `aurad` binary (`run` and `serve`) against the mock model. Asserts
//! one trace per run, the `invoke_agent` / `chat` / `execute_tool` spans
//! with their GenAI attributes and parent links, error statuses, a sub-run
//! in its parent's trace, that nothing is sent without an endpoint, that
//! header values stay secret, and a located config error.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, status::StatusCode};
use prost::Message as _;

use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;
use support::serve::{Serve, aurad, poll, show, wait_state, write_settings};

/// One export request the receiver got.
#[derive(Debug, Clone)]
struct Export {
    path: String,
    headers: HashMap<String, String>,
    request: ExportTraceServiceRequest,
}

/// An OTLP/HTTP trace receiver on a loopback port, answering 200 to each
/// `POST`, one request per connection.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Export>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Export>>> = Arc::default();
        let sink = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let sink = sink.clone();
                std::thread::spawn(move || serve_one(stream, &sink));
            }
        });
        Receiver { addr, got }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn exports(&self) -> Vec<Export> {
        self.got.lock().unwrap().clone()
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for export in self.exports() {
            for rs in export.request.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| attr(&r.attributes, "service.name"))
                    .and_then(as_str)
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for span in ss.spans {
                        out.push((service.clone(), span));
                    }
                }
            }
        }
        out
    }

    /// Polls until `n` spans arrived (or more); panics at the deadline.
    fn wait_spans(&self, n: usize) -> Vec<Span> {
        poll(
            &format!("{n} spans at the OTLP receiver"),
            || format!("{:#?}", self.spans()),
            || {
                let spans = self.spans();
                (spans.len() >= n).then(|| spans.into_iter().map(|(_, s)| s).collect())
            },
        )
    }
}

fn serve_one(stream: std::net::TcpStream, sink: &Mutex<Vec<Export>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .expect("the exporter sends a Content-Length");
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let request =
        ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf body");
    sink.lock().unwrap().push(Export {
        path,
        headers,
        request,
    });
    let mut stream = stream;
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
}

fn as_str(v: &AnyValue) -> Option<String> {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

/// A span's string attribute.
fn s(span: &Span, key: &str) -> String {
    attr(&span.attributes, key)
        .and_then(as_str)
        .unwrap_or_else(|| panic!("span {:?} has no string {key}: {span:#?}", span.name))
}

/// A span's integer attribute.
fn i(span: &Span, key: &str) -> i64 {
    match attr(&span.attributes, key).and_then(|v| v.value.clone()) {
        Some(any_value::Value::IntValue(n)) => n,
        other => panic!("span {:?}: {key} is {other:?}", span.name),
    }
}

/// A span's floating-point attribute.
fn f(span: &Span, key: &str) -> f64 {
    match attr(&span.attributes, key).and_then(|v| v.value.clone()) {
        Some(any_value::Value::DoubleValue(n)) => n,
        other => panic!("span {:?}: {key} is {other:?}", span.name),
    }
}

/// A span's string-array attribute.
fn list(span: &Span, key: &str) -> Vec<String> {
    match attr(&span.attributes, key).and_then(|v| v.value.clone()) {
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().filter_map(as_str).collect(),
        other => panic!("span {:?}: {key} is {other:?}", span.name),
    }
}

fn status(span: &Span) -> StatusCode {
    StatusCode::try_from(span.status.as_ref().map_or(0, |s| s.code)).unwrap()
}

fn by_op<'a>(spans: &'a [Span], op: &str) -> Vec<&'a Span> {
    let mut found: Vec<&Span> = spans
        .iter()
        .filter(|sp| {
            attr(&sp.attributes, "gen_ai.operation.name").and_then(as_str) == Some(op.into())
        })
        .collect();
    found.sort_by_key(|sp| sp.start_time_unix_nano);
    found
}

/// `aurad run a --input INPUT` in `root`, with no OTEL variable from the
/// test's environment, plus `env`.
fn aurad_run(root: &Path, input: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("aurad"));
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") {
            cmd.env_remove(name);
        }
    }
    cmd.arg("--dir")
        .arg(root)
        .args(["run", "a", "--input", input])
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn append(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    let mut all = std::fs::read_to_string(&path).unwrap_or_default();
    all.push_str(text);
    std::fs::write(path, all).unwrap();
}

#[test]
fn aurad_run_exports_one_trace_with_run_chat_and_tool_spans() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::tool_call(
        "call_1",
        "calculator",
        r#"{"expression":"6*7"}"#,
    ));
    mock.push(Reply::Text("The answer is 42.".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [calculator]\ntemperature: 0.3\n",
    );
    append(
        dir.path(),
        "aurad.yaml",
        &format!(
            "otel:\n  endpoint: \"{}\"\n  headers: {{ x-api-key: \"hdr-secret-value-7\" }}\n  service_name: nightly\n",
            receiver.endpoint()
        ),
    );
    let out = aurad_run(dir.path(), "what is 6*7?", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        !show(&out).contains("hdr-secret-value-7"),
        "a header value was printed: {}",
        show(&out)
    );
    // `aurad run` flushes before it exits: everything is there already.
    let spans = receiver.wait_spans(4);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let exports = receiver.exports();
    for export in &exports {
        assert_eq!(export.path, "/v1/traces");
        assert_eq!(
            export.headers.get("content-type").map(String::as_str),
            Some("application/x-protobuf")
        );
        assert_eq!(
            export.headers.get("x-api-key").map(String::as_str),
            Some("hdr-secret-value-7")
        );
    }
    assert!(
        receiver
            .spans()
            .iter()
            .all(|(service, _)| service == "nightly")
    );

    // One trace.
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|sp| &sp.trace_id == trace), "{spans:#?}");

    let runs = by_op(&spans, "invoke_agent");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let run = runs[0];
    assert_eq!(run.name, "invoke_agent a");
    assert!(run.parent_span_id.is_empty(), "the run span is the root");
    assert_eq!(s(run, "gen_ai.agent.name"), "a");
    assert_eq!(s(run, "aurad.run.trigger"), "cli");
    assert_eq!(s(run, "aurad.run.state"), "succeeded");
    assert_eq!(s(run, "gen_ai.request.model"), "m");
    // The provider is named `mock` in aurad.yaml but speaks OpenAI's wire
    // format: the well-known name is that format's.
    assert_eq!(s(run, "gen_ai.provider.name"), "openai");
    assert_eq!(i(run, "gen_ai.usage.input_tokens"), 20);
    assert_eq!(i(run, "gen_ai.usage.output_tokens"), 10);
    let run_id = s(run, "aurad.run.id");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&run_id),
        "the run span names the run: {run_id}\n{}",
        show(&out)
    );
    assert_ne!(status(run), StatusCode::Error);

    let chats = by_op(&spans, "chat");
    assert_eq!(chats.len(), 2, "one chat span per model call: {spans:#?}");
    for (chat, reason) in chats.iter().zip(["tool_calls", "stop"]) {
        assert_eq!(chat.name, "chat m");
        assert_eq!(chat.parent_span_id, run.span_id);
        assert_eq!(s(chat, "gen_ai.request.model"), "m");
        assert_eq!(s(chat, "gen_ai.provider.name"), "openai");
        assert_eq!(s(chat, "gen_ai.response.model"), "m");
        assert_eq!(s(chat, "gen_ai.response.id"), "chatcmpl-mock");
        assert_eq!(s(chat, "server.address"), "127.0.0.1");
        let port: i64 = mock
            .base_url()
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches("/v1")
            .parse()
            .unwrap();
        assert_eq!(i(chat, "server.port"), port);
        // As written: not 0.30000001192092896, the f32 widened.
        assert_eq!(f(chat, "gen_ai.request.temperature"), 0.3);
        assert_eq!(i(chat, "gen_ai.usage.input_tokens"), 10);
        assert_eq!(i(chat, "gen_ai.usage.output_tokens"), 5);
        assert_eq!(list(chat, "gen_ai.response.finish_reasons"), [reason]);
        assert_ne!(status(chat), StatusCode::Error);
    }

    let tools = by_op(&spans, "execute_tool");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let tool = tools[0];
    assert_eq!(tool.name, "execute_tool calculator");
    assert_eq!(tool.parent_span_id, run.span_id);
    assert_eq!(s(tool, "gen_ai.tool.name"), "calculator");
    assert_eq!(s(tool, "gen_ai.tool.call.id"), "call_1");
    assert_ne!(status(tool), StatusCode::Error);
    // In order: the first model call, the tool, the second model call,
    // all within the run.
    assert!(chats[0].end_time_unix_nano <= tool.start_time_unix_nano);
    assert!(tool.end_time_unix_nano <= chats[1].start_time_unix_nano);
    assert!(run.start_time_unix_nano <= chats[0].start_time_unix_nano);
    assert!(chats[1].end_time_unix_nano <= run.end_time_unix_nano);
}

#[test]
fn a_failing_run_sets_error_statuses_with_the_standard_variables() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::error(400, "model `m` does not exist"));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let endpoint = receiver.endpoint();
    let out = aurad_run(
        dir.path(),
        "hi",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "from-env"),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let spans = receiver.wait_spans(2);
    assert_eq!(spans.len(), 2, "{spans:#?}");
    assert!(
        receiver
            .spans()
            .iter()
            .all(|(service, _)| service == "from-env")
    );
    let run = by_op(&spans, "invoke_agent")[0];
    let chat = by_op(&spans, "chat")[0];
    assert_eq!(chat.parent_span_id, run.span_id);
    assert_eq!(status(chat), StatusCode::Error);
    assert_eq!(s(chat, "error.type"), "400");
    let message = &chat.status.as_ref().unwrap().message;
    assert!(message.contains("does not exist"), "{message}");
    assert_eq!(status(run), StatusCode::Error);
    assert_eq!(s(run, "aurad.run.state"), "failed");
    assert_eq!(s(run, "error.type"), "failed");
}

#[test]
fn without_an_endpoint_nothing_is_sent() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::tool_call(
        "call_1",
        "calculator",
        r#"{"expression":"1+1"}"#,
    ));
    mock.push(Reply::Text("2".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [calculator]\n");
    // The receiver's address is known but configured nowhere; a disabled
    // SDK sends nothing even with an endpoint.
    let out = aurad_run(dir.path(), "1+1?", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    mock.push(Reply::Text("3".into()));
    let endpoint = receiver.endpoint();
    let out = aurad_run(
        dir.path(),
        "1+2?",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // Each process had exited, and an exporting one flushes before it
    // exits: anything sent would be here.
    assert!(receiver.exports().is_empty(), "{:#?}", receiver.exports());
}

#[test]
fn an_invalid_otel_setting_is_a_located_error() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    append(
        dir.path(),
        "aurad.yaml",
        "otel:\n  endpoint: localhost:4318\n  headers: { authorization: \"Bearer a\\nb-secret\" }\n",
    );
    let out = aurad_run(dir.path(), "hi", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("aurad.yaml:4:13: otel.endpoint \"localhost:4318\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("aurad.yaml:5:30: otel.headers.authorization"),
        "{stderr}"
    );
    assert!(!stderr.contains("b-secret"), "{stderr}");
    assert_eq!(mock.request_count(), 0);
}

#[test]
fn serve_exports_runs_and_puts_a_sub_run_under_its_tool_call() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    // Parent: calls agent b; b answers; the parent answers.
    mock.push(Reply::tool_call(
        "call_b",
        "agent_b",
        r#"{"input":"say hi"}"#,
    ));
    mock.push(Reply::Text("hi from b".into()));
    mock.push(Reply::Text("b said hi".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\nagents: [b]\n");
    std::fs::write(
        dir.path().join("agents/b.yaml"),
        "model: mock/m2\nsystem: s\n",
    )
    .unwrap();
    let addr = write_settings(dir.path(), &mock);
    append(
        dir.path(),
        "aurad.yaml",
        &format!("otel: {{ endpoint: \"{}/\" }}\n", receiver.endpoint()),
    );
    let mut serve = Serve::start(dir.path(), addr, &[]);
    let out = aurad(dir.path())
        .args(["trigger", "a", "--input", "go"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let id = stdout
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("{}", show(&out)))
        .to_string();
    wait_state(&serve, &id, "succeeded");
    // Batched: the last spans go at shutdown.
    serve.signal(libc::SIGTERM);
    let exit = serve.wait_exit();
    assert_eq!(exit.code(), Some(0), "{}", serve.log());
    let spans = receiver.wait_spans(6);
    assert_eq!(spans.len(), 6, "{spans:#?}");
    let trace = &spans[0].trace_id;
    assert!(
        spans.iter().all(|sp| &sp.trace_id == trace),
        "the sub-run is in its parent's trace: {spans:#?}"
    );
    let runs = by_op(&spans, "invoke_agent");
    assert_eq!(runs.len(), 2, "{spans:#?}");
    let (parent, child) = (runs[0], runs[1]);
    assert_eq!(s(parent, "gen_ai.agent.name"), "a");
    assert_eq!(s(parent, "aurad.run.id"), id);
    assert_eq!(s(parent, "aurad.run.trigger"), "api");
    assert_eq!(s(child, "gen_ai.agent.name"), "b");
    assert_eq!(s(child, "aurad.run.parent_id"), id);
    let tool = by_op(&spans, "execute_tool")[0];
    assert_eq!(s(tool, "gen_ai.tool.name"), "agent_b");
    assert_eq!(tool.parent_span_id, parent.span_id);
    assert_eq!(child.parent_span_id, tool.span_id, "{spans:#?}");
    let chats = by_op(&spans, "chat");
    assert_eq!(chats.len(), 3);
    let models: Vec<(String, bool)> = chats
        .iter()
        .map(|c| {
            (
                s(c, "gen_ai.request.model"),
                c.parent_span_id == child.span_id,
            )
        })
        .collect();
    assert_eq!(
        models,
        [
            ("m".into(), false),
            ("m2".into(), true),
            ("m".into(), false)
        ]
    );
}

#[test]
fn a_pipeline_step_run_sits_under_its_step_in_the_pipeline_trace() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("summary".into()));
    let dir = project_with_mock(
        &mock,
        "steps:\n  - id: first\n    template: \"topic: {{ input }}\"\n  - id: sum\n    agent: b\n    input: \"{{ steps.first.output }}\"\n",
    );
    std::fs::write(
        dir.path().join("agents/b.yaml"),
        "model: mock/m\nsystem: s\n",
    )
    .unwrap();
    append(
        dir.path(),
        "aurad.yaml",
        &format!("otel: {{ endpoint: \"{}\" }}\n", receiver.endpoint()),
    );
    let out = aurad_run(dir.path(), "cats", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let spans = receiver.wait_spans(5);
    assert_eq!(spans.len(), 5, "{spans:#?}");
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|sp| &sp.trace_id == trace), "{spans:#?}");
    let runs = by_op(&spans, "invoke_agent");
    assert_eq!(runs.len(), 2, "{spans:#?}");
    let (pipeline, child) = (runs[0], runs[1]);
    assert_eq!(s(pipeline, "gen_ai.agent.name"), "a");
    assert_eq!(s(pipeline, "aurad.run.model"), "pipeline");
    assert_eq!(s(pipeline, "aurad.run.state"), "succeeded");
    let mut steps: Vec<&Span> = spans
        .iter()
        .filter(|sp| sp.name.starts_with("step "))
        .collect();
    steps.sort_by_key(|sp| sp.start_time_unix_nano);
    let names: Vec<&str> = steps.iter().map(|sp| sp.name.as_str()).collect();
    assert_eq!(names, ["step first", "step sum"]);
    assert!(steps.iter().all(|sp| sp.parent_span_id == pipeline.span_id));
    assert_eq!(s(steps[1], "aurad.step.state"), "succeeded");
    assert_eq!(s(child, "gen_ai.agent.name"), "b");
    assert_eq!(child.parent_span_id, steps[1].span_id, "{spans:#?}");
    assert_eq!(s(steps[1], "aurad.step.run_id"), s(child, "aurad.run.id"));
    let chat = by_op(&spans, "chat")[0];
    assert_eq!(chat.parent_span_id, child.span_id);
}

#[test]
fn a_failing_tool_call_has_the_error_status() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::tool_call(
        "call_x",
        "calculator",
        r#"{"expression":"1/"}"#,
    ));
    mock.push(Reply::Text("could not compute".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [calculator]\n");
    let endpoint = format!("{}/v1/traces", receiver.endpoint());
    let out = aurad_run(
        dir.path(),
        "1/?",
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let spans = receiver.wait_spans(4);
    let tool = by_op(&spans, "execute_tool")[0];
    assert_eq!(s(tool, "gen_ai.tool.call.id"), "call_x");
    assert_eq!(status(tool), StatusCode::Error, "{tool:#?}");
    assert_eq!(s(tool, "error.type"), "tool_error");
    // The run itself answered: not an error.
    assert_ne!(status(by_op(&spans, "invoke_agent")[0]), StatusCode::Error);
}

#[test]
fn a_fallback_is_an_event_on_the_run_span_between_two_chat_spans() {
    let receiver = Receiver::start();
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::error(
        400,
        "This model's maximum context length is 8192 tokens",
    ));
    mock.push(Reply::Text("shorter".into()));
    let dir = project_with_mock(
        &mock,
        "model:\n  chain: [mock/m, mock/m2]\n  attempts: 1\nsystem: s\n",
    );
    let endpoint = receiver.endpoint();
    let out = aurad_run(
        dir.path(),
        "a long input",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let spans = receiver.wait_spans(3);
    let run = by_op(&spans, "invoke_agent")[0];
    assert_eq!(s(run, "gen_ai.provider.name"), "openai");
    let fallback = run
        .events
        .iter()
        .find(|e| e.name == "aurad.model.fallback")
        .unwrap_or_else(|| panic!("no fallback event: {run:#?}"));
    let value = |key: &str| attr(&fallback.attributes, key).and_then(as_str);
    assert_eq!(value("aurad.fallback.from").as_deref(), Some("mock/m"));
    assert_eq!(value("aurad.fallback.to").as_deref(), Some("mock/m2"));
    assert_eq!(
        value("aurad.fallback.reason").as_deref(),
        Some("context_length")
    );
    let chats = by_op(&spans, "chat");
    let models: Vec<String> = chats.iter().map(|c| s(c, "gen_ai.request.model")).collect();
    assert_eq!(models, ["m", "m2"]);
    assert_eq!(status(chats[0]), StatusCode::Error);
    assert_eq!(s(chats[1], "gen_ai.response.model"), "m2");
}
