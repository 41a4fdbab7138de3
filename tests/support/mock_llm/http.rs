//! The mock's minimal HTTP/1.1: reading one request (head up to
//! `\r\n\r\n`, a `Content-Length` or chunked body) and writing one answer
//! with `Connection: close`, streams chunked with every SSE event split over
//! two flushed writes.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Recorded;

/// The largest request head or body the mock accepts.
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// Reads the head up to `\r\n\r\n` and a `Content-Length` or chunked body.
/// `None` when the client went away or sent garbage.
pub(super) async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::with_capacity(8192);
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_REQUEST_BYTES || read_more(socket, &mut buf).await? == 0 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut rest = buf.split_off(head_end + 4);
    let mut lines = head.split("\r\n");
    let mut start = lines.next()?.split_whitespace();
    let method = start.next()?.to_string();
    let path = start.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let chunked =
        header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        read_chunked(socket, rest).await?
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > MAX_REQUEST_BYTES {
            return None;
        }
        while rest.len() < len {
            if read_more(socket, &mut rest).await? == 0 {
                return None;
            }
        }
        rest.truncate(len);
        rest
    };
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    Some(Recorded {
        method,
        path,
        headers,
        body,
        received_at: std::time::Instant::now(),
        received_at_wall: std::time::SystemTime::now(),
    })
}

/// Decodes a chunked request body whose first bytes are in `buf`.
async fn read_chunked(socket: &mut TcpStream, mut buf: Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = find(&buf, b"\r\n") {
                break i;
            }
            if read_more(socket, &mut buf).await? == 0 {
                return None;
            }
        };
        let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        if body.len() + size > MAX_REQUEST_BYTES {
            return None;
        }
        let need = line_end + 2 + size + 2;
        while buf.len() < need {
            if read_more(socket, &mut buf).await? == 0 {
                return None;
            }
        }
        body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
        buf.drain(..need);
    }
}

/// Reads some bytes onto `buf`; `Some(0)` at end of stream, `None` on error.
async fn read_more(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 8192];
    let n = socket.read(&mut chunk).await.ok()?;
    buf.extend_from_slice(&chunk[..n]);
    Some(n)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(super) async fn write_raw(
    socket: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("content-type") {
        let json = serde_json::from_str::<Value>(body).is_ok();
        let kind = if json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        head.push_str(&format!("Content-Type: {kind}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.flush().await?;
    socket.shutdown().await
}

/// Sends `events` (whole SSE frames, `data: ...\n\n` or with an `event:`
/// line) chunked, each split over two writes.
pub(super) async fn write_stream(socket: &mut TcpStream, events: &[String]) -> std::io::Result<()> {
    write_stream_head(socket).await?;
    write_stream_events(socket, events).await?;
    end_stream(socket).await
}

/// The head of a 200 chunked event stream.
pub(super) async fn write_stream_head(socket: &mut TcpStream) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await
}

/// SSE frames as body chunks, each split over two flushed writes.
pub(super) async fn write_stream_events(
    socket: &mut TcpStream,
    events: &[String],
) -> std::io::Result<()> {
    for event in events {
        let mid = (1..event.len() / 2)
            .rev()
            .find(|&i| event.is_char_boundary(i))
            .unwrap_or(0);
        for part in [&event[..mid], &event[mid..]] {
            if part.is_empty() {
                continue;
            }
            socket
                .write_all(format!("{:x}\r\n{part}\r\n", part.len()).as_bytes())
                .await?;
            socket.flush().await?;
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

/// The last chunk of a chunked body, then the write side is closed.
pub(super) async fn end_stream(socket: &mut TcpStream) -> std::io::Result<()> {
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await?;
    socket.shutdown().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}
