//! `aurad trigger NAME`: ask the running daemon (`aurad serve`) to start a
//! run through its HTTP API; with `--follow`, stream the run's events and
//! render them as `aurad run` does.

use std::path::Path;
use std::time::Duration;

use clap::Args;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::{StatusCode, Url, header};

use super::render::Renderer;
use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics, read_input};
use crate::app;
use crate::config;
use crate::types::{RunEvent, RunState};

/// How long connecting to the daemon may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request without `--follow` may take in all.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The agent (the file name in agents/ without .yaml).
    #[arg(add = super::completions::agents())]
    pub name: String,
    /// The input; `-` reads it from stdin. Default: the agent's `prompt`.
    #[arg(long, short = 'i', value_name = "TEXT")]
    pub input: Option<String>,
    /// A template variable (`{{ vars.KEY }}`); repeat for more.
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// Stream the run's events until it ends; exit 0 only if it succeeded.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// The daemon's address. Default: where the running `aurad serve` of
    /// the project at --dir recorded it listens, else `http://` + `listen`
    /// of aurad.yaml (127.0.0.1:7777).
    #[arg(long, value_name = "URL", env = "AURAD_URL")]
    pub url: Option<String>,
}

pub fn run(root: &Path, args: TriggerArgs) -> i32 {
    // The project's running daemon says where it is and its token, to the
    // person only (`app::api_access`).
    let access = app::api_access(root);
    let (url, looked) = match (&args.url, &access) {
        (Some(url), _) => (Some(url.clone()), None),
        (None, Ok(a)) => (Some(format!("http://{}", loopback(a.listen))), None),
        (None, Err(none)) => (None, Some(none.to_string())),
    };
    let base = match base_url(root, url.as_deref(), looked.as_deref()) {
        Ok(url) => url,
        Err(code) => return code,
    };
    let mut vars = serde_json::Map::new();
    for pair in &args.vars {
        match pair.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                vars.insert(
                    key.trim().to_string(),
                    serde_json::Value::String(value.to_string()),
                );
            }
            _ => {
                eprintln!("error: --var {pair:?} is not KEY=VALUE (e.g. --var since=monday)");
                return EXIT_CONFIG;
            }
        }
    }
    let Ok(input) = read_input(args.input.as_deref()) else {
        return EXIT_CONFIG;
    };
    let mut body = serde_json::Map::new();
    if let Some(input) = input {
        body.insert("input".into(), serde_json::Value::String(input));
    }
    body.insert("vars".into(), serde_json::Value::Object(vars));
    // The project's own daemon runs its agents/: a name with no file there
    // is refused here, with the names it may have meant.
    let names = config::agent_names(root);
    if args.url.is_none() && !names.is_empty() && !names.contains(&args.name) {
        let hint = config::suggest::did_you_mean(&args.name, names.iter().map(String::as_str))
            .map(|hint| format!("; {hint}"))
            .unwrap_or_default();
        eprintln!(
            "error: no agent named `{}` in {}{hint} (agents: {})",
            args.name,
            root.join("agents").display(),
            names.join(", ")
        );
        return EXIT_CONFIG;
    }
    let Some(runtime) = super::runtime() else {
        return EXIT_FAILED;
    };
    let request = Request {
        base,
        token: std::env::var("AURAD_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| access.ok().map(|a| a.token)),
        looked,
    };
    let code = runtime.block_on(trigger(
        &request,
        &args.name,
        serde_json::Value::Object(body),
        args.follow,
    ));
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}

/// `--url`, or `http://` + `listen` of aurad.yaml; `Err` holds the exit
/// code after saying why not (`looked`: why the running daemon's record
/// was not used).
fn base_url(root: &Path, url: Option<&str>, looked: Option<&str>) -> Result<Url, i32> {
    let text = match url {
        Some(url) if url.contains("://") => url.to_string(),
        Some(url) => format!("http://{url}"),
        None => {
            let (settings, diagnostics) = config::load_settings(root, &config::process_env);
            if diagnostics.iter().any(|d| d.is_error()) {
                print_diagnostics(&diagnostics);
                eprintln!(
                    "error: aurad.yaml has errors, so the daemon's address is unknown; fix them or pass --url"
                );
                return Err(EXIT_CONFIG);
            }
            if settings.listen.port() == 0 {
                eprintln!(
                    "error: aurad.yaml says `listen: {}` (any free port), so only a running daemon's record says where it listens, and {}: the daemon is not running: start it with `aurad serve`, or pass --url (or set AURAD_URL) if it runs elsewhere",
                    settings.listen,
                    looked.unwrap_or("there is none")
                );
                return Err(EXIT_FAILED);
            }
            format!("http://{}", loopback(settings.listen))
        }
    };
    match Url::parse(&text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(url),
        _ => {
            eprintln!("error: --url {text:?} is not an http(s) URL, e.g. http://127.0.0.1:7777");
            Err(EXIT_CONFIG)
        }
    }
}

/// `listen` as a client reaches it: a daemon listening on every interface
/// answers on loopback.
fn loopback(mut listen: std::net::SocketAddr) -> std::net::SocketAddr {
    if listen.ip().is_unspecified() {
        let loopback: std::net::IpAddr = if listen.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        listen.set_ip(loopback);
    }
    listen
}

/// Where the daemon is, and the token it may require.
struct Request {
    base: Url,
    token: Option<String>,
    /// When the address is aurad.yaml's: why the running daemon's record
    /// was not used (where it was looked for, stale records).
    looked: Option<String>,
}

impl Request {
    /// The base URL with `segments` appended (each percent-encoded).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// The base URL as a person wrote it (no trailing slash).
    fn shown(&self) -> String {
        self.base.as_str().trim_end_matches('/').to_string()
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends, turning a failure to reach the daemon into its message.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, i32> {
        match self.authorize(request).send().await {
            Ok(response) => Ok(response),
            Err(e) if e.is_connect() => {
                match &self.looked {
                    Some(looked) => eprintln!(
                        "error: no aurad serve is answering at {} (`listen` of aurad.yaml, 127.0.0.1:7777 unless set), and {looked}: the daemon is not running: start it with `aurad serve`, or pass --url (or set AURAD_URL) if it runs elsewhere",
                        self.shown()
                    ),
                    None => eprintln!(
                        "error: no aurad serve is answering at {}; start it with `aurad serve` (or pass --url)",
                        self.shown()
                    ),
                }
                Err(EXIT_FAILED)
            }
            Err(e) if e.is_timeout() => {
                eprintln!(
                    "error: aurad at {} did not answer within {}s",
                    self.shown(),
                    REQUEST_TIMEOUT.as_secs()
                );
                Err(EXIT_FAILED)
            }
            Err(e) => {
                eprintln!(
                    "error: the request to aurad at {} failed: {e}",
                    self.shown()
                );
                Err(EXIT_FAILED)
            }
        }
    }
}

async fn trigger(request: &Request, agent: &str, body: serde_json::Value, follow: bool) -> i32 {
    let client = match reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot create an HTTP client: {e}");
            return EXIT_FAILED;
        }
    };
    let mut post = client
        .post(request.url(&["v1", "agents", agent, "runs"]))
        .json(&body);
    post = if follow {
        post.header(header::ACCEPT, "text/event-stream")
    } else {
        post.header(header::ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT)
    };
    let response = match request.send(post).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    if !response.status().is_success() {
        return report_error(response).await;
    }
    if follow && is_event_stream(&response) {
        return render_stream(response, None).await;
    }
    let run: serde_json::Value = match response.json().await {
        Ok(run) => run,
        Err(e) => {
            eprintln!("error: aurad answered with something other than a run: {e}");
            return EXIT_FAILED;
        }
    };
    let id = run.get("id").and_then(|v| v.as_str()).unwrap_or_default();
    let state = run
        .get("state")
        .and_then(|v| v.as_str())
        .unwrap_or("queued");
    if id.is_empty() {
        eprintln!("error: aurad answered without a run id: {run}");
        return EXIT_FAILED;
    }
    if !follow {
        println!("run {id} {state}");
        return EXIT_OK;
    }
    // The daemon answered with the run instead of its events: follow them.
    let events = client
        .get(request.url(&["v1", "runs", id, "events"]))
        .header(header::ACCEPT, "text/event-stream");
    let response = match request.send(events).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    if !response.status().is_success() {
        return report_error(response).await;
    }
    render_stream(response, Some(id.to_string())).await
}

fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Prints the server's `error` and returns the exit code: 2 for a request
/// that cannot succeed as made (400, 404, 422), 1 otherwise.
async fn report_error(response: reqwest::Response) -> i32 {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .or_else(|| Some(text.trim().to_string()).filter(|t| !t.is_empty()))
        .unwrap_or_else(|| format!("aurad answered {status}"));
    eprintln!("error: {message}");
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
        && std::env::var_os("AURAD_TOKEN").is_none()
    {
        eprintln!(
            "(a daemon started elsewhere: set AURAD_TOKEN to its token, or pass --url where it listens)"
        );
    }
    match status {
        StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::UNPROCESSABLE_ENTITY => {
            EXIT_CONFIG
        }
        _ => EXIT_FAILED,
    }
}

/// Renders the run's SSE events until its `finished` event; exit 0 only if
/// it succeeded.
async fn render_stream(response: reqwest::Response, mut run_id: Option<String>) -> i32 {
    let mut renderer = Renderer::for_terminal();
    let mut events = response.bytes_stream().eventsource();
    while let Some(item) = events.next().await {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                eprintln!("error: the event stream broke: {e}");
                follow_hint(run_id.as_deref());
                return EXIT_FAILED;
            }
        };
        if item.event == "error" {
            let message = serde_json::from_str::<serde_json::Value>(&item.data)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                .unwrap_or(item.data);
            eprintln!("error: {message}");
            return EXIT_FAILED;
        }
        let event: RunEvent = match serde_json::from_str(&item.data) {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(kind = %item.event, "skipping an event that is not a run event: {e}");
                continue;
            }
        };
        if let RunEvent::Started { run_id: id, .. } = &event {
            run_id = Some(id.clone());
        }
        renderer.event(&event);
        if let RunEvent::Finished {
            state,
            reason,
            usage,
            cost_usd,
            ..
        } = &event
        {
            renderer.finish(
                run_id.as_deref().unwrap_or("?"),
                *state,
                reason.as_deref(),
                usage,
                *cost_usd,
            );
            return if *state == RunState::Succeeded {
                EXIT_OK
            } else {
                EXIT_FAILED
            };
        }
    }
    eprintln!("error: the event stream ended before the run finished");
    follow_hint(run_id.as_deref());
    EXIT_FAILED
}

fn follow_hint(run_id: Option<&str>) {
    if let Some(id) = run_id {
        eprintln!("(the run goes on in the daemon; follow it with `aurad logs {id} --follow`)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_the_base_path_and_encode_segments() {
        let request = Request {
            base: Url::parse("http://127.0.0.1:7777/aurad/").unwrap(),
            token: None,
            looked: None,
        };
        assert_eq!(
            request.url(&["v1", "agents", "a b", "runs"]).as_str(),
            "http://127.0.0.1:7777/aurad/v1/agents/a%20b/runs"
        );
        let request = Request {
            base: Url::parse("http://127.0.0.1:7777").unwrap(),
            token: None,
            looked: None,
        };
        assert_eq!(
            request.url(&["v1", "runs", "x", "events"]).as_str(),
            "http://127.0.0.1:7777/v1/runs/x/events"
        );
    }

    #[test]
    fn a_url_without_scheme_means_http() {
        let dir = std::path::Path::new("/nonexistent");
        assert_eq!(
            base_url(dir, Some("127.0.0.1:9"), None).unwrap().as_str(),
            "http://127.0.0.1:9/"
        );
        assert_eq!(base_url(dir, Some("ftp://x"), None), Err(EXIT_CONFIG));
    }
}
