//! Keeps web pages from driving the local API (RELIABILITY.md lists the
//! attacks). A page in the user's browser can send requests to
//! `127.0.0.1:7777` without a CORS preflight (a `text/plain` POST), and
//! through DNS rebinding under a name of its own. So every route but the
//! webhooks refuses:
//!
//! - a `Host` that is not the daemon's (403): the listen address,
//!   `localhost` or a loopback address (at the listen port, or with no port
//!   as a proxy may rewrite it), an IP address when bound to all
//!   interfaces, or a name of `allowed_hosts` in aurad.yaml. Bound to an
//!   address other than loopback (which needs `AURAD_TOKEN`) without
//!   `allowed_hosts`, any `Host` is accepted: the bearer token, which no
//!   page has, is the guard there, and the names a reverse proxy or a LAN
//!   client uses cannot be guessed;
//! - an `Origin` of another site (403): it must be the request's own host
//!   or an allowed one; `Origin: null` is refused;
//! - `Sec-Fetch-Site: cross-site` and `same-site` (403): a page on another
//!   port of the same machine is same-site; the dashboard's own calls
//!   are `same-origin` and pass, and so does `none` (typed in the
//!   address bar);
//! - a state-changing request (POST, PUT, PATCH, DELETE) without
//!   `Content-Type: application/json` (415), an empty body included: that
//!   type cannot be sent cross-origin without a preflight, which the API
//!   never grants. One exception: a DELETE carrying `Mcp-Session-Id` (an
//!   MCP client ending its `/mcp` session sends no body and often no
//!   type); DELETE and that header each need a preflight already.
//!
//! `/hooks/*` and `/channels/*` are exempt from all of these: webhook
//! senders (and chat platforms) come through proxies and tunnels with their
//! own `Host`, may send form-encoded bodies, and authenticate by signature
//! or secret header instead.
//!
//! Depends on `config` (the allowed hosts, read through the `Backend`).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Api, ApiError};
use crate::config::settings::AllowedHost;

/// The middleware: refuses what a web page could send (see the module
/// docs), passes the rest on.
pub(super) async fn refuse_web_pages(
    State(api): State<Api>,
    request: Request,
    next: Next,
) -> Response {
    let allowed = api.daemon.allowed_hosts();
    let hosts = Hosts {
        listen: api.daemon.listen(),
        allowed: &allowed,
    };
    match hosts.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(
                method = %request.method(),
                path = %request.uri().path(),
                "refused a request a web page could have sent: {}",
                refusal.message
            );
            refusal.into_response()
        }
    }
}

/// Who the API answers to.
struct Hosts<'a> {
    listen: SocketAddr,
    allowed: &'a [AllowedHost],
}

impl Hosts<'_> {
    /// Whether the `Host` header is checked at all (see the module docs).
    fn checks_host(&self) -> bool {
        self.listen.ip().is_loopback() || !self.allowed.is_empty()
    }

    /// Is `host` at `port` this daemon? `localhost` and loopback addresses
    /// are, at the listen port or without one (a proxy's rewrite); the
    /// listen address is (any address when bound to all); and so are the
    /// `allowed_hosts`.
    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        let listen_port = port.is_none_or(|p| p == self.listen.port());
        if host == "localhost" {
            return listen_port;
        }
        if let Some(ip) = ip_of(host) {
            let listen_ip = ip == self.listen.ip() || self.listen.ip().is_unspecified();
            return listen_port && (ip.is_loopback() || listen_ip);
        }
        self.allowed.iter().any(|a| a.allows(host, port))
    }

    fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        let host_header = header_text(headers, header::HOST.as_str());
        if self.checks_host() {
            let host = host_header.unwrap_or_default();
            let allowed = AllowedHost::parse(host)
                .ok()
                .is_some_and(|h| self.allows(&h.host, h.port));
            if !allowed {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Host {host:?} is not this daemon's address, so the request is refused (a guard against DNS rebinding): send it to {} or localhost:{}; to reach the API under another name (a reverse proxy), add that name to `allowed_hosts` in aurad.yaml",
                        self.listen,
                        self.listen.port()
                    ),
                ));
            }
        }
        if let Some(origin) = header_text(headers, header::ORIGIN.as_str()) {
            let same_origin = origin_authority(origin)
                .zip(host_header)
                .is_some_and(|(authority, host)| authority.eq_ignore_ascii_case(host));
            let allowed = same_origin
                || origin_host(origin)
                    .is_some_and(|h| self.checks_host() && self.allows(&h.host, h.port));
            if !allowed {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "requests from web pages of another origin are refused (Origin {origin:?}): call the API from a program (curl, `aurad trigger`); a page served under another name needs that name in `allowed_hosts` in aurad.yaml"
                    ),
                ));
            }
        }
        if let Some(site) = header_text(headers, "sec-fetch-site")
            && !matches!(site, "same-origin" | "none")
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "browser requests from other sites are refused (Sec-Fetch-Site: {site}): call the API from a program (curl, `aurad trigger`), not from a web page"
                ),
            ));
        }
        let changes_state = matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        let ends_mcp_session = *method == Method::DELETE && headers.contains_key(MCP_SESSION_ID);
        if changes_state
            && !ends_mcp_session
            && !is_json(header_text(headers, header::CONTENT_TYPE.as_str()))
        {
            let sent = header_text(headers, header::CONTENT_TYPE.as_str()).unwrap_or("none");
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "{method} requests must send `Content-Type: application/json` (sent: {sent}), even with an empty body; e.g. curl -H 'Content-Type: application/json' -d '{{\"input\": \"...\"}}'"
                ),
            ));
        }
        Ok(())
    }
}

/// The header an MCP client names its streamable HTTP session with.
const MCP_SESSION_ID: &str = "mcp-session-id";

/// A header's value as text (`None`: absent or not visible ASCII).
fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Is this `Content-Type` JSON (`application/json`, any parameters)?
fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|value| {
        value
            .split(';')
            .next()
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// `host[:port]` of an `Origin` (`scheme://host[:port]`), as written.
fn origin_authority(origin: &str) -> Option<&str> {
    let (_, authority) = origin.split_once("://")?;
    (!authority.is_empty() && !authority.contains('/')).then_some(authority)
}

/// The host and port of an `Origin`, the port defaulted by its scheme.
fn origin_host(origin: &str) -> Option<AllowedHost> {
    let (scheme, _) = origin.split_once("://")?;
    let mut host = AllowedHost::parse(origin_authority(origin)?).ok()?;
    if host.port.is_none() {
        host.port = match scheme.to_ascii_lowercase().as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        };
    }
    Some(host)
}

/// The address a `Host` names, when it is an IP address (`[v6]` for IPv6).
fn ip_of(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn loopback(allowed: &[AllowedHost]) -> Hosts<'_> {
        Hosts {
            listen: "127.0.0.1:7777".parse().unwrap(),
            allowed,
        }
    }

    fn status(hosts: &Hosts<'_>, method: Method, pairs: &[(&'static str, &str)]) -> u16 {
        match hosts.check(&method, &headers(pairs)) {
            Ok(()) => 200,
            Err(e) => e.status.as_u16(),
        }
    }

    const JSON: (&str, &str) = ("content-type", "application/json; charset=utf-8");

    #[test]
    fn the_daemons_own_names_pass_and_others_are_refused() {
        let hosts = loopback(&[]);
        for host in [
            "127.0.0.1:7777",
            "localhost:7777",
            "LOCALHOST",
            "[::1]:7777",
            "127.0.0.2:7777",
        ] {
            assert_eq!(
                status(&hosts, Method::GET, &[("host", host)]),
                200,
                "{host}"
            );
        }
        for host in [
            "evil.example:7777",
            "evil.example",
            "",
            "10.0.0.1:7777",
            "a b",
            "localhost:3000",
            "127.0.0.1:8080",
        ] {
            assert_eq!(
                status(&hosts, Method::GET, &[("host", host)]),
                403,
                "{host}"
            );
        }
        assert_eq!(status(&hosts, Method::GET, &[]), 403);
        let allowed = [AllowedHost::parse("aurad.example.com").unwrap()];
        let hosts = loopback(&allowed);
        assert_eq!(
            status(&hosts, Method::GET, &[("host", "Aurad.Example.com:443")]),
            200
        );
    }

    #[test]
    fn elsewhere_without_allowed_hosts_any_host_passes() {
        let hosts = Hosts {
            listen: "0.0.0.0:7777".parse().unwrap(),
            allowed: &[],
        };
        assert_eq!(
            status(&hosts, Method::GET, &[("host", "box.lan:7777")]),
            200
        );
        let allowed = [AllowedHost::parse("box.lan").unwrap()];
        let hosts = Hosts {
            listen: "0.0.0.0:7777".parse().unwrap(),
            allowed: &allowed,
        };
        assert_eq!(
            status(&hosts, Method::GET, &[("host", "other.lan:7777")]),
            403
        );
        assert_eq!(
            status(&hosts, Method::GET, &[("host", "192.168.1.9:7777")]),
            200
        );
    }

    #[test]
    fn foreign_origins_and_sites_are_refused() {
        let hosts = loopback(&[]);
        let host = ("host", "127.0.0.1:7777");
        for (origin, expected) in [
            ("http://127.0.0.1:7777", 200),
            ("http://localhost:7777", 200),
            ("http://localhost:3000", 403),
            ("http://evil.example", 403),
            ("https://evil.example:7777", 403),
            ("null", 403),
        ] {
            assert_eq!(
                status(&hosts, Method::POST, &[host, JSON, ("origin", origin)]),
                expected,
                "{origin}"
            );
        }
        for (site, expected) in [
            ("cross-site", 403),
            ("same-site", 403),
            ("same-origin", 200),
            ("none", 200),
        ] {
            assert_eq!(
                status(
                    &hosts,
                    Method::POST,
                    &[host, JSON, ("sec-fetch-site", site)]
                ),
                expected,
                "{site}"
            );
        }
    }

    #[test]
    fn state_changes_need_json() {
        let hosts = loopback(&[]);
        let host = ("host", "127.0.0.1:7777");
        assert_eq!(status(&hosts, Method::POST, &[host, JSON]), 200);
        assert_eq!(
            status(
                &hosts,
                Method::POST,
                &[host, ("content-type", "Application/JSON")]
            ),
            200
        );
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
        ] {
            assert_eq!(
                status(&hosts, Method::POST, &[host, ("content-type", bad)]),
                415,
                "{bad}"
            );
        }
        assert_eq!(status(&hosts, Method::POST, &[host]), 415);
        assert_eq!(status(&hosts, Method::DELETE, &[host]), 415);
        assert_eq!(
            status(&hosts, Method::DELETE, &[host, ("mcp-session-id", "s1")]),
            200
        );
        assert_eq!(
            status(&hosts, Method::POST, &[host, ("mcp-session-id", "s1")]),
            415
        );
        assert_eq!(status(&hosts, Method::GET, &[host]), 200);
    }
}
