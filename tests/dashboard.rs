//! The dashboard over HTTP, on the real `aurad serve` binary: its embedded
//! files with their content types and security headers (a CSP without
//! inline script, no framing), the JSON endpoints it reads (`/v1/fires`,
//! `/v1/memory`, paged and filtered `/v1/runs`), and attacks: a cross-site
//! page or a rebinding DNS name cannot load it or drive the API, and with a
//! token set the data still needs the token while the (data-free) files do
//! not. The model is the built-in `test` model: no network.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use aurad::store::{Fire, NewRun, Store};
use aurad::types::memory::NewMemory;
use aurad::types::{RunState, ScheduleId};
use chrono::{TimeZone, Utc};
use serde_json::Value;
use support::serve::{Serve, poll};

const TOKEN: &str = "dash-token-5b1e-long-enough";

/// A response: status, headers (names in lowercase), body.
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request with `headers` (a `Host` of the daemon's address
/// unless given), read to the end.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("authorization"))
    {
        head.push_str(&support::serve::authorization(addr));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("a whole response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Answer {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    body
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[], "")
}

/// A project of `model: test` agents on a free loopback port.
fn project() -> (tempfile::TempDir, SocketAddr) {
    support::test_model::project(&[
        (
            "hello",
            "description: Says hello.\nmodel: test\nprompt: hi\n",
        ),
        (
            "nightly",
            "description: Runs at night.\nmodel: test\nprompt: hi\nschedule: [{ cron: \"0 3 * * *\" }]\n",
        ),
    ])
}

fn wait_succeeded(serve: &Serve, id: &str) -> Value {
    poll(
        &format!("run {id} to succeed"),
        || serve.log(),
        || {
            let run = get(serve.addr, &format!("/v1/runs/{id}")).json();
            (run["state"] == "succeeded").then_some(run)
        },
    )
}

fn start_run(addr: SocketAddr, agent: &str, input: &str) -> String {
    let body = serde_json::json!({ "input": input }).to_string();
    let answer = request(
        addr,
        "POST",
        &format!("/v1/agents/{agent}/runs"),
        &[("Content-Type", "application/json")],
        &body,
    );
    assert_eq!(answer.status, 202, "{}", answer.body);
    answer.json()["id"].as_str().unwrap().to_string()
}

#[test]
fn the_files_are_served_with_their_types_and_a_strict_policy() {
    let (dir, addr) = project();
    let serve = Serve::start(dir.path(), addr, &[]);
    for (path, content_type, marker) in [
        ("/", "text/html; charset=utf-8", "<h1>"),
        (
            "/dashboard/app.js",
            "text/javascript; charset=utf-8",
            "readEvents",
        ),
        (
            "/dashboard/chat.js",
            "text/javascript; charset=utf-8",
            "chatView",
        ),
        (
            "/dashboard/app.css",
            "text/css; charset=utf-8",
            "prefers-color-scheme: dark",
        ),
        ("/dashboard/icon.svg", "image/svg+xml", "<svg"),
    ] {
        let answer = get(addr, path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(answer.header("content-type"), content_type, "{path}");
        assert!(answer.body.contains(marker), "{path}: {}", answer.body);
        let csp = answer.header("content-security-policy");
        for directive in [
            "default-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
        ] {
            assert!(
                csp.contains(directive),
                "{path}: CSP {csp:?} lacks {directive}"
            );
        }
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(answer.header("x-frame-options"), "DENY", "{path}");
        assert_eq!(answer.header("x-content-type-options"), "nosniff", "{path}");
        assert!(!answer.headers.contains_key("set-cookie"), "{path}");
    }
    // The shell loads only its own files, with no inline script.
    let shell = get(addr, "/").body;
    assert!(shell.contains(r#"<script src="/dashboard/app.js" defer></script>"#));
    assert!(!shell.contains("<script>"), "{shell}");
    // Unknown paths answer the JSON 404 that names the dashboard.
    let missing = get(addr, "/dashboard/nope.js");
    assert_eq!(missing.status, 404);
    assert!(
        missing.json()["error"]
            .as_str()
            .unwrap()
            .contains("the dashboard is at /"),
        "{}",
        missing.body
    );
    drop(serve);
}

#[test]
fn with_a_token_the_data_needs_it_and_the_files_do_not() {
    let (dir, addr) = project();
    let serve = Serve::start_with_env(dir.path(), addr, &[], &[("AURAD_TOKEN", TOKEN)]);
    // /healthz answers without the token: wait on the token routes now.
    let bearer = format!("Bearer {TOKEN}");
    for path in [
        "/v1/agents",
        "/v1/runs?trigger=api&offset=0",
        "/v1/fires",
        "/v1/memory",
        "/v1/memory/notes",
        "/v1/status",
    ] {
        // An empty Authorization: the test's own token is not sent.
        let refused = request(addr, "GET", path, &[("Authorization", "")], "");
        assert_eq!(refused.status, 401, "{path} answered without the token");
        assert_eq!(refused.header("www-authenticate"), "Bearer");
        let wrong = request(addr, "GET", path, &[("Authorization", "Bearer nope")], "");
        assert_eq!(wrong.status, 401, "{path} answered to a wrong token");
        let allowed = request(addr, "GET", path, &[("Authorization", &bearer)], "");
        let expected = if path == "/v1/memory/notes" { 404 } else { 200 };
        assert_eq!(allowed.status, expected, "{path}: {}", allowed.body);
    }
    // Starting or approving a run is refused without it as well.
    let start = request(
        addr,
        "POST",
        "/v1/agents/hello/runs",
        &[("Content-Type", "application/json"), ("Authorization", "")],
        "{}",
    );
    assert_eq!(start.status, 401);
    let approve = request(
        addr,
        "POST",
        "/v1/runs/whatever/approval",
        &[("Content-Type", "application/json"), ("Authorization", "")],
        r#"{"approve": true}"#,
    );
    assert_eq!(approve.status, 401);
    // The files hold no data and load without it: the page asks for it.
    for path in [
        "/",
        "/dashboard/app.js",
        "/dashboard/chat.js",
        "/dashboard/app.css",
    ] {
        assert_eq!(get(addr, path).status, 200, "{path}");
    }
    drop(serve);
}

#[test]
fn a_cross_site_page_can_neither_load_the_dashboard_nor_drive_the_api() {
    let (dir, addr) = project();
    let serve = Serve::start(dir.path(), addr, &[]);
    let json = ("Content-Type", "application/json");
    let post = |headers: &[(&str, &str)]| {
        request(addr, "POST", "/v1/agents/hello/runs", headers, "{}").status
    };
    // A form or fetch from another site.
    assert_eq!(post(&[json, ("Origin", "http://evil.example")]), 403);
    assert_eq!(post(&[json, ("Sec-Fetch-Site", "cross-site")]), 403);
    assert_eq!(post(&[json, ("Sec-Fetch-Site", "same-site")]), 403);
    assert_eq!(post(&[("Content-Type", "text/plain")]), 415);
    // DNS rebinding: the attacker's name resolving to 127.0.0.1.
    for path in ["/", "/dashboard/app.js", "/v1/runs"] {
        let rebound = request(addr, "GET", path, &[("Host", "evil.example")], "");
        assert_eq!(rebound.status, 403, "{path}");
    }
    // A page of another site framing or fetching the dashboard.
    let framed = request(
        addr,
        "GET",
        "/",
        &[
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Dest", "iframe"),
        ],
        "",
    );
    assert_eq!(framed.status, 403);
    // No run was started by any of that.
    let runs = get(addr, "/v1/runs").json();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "{runs}");
    // The dashboard's own calls are same-origin and pass.
    let origin = format!("http://{addr}");
    let own = request(
        addr,
        "POST",
        "/v1/agents/hello/runs",
        &[json, ("Origin", &origin), ("Sec-Fetch-Site", "same-origin")],
        r#"{"input": "from the page"}"#,
    );
    assert_eq!(own.status, 202, "{}", own.body);
    let navigated = request(addr, "GET", "/", &[("Sec-Fetch-Site", "none")], "");
    assert_eq!(navigated.status, 200);
    drop(serve);
}

/// Seeds `root`'s database before the daemon starts: a skipped and a
/// missed fire of `nightly` and a memory written by a run.
fn seed(root: &Path) -> (String, String) {
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let schedule = ScheduleId::of("nightly", "0 3 * * *", "UTC", None);
    let fire = |id: &str, day: u32| NewRun {
        id: id.into(),
        agent: "nightly".into(),
        trigger: aurad::types::Trigger::Schedule,
        input: "hi".into(),
        model: "test".into(),
        definition_hash: "h".into(),
        owner: String::new(),
        fire: Some(Fire {
            schedule_id: schedule.clone(),
            scheduled_for: Utc.with_ymd_and_hms(2025, 10, day, 3, 0, 0).unwrap(),
        }),
        state: RunState::Queued,
        template_context: None,
        session_id: None,
        parent: None,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let skipped = "skipped: the previous run was still running (on_overlap: skip)";
        let missed = "missed: aurad was not running at the fire time (on_missed: skip)";
        assert!(
            store
                .record_unrun(
                    fire("fire-skipped-0001", 2),
                    RunState::Skipped,
                    skipped.into()
                )
                .await
                .unwrap()
        );
        assert!(
            store
                .record_unrun(
                    fire("fire-missed-00002", 3),
                    RunState::Missed,
                    missed.into()
                )
                .await
                .unwrap()
        );
        let mut memory = NewMemory::new("notes", "The deploy window is <b>Tuesday</b>.");
        memory.run_id = Some("fire-missed-00002".into());
        memory.category = "decision".into();
        store.memory_save(memory, 100, Utc::now()).await.unwrap();
    });
    store.close().unwrap();
    ("fire-skipped-0001".into(), "fire-missed-00002".into())
}

#[test]
fn fires_memory_and_paged_runs_answer_json() {
    let (dir, addr) = project();
    let (skipped, missed) = seed(dir.path());
    let serve = Serve::start(dir.path(), addr, &[]);

    let ids: Vec<String> = (0..3)
        .map(|i| start_run(addr, "hello", &format!("run {i}")))
        .collect();
    for id in &ids {
        wait_succeeded(&serve, id);
    }
    // Pages, newest first, and the trigger filter.
    let page = |query: &str| -> Vec<String> {
        let answer = get(addr, &format!("/v1/runs?{query}"));
        assert_eq!(answer.status, 200, "{query}: {}", answer.body);
        answer.json()["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(page("agent=hello&limit=2"), newest_first[..2]);
    assert_eq!(page("agent=hello&limit=2&offset=2"), newest_first[2..]);
    assert_eq!(page("agent=hello&trigger=api"), newest_first);
    assert!(page("agent=hello&trigger=schedule").is_empty());
    let bad = get(addr, "/v1/runs?offset=-1");
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("offset `-1`"), "{}", bad.body);

    // Fires: the skipped and missed ones with their reasons, newest first.
    let fires = get(addr, "/v1/fires?agent=nightly").json();
    let fires = fires["fires"].as_array().unwrap();
    let seeded: Vec<&Value> = fires
        .iter()
        .filter(|f| f["id"] == skipped || f["id"] == missed)
        .collect();
    assert_eq!(seeded.len(), 2, "{fires:?}");
    assert_eq!(seeded[0]["id"], missed.as_str());
    assert_eq!(seeded[0]["state"], "missed");
    assert_eq!(seeded[0]["scheduled_for"], "2025-10-03T03:00:00.000Z");
    assert!(seeded[0]["error"].as_str().unwrap().contains("on_missed"));
    assert_eq!(seeded[1]["state"], "skipped");
    assert!(seeded[1]["error"].as_str().unwrap().contains("on_overlap"));
    assert!(
        fires
            .iter()
            .all(|f| f["agent"] == "nightly" && !f["scheduled_for"].is_null())
    );
    let one = get(addr, "/v1/fires?agent=nightly&limit=1&offset=1").json();
    assert_eq!(one["fires"].as_array().unwrap().len(), 1);
    let bad = get(addr, "/v1/fires?state=missed");
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("agent, limit and offset"), "{}", bad.body);
    // The agents list has the next fires the schedules view shows.
    let agents = get(addr, "/v1/agents").json();
    let nightly = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "nightly")
        .unwrap()
        .clone();
    assert!(
        !nightly["schedules"][0]["next_fires"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Memory: namespaces with sizes, entries with their provenance.
    let namespaces = get(addr, "/v1/memory").json();
    assert_eq!(
        namespaces["namespaces"],
        serde_json::json!([{ "name": "notes", "entries": 1 }])
    );
    let notes = get(addr, "/v1/memory/notes").json();
    assert_eq!(notes["namespace"], "notes");
    let memory = &notes["memories"][0];
    assert_eq!(memory["content"], "The deploy window is <b>Tuesday</b>.");
    assert_eq!(memory["run_id"], missed.as_str());
    assert_eq!(memory["category"], "decision");
    assert!(memory["created_at"].as_str().unwrap().ends_with('Z'));
    let unknown = get(addr, "/v1/memory/nope");
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.body.contains("GET /v1/memory lists them"),
        "{}",
        unknown.body
    );
    let bad = get(addr, "/v1/memory/notes?limit=0");
    assert_eq!(bad.status, 400);
    drop(serve);
}

#[test]
fn an_agent_shows_its_system_prompt_and_prompt_with_secrets_redacted() {
    let secret = "sk-dashboard-4f1c9e-not-to-be-shown";
    let (dir, addr) = support::test_model::project(&[(
        "keyed",
        "description: Holds a key.\nmodel: test\nsystem: \"Use the key ${DASH_KEY_VALUE} <b>carefully</b>.\"\nprompt: check the disk\ntools: [calculator]\n",
    )]);
    let serve = Serve::start_with_env(dir.path(), addr, &[], &[("DASH_KEY_VALUE", secret)]);
    let answer = get(addr, "/v1/agents/keyed");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(!answer.body.contains(secret), "{}", answer.body);
    let agent = answer.json();
    assert_eq!(
        agent["system"],
        "Use the key [redacted:DASH_KEY_VALUE] <b>carefully</b>."
    );
    assert_eq!(agent["prompt"], "check the disk");
    assert_eq!(agent["tools"], serde_json::json!(["calculator"]));
    // The list stays short: the texts are on the agent's own answer only.
    let list = get(addr, "/v1/agents").json();
    assert!(list["agents"][0].get("system").is_none(), "{list}");
    assert!(list["agents"][0].get("prompt").is_none(), "{list}");
    drop(serve);
}
