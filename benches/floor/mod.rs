//! The floor of a 3-tool-round run (`mod floor;` in the benches that
//! compare with it; a folder, so cargo does not take it for a benchmark of
//! its own): the same work with nothing of aurad's, from a client already
//! running: four streamed chat completions (std `TcpStream`, HTTP/1.1, read
//! to the end of the stream) with a `bash -c 'echo hi'` process after each
//! of the first three. The mock decides what it answers; the bodies carry
//! 0, 1, 2 and 3 tool results, as the engine's do.
#![allow(dead_code, reason = "shared by several benches, each using a part")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The messages of a conversation after `rounds` tool rounds.
pub fn conversation(rounds: usize) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Say hi three times."}),
    ];
    for k in 0..rounds {
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{k}"), "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":\"echo hi\"}"}
            }]}),
        );
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{k}"), "content": "hi\n"}));
    }
    json!({
        "model": "m",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    })
}

/// How many tool results a chat request carries: what the mock's
/// responder answers by (a tool call below 3, the text at 3).
pub fn tool_results(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
        .unwrap_or(0)
}

/// One streamed completion on a new connection (`Connection: close`), read
/// to its end; panics unless it is a 200 with `[DONE]`.
pub fn completion(mock: SocketAddr, body: &[u8]) {
    let mut stream = TcpStream::connect(mock).expect("connect to the mock");
    stream.set_nodelay(true).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {mock}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains("[DONE]"),
        "the floor's completion failed: {text}"
    );
}

/// `bash -c 'echo hi'`, its output read; panics unless it prints `hi`.
pub fn bash_echo() {
    let out = Command::new("bash")
        .args(["-c", "echo hi"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn bash");
    assert_eq!(out.stdout, b"hi\n");
}

/// The bodies of the four requests, encoded once (a client knows them).
pub fn bodies() -> Vec<Vec<u8>> {
    (0..4)
        .map(|k| serde_json::to_vec(&conversation(k)).unwrap())
        .collect()
}

/// One floor: the four completions and three processes, timed.
pub fn once(mock: SocketAddr, bodies: &[Vec<u8>]) -> Duration {
    let start = Instant::now();
    for (k, body) in bodies.iter().enumerate() {
        completion(mock, body);
        if k < 3 {
            bash_echo();
        }
    }
    start.elapsed()
}
