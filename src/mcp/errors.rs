//! Turning rmcp's error types into short reasons a user (or the model) can
//! act on, and recognising an expired HTTP session.

use std::error::Error;

use rmcp::ServiceError;
use rmcp::model::ErrorData;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

type HttpError = StreamableHttpError<reqwest::Error>;

/// Why connecting failed. `url` is empty for stdio servers.
pub(crate) fn describe_init_error(e: &ClientInitializeError, url: &str) -> String {
    match e {
        ClientInitializeError::TransportError { error, .. } => {
            match error.error.downcast_ref::<HttpError>() {
                Some(http) => describe_http(http, url),
                None => chain(error.error.as_ref()),
            }
        }
        ClientInitializeError::ConnectionClosed(_) if url.is_empty() => {
            "the server closed its stdout before answering `initialize`".into()
        }
        ClientInitializeError::ConnectionClosed(_) => {
            format!("{url} closed the connection before answering `initialize`")
        }
        ClientInitializeError::JsonRpcError(data) => {
            format!(
                "the server refused `initialize`: {}",
                describe_error_data(data)
            )
        }
        other => chain(other),
    }
}

/// Why a request on a live session failed.
pub(crate) fn describe_service_error(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(data) => describe_error_data(data),
        ServiceError::TransportSend(error) => match error.error.downcast_ref::<HttpError>() {
            Some(http) => describe_http(http, ""),
            None => chain(error.error.as_ref()),
        },
        ServiceError::TransportClosed => "the connection to the server is closed".into(),
        other => chain(other),
    }
}

/// `message (code -32602)`, with the error's data when it is short.
pub(crate) fn describe_error_data(data: &ErrorData) -> String {
    let mut text = format!("{} (code {})", data.message, data.code.0);
    if let Some(extra) = &data.data {
        let extra = extra.to_string();
        if extra.len() <= 500 && extra != "null" {
            text.push_str(&format!("; data: {extra}"));
        }
    }
    text
}

fn describe_http(e: &HttpError, url: &str) -> String {
    let from = if url.is_empty() {
        String::new()
    } else {
        format!(" from {url}")
    };
    match e {
        StreamableHttpError::UnexpectedServerResponse(msg) if msg.starts_with("HTTP ") => {
            let (status, body) = msg.split_once(": ").unwrap_or((msg, ""));
            let mut text = format!("{status}{from}");
            if !body.trim().is_empty() {
                text.push_str(&format!(
                    ": {}",
                    body.trim().chars().take(300).collect::<String>()
                ));
            }
            if status.starts_with("HTTP 401") || status.starts_with("HTTP 403") {
                text.push_str("; check `headers` (e.g. Authorization) in mcp.json");
            } else if status.starts_with("HTTP 404") {
                text.push_str("; check the `url` path (often /mcp)");
            }
            text
        }
        StreamableHttpError::AuthRequired(a) => format!(
            "HTTP 401{from}: authorization required ({}); set an Authorization header in mcp.json",
            a.www_authenticate_header
        ),
        StreamableHttpError::InsufficientScope(s) => format!(
            "HTTP 403{from}: insufficient scope ({}); use a token with more rights",
            s.www_authenticate_header
        ),
        StreamableHttpError::HttpStatus(s) => format!("HTTP {}{from}", s.status),
        StreamableHttpError::Client(c) if c.is_connect() => {
            let target = if url.is_empty() { "the server" } else { url };
            format!(
                "cannot connect to {target}: {}; is the server running?",
                chain(c)
            )
        }
        StreamableHttpError::Client(c) if c.is_timeout() => {
            format!("the HTTP request{from} timed out")
        }
        StreamableHttpError::SessionExpired => {
            "the server no longer knows this session (HTTP 404)".into()
        }
        other => format!("{}{from}", chain(other)),
    }
}

/// True when the call failed because the HTTP session expired, so a new
/// session may be opened and the call retried once.
pub(crate) fn is_session_expired(e: &ServiceError) -> bool {
    let mut current: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(http) = err.downcast_ref::<HttpError>()
            && matches!(
                http,
                StreamableHttpError::SessionExpired
                    | StreamableHttpError::ReinitializationFailed(_)
            )
        {
            return true;
        }
        current = err.source();
    }
    false
}

/// An error and its sources, joined with ": ", repeated parts left out.
pub(crate) fn chain(e: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(e);
    while let Some(err) = current {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_error_data_and_chains() {
        let data = ErrorData::invalid_params("tool not found", None);
        assert_eq!(describe_error_data(&data), "tool not found (code -32602)");
        let e = ServiceError::McpError(data);
        assert!(!is_session_expired(&e));
        let io = std::io::Error::other("boom");
        assert_eq!(chain(&io), "boom");
    }

    #[test]
    fn http_statuses_say_what_to_check() {
        let e = HttpError::UnexpectedServerResponse("HTTP 401 Unauthorized: no token".into());
        assert_eq!(
            describe_http(&e, "http://h/mcp"),
            "HTTP 401 Unauthorized from http://h/mcp: no token; check `headers` (e.g. Authorization) in mcp.json"
        );
        let expired =
            ServiceError::TransportSend(rmcp::transport::DynamicTransportError::from_parts(
                "http",
                std::any::TypeId::of::<()>(),
                Box::new(HttpError::SessionExpired),
            ));
        assert!(is_session_expired(&expired));
    }
}
