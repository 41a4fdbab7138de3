//! The dashboard in a real headless Chromium, driven over WebDriver
//! (`fantoccini` and Debian's `chromedriver`, started here on a free port):
//! the real `aurad serve` with a token and `model: test` agents. The page
//! asks for the token, starts a run whose input is an HTML injection
//! attempt (it must show as text and never run), watches a run that waits
//! for approval, approves it from the page and sees it finish live over the
//! event stream, opens its detail from the runs list, and saves screenshots
//! in light and dark (`target/test-artifacts/dashboard-*.png`).
//!
//! The accessibility smoke check is written here (no axe-core: it would
//! need the npm registry in CI): every form control has a label, one `h1`
//! and no skipped heading level, and every text's contrast against its
//! background is at least 4.5:1 (3:1 for large text), on every view in
//! both color schemes.
//!
//! The chat page and the rest of issue 33's item 7 run against the mock
//! model (`the_chat_page_...`): a session's two turns (the second model
//! request holds the first turn), a tool call approved inline, the session
//! reopened after a reload, a hanging run cancelled from its page, a run
//! started through the API appearing in the runs list without a reload,
//! the agent page, and every time saying its zone (the browser runs in
//! `Asia/Tokyo`, so the zone is not the daemon's UTC by accident).
//!
//! Without chromium and chromedriver the tests print "skipped: install
//! chromium chromium-driver" and passes, unless `CI` is set: then it fails
//! (`.ci/run` installs them).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::serve::{KillOnDrop, Serve, free_port, poll};

const TOKEN: &str = "browser-token-7c2d-long-enough";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the page may take for one step.
const STEP: Duration = Duration::from_secs(20);
/// The injection typed as a run's input (the test model echoes it back).
const INJECTION: &str = r#"<img src=x onerror="window.__xss=1"> and <b>bold</b>"#;

/// Where screenshots go: `target/test-artifacts/`.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// False (and says why) when the browser is missing outside CI; panics in
/// CI.
fn browser_installed() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {missing:?} is missing: .ci/run installs chromium and chromium-driver (apt-get install -y chromium chromium-driver)"
    );
    println!("skipped: install chromium chromium-driver (missing {missing:?})");
    false
}

/// chromedriver on a free loopback port, killed when dropped.
fn start_chromedriver() -> (KillOnDrop, String) {
    start_chromedriver_with(&[])
}

/// [`start_chromedriver`] with `env` for it and the browsers it starts
/// (`TZ`: the browser's time zone).
fn start_chromedriver_with(env: &[(&str, &str)]) -> (KillOnDrop, String) {
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .envs(env.iter().copied())
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let child = KillOnDrop(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    poll("chromedriver to listen", String::new, || {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()
    });
    (child, format!("http://{addr}"))
}

/// A headless Chromium session, light or dark.
async fn browser(webdriver: &str, dark: bool, profile: &Path) -> Client {
    let scheme = if dark {
        "--force-dark-mode"
    } else {
        "--blink-settings=preferredColorScheme=1"
    };
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,900", "--hide-scrollbars", scheme,
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::rustls()
        .expect("rustls")
        .capabilities(caps)
        .connect(webdriver)
        .await
        .expect("a chromedriver session")
}

/// Waits for `css`, failing with the page's visible text.
async fn wait_for(client: &Client, css: &str) -> fantoccini::elements::Element {
    match client
        .wait()
        .at_most(STEP)
        .for_element(Locator::Css(css))
        .await
    {
        Ok(element) => element,
        Err(e) => {
            let text = client
                .execute("return document.body.innerText", vec![])
                .await
                .unwrap_or_default();
            panic!("no `{css}` on the page ({e}); it shows:\n{text}")
        }
    }
}

/// Clicks `element` (found at `css`); if the page re-rendered it meanwhile
/// (a live event arrived: the element is stale), finds it again and clicks
/// that, until the deadline.
async fn click_fresh(client: &Client, element: &fantoccini::elements::Element, css: &str) {
    let deadline = std::time::Instant::now() + STEP;
    let mut current = element.clone();
    loop {
        match current.click().await {
            Ok(()) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference
                    && std::time::Instant::now() < deadline =>
            {
                current = wait_for(client, css).await;
            }
            Err(e) => panic!("clicking `{css}`: {e}"),
        }
    }
}

/// The visible text of the element at `css`.
async fn text_of(client: &Client, css: &str) -> String {
    let element = client.find(Locator::Css(css)).await.unwrap();
    element.text().await.unwrap()
}

async fn click(client: &Client, css: &str) {
    let element = client.find(Locator::Css(css)).await.unwrap();
    element.click().await.unwrap();
}

/// Evaluates `script` until it returns true.
async fn wait_until(client: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + STEP;
    loop {
        if client.execute(script, vec![]).await.unwrap() == json!(true) {
            return;
        }
        if Instant::now() > deadline {
            let text = client
                .execute("return document.body.innerText", vec![])
                .await
                .unwrap_or_default();
            panic!("timed out waiting for {what}; the page shows:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The accessibility smoke check, run in the page: a list of problems.
const A11Y_CHECK: &str = r#"
const problems = [];
for (const c of document.querySelectorAll("input, select, textarea")) {
  if (c.type === "hidden" || c.closest("[hidden]")) continue;
  const labelled = (c.labels && c.labels.length) || c.getAttribute("aria-label") || c.getAttribute("aria-labelledby");
  if (!labelled) problems.push("no label: " + c.outerHTML.slice(0, 80));
}
for (const b of document.querySelectorAll("button, a")) {
  if (!(b.textContent.trim() || b.getAttribute("aria-label"))) problems.push("no name: " + b.outerHTML.slice(0, 80));
}
const headings = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")].filter((h) => !h.closest("[hidden]"));
if (document.querySelectorAll("h1").length !== 1) problems.push("h1 count " + document.querySelectorAll("h1").length);
let level = 0;
for (const h of headings) {
  const n = Number(h.tagName[1]);
  if (n > level + 1) problems.push("heading skips from h" + level + " to " + h.tagName + ": " + h.textContent);
  level = n;
}
const rgb = (text) => (text.match(/[\d.]+/g) || []).map(Number);
const lum = ([r, g, b]) => {
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const background = (el) => {
  for (let e = el; e; e = e.parentElement) {
    const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c.slice(0, 3);
  }
  return rgb(getComputedStyle(document.documentElement).backgroundColor).slice(0, 3);
};
let checked = 0;
for (const el of document.querySelectorAll("body *")) {
  const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!own || el.closest("[hidden]") || !el.getClientRects().length) continue;
  const style = getComputedStyle(el);
  const fg = rgb(style.color).slice(0, 3);
  const bg = background(el);
  const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  const ratio = (a + 0.05) / (b + 0.05);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  checked++;
  if (ratio < (large ? 3 : 4.5)) problems.push("contrast " + ratio.toFixed(2) + " of `" + el.textContent.trim().slice(0, 40) + "` (" + style.color + " on rgb(" + bg + "))");
}
if (!checked) problems.push("no text checked");
return problems;
"#;

async fn check_accessibility(client: &Client, view: &str) {
    let problems = client.execute(A11Y_CHECK, vec![]).await.unwrap();
    assert_eq!(
        problems,
        json!([]),
        "accessibility problems on {view}: {problems:#}"
    );
}

async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write(artifacts().join(name), png).unwrap();
}

fn project() -> (tempfile::TempDir, SocketAddr) {
    support::test_model::project(&[
        (
            "hello",
            "description: Answers with what it was asked.\nmodel: test\nprompt: hi\n",
        ),
        (
            "ops",
            "description: Runs a shell command once a person approves it.\nmodel: test\nprompt: check the disk\ntools: [bash]\napprove: [bash]\nschedule: [{ cron: \"0 6 * * *\", timezone: Europe/Paris }]\n",
        ),
    ])
}

/// Goes to `hash` and waits until its view is shown; returns the view.
async fn open(client: &Client, base: &str, hash: &str) -> fantoccini::elements::Element {
    client.goto(&format!("{base}/{hash}")).await.unwrap();
    wait_for(client, &format!("main > .view[data-route=\"{hash}\"]")).await
}

/// Starts a run of `agent` from the page's form; returns its id (from
/// the run view's address).
async fn start_from_page(client: &Client, base: &str, agent: &str, input: &str) -> String {
    let view = open(client, base, "#/agents").await;
    let select = view.find(Locator::Css("form.start select")).await.unwrap();
    select.select_by_value(agent).await.unwrap();
    let text = view
        .find(Locator::Css("form.start textarea"))
        .await
        .unwrap();
    text.clear().await.unwrap();
    text.send_keys(input).await.unwrap();
    view.find(Locator::Css("form.start button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        client,
        "the run view",
        "return location.hash.startsWith('#/run/')",
    )
    .await;
    let hash = client
        .execute("return location.hash", vec![])
        .await
        .unwrap();
    hash.as_str()
        .unwrap()
        .trim_start_matches("#/run/")
        .to_string()
}

async fn drive(base: &str, webdriver: &str) {
    let profile = tempfile::tempdir().unwrap();
    let client = browser(webdriver, false, profile.path()).await;
    client.goto(&format!("{base}/")).await.unwrap();

    // The API answers 401: the page asks for the token, once.
    let input = wait_for(&client, "#token-form:not([hidden]) #token-input").await;
    check_accessibility(&client, "the token form").await;
    input.send_keys(TOKEN).await.unwrap();
    click(&client, "#token-form button").await;
    wait_for(&client, "form.start").await;
    let agents = text_of(&client, "main table").await;
    assert!(
        agents.contains("hello") && agents.contains("ops"),
        "{agents}"
    );
    check_accessibility(&client, "agents").await;

    // A run whose input (echoed in its output) is HTML: shown as text.
    let id = start_from_page(&client, base, "hello", INJECTION).await;
    wait_for(&client, "#live[data-finished='succeeded']").await;
    let output = text_of(&client, "#run-output").await;
    assert!(output.contains(INJECTION), "output {output:?}");
    let injected = client
        .execute(
            "return [window.__xss === undefined, document.querySelectorAll('main img, main b').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        injected,
        json!([true, 0]),
        "the run's text was inserted as HTML"
    );
    let timeline = text_of(&client, "#timeline").await;
    assert!(
        timeline.contains("Started") && timeline.contains("Finished"),
        "{timeline}"
    );
    assert!(id.len() >= 8, "{id}");

    // A run that waits for approval: approved from the page, watched live.
    let waiting = start_from_page(&client, base, "ops", "check the disk").await;
    let approve = wait_for(&client, ".approval button.approve").await;
    let summary = wait_for(&client, "dl.summary[data-state='waiting_approval']").await;
    assert!(summary.text().await.unwrap().contains("waiting approval"));
    let live = client.find(Locator::Css("#live")).await.unwrap();
    assert!(
        live.attr("data-finished").await.unwrap().is_none(),
        "finished before approval"
    );
    let timeline = text_of(&client, "#timeline").await;
    assert!(timeline.contains("Waits for approval: bash"), "{timeline}");
    check_accessibility(&client, "a run waiting for approval").await;
    screenshot(&client, "dashboard-waiting-light.png").await;
    click_fresh(&client, &approve, ".approval button.approve").await;
    // The same page (no reload) follows the stream to the end.
    wait_for(&client, "#live[data-finished='succeeded']").await;
    let timeline = text_of(&client, "#timeline").await;
    assert!(timeline.contains("Approved bash by api"), "{timeline}");
    let folded = client
        .execute(
            "return [...document.querySelectorAll('#timeline details.tool')].map((d) => [d.open, d.querySelector('summary').textContent, d.textContent.includes('hello from aurad')])",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        folded[0][0],
        json!(false),
        "tool calls start folded: {folded}"
    );
    assert!(
        folded[0][1].as_str().unwrap().contains("bash · ok"),
        "{folded}"
    );
    assert_eq!(
        folded[0][2],
        json!(true),
        "the result is in the fold: {folded}"
    );

    // Its detail, opened from the runs list filtered by agent.
    open(&client, base, "#/runs?agent=ops").await;
    let link = wait_for(&client, &format!("main table a[href='#/run/{waiting}']")).await;
    check_accessibility(&client, "runs").await;
    screenshot(&client, "dashboard-runs-light.png").await;
    link.click().await.unwrap();
    wait_for(&client, "#live[data-finished='succeeded']").await;
    let detail = text_of(&client, "main").await;
    for expected in [
        "Tool bash",
        "Model call 1",
        "Finished",
        "succeeded",
        "check the disk",
    ] {
        assert!(detail.contains(expected), "{expected} not in:\n{detail}");
    }
    check_accessibility(&client, "the run detail").await;
    screenshot(&client, "dashboard-run-light.png").await;

    let schedules = open(&client, base, "#/schedules")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        schedules.contains("0 6 * * *") && schedules.contains("Europe/Paris"),
        "{schedules}"
    );
    check_accessibility(&client, "schedules").await;
    open(&client, base, "#/memory").await;
    check_accessibility(&client, "memory").await;
    open(&client, base, "#/agents").await;
    screenshot(&client, "dashboard-agents-light.png").await;
    client.close().await.unwrap();

    // Dark: the same views honour prefers-color-scheme.
    let profile = tempfile::tempdir().unwrap();
    let dark = browser(webdriver, true, profile.path()).await;
    dark.goto(&format!("{base}/")).await.unwrap();
    wait_for(&dark, "#token-input")
        .await
        .send_keys(TOKEN)
        .await
        .unwrap();
    click(&dark, "#token-form button").await;
    wait_for(&dark, "form.start").await;
    let colors = dark
        .execute(
            "return [matchMedia('(prefers-color-scheme: dark)').matches, getComputedStyle(document.body).backgroundColor]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(colors, json!([true, "rgb(15, 18, 22)"]), "not dark");
    check_accessibility(&dark, "agents (dark)").await;
    screenshot(&dark, "dashboard-agents-dark.png").await;
    open(&dark, base, &format!("#/run/{waiting}")).await;
    wait_for(&dark, "#live[data-finished='succeeded']").await;
    check_accessibility(&dark, "the run detail (dark)").await;
    screenshot(&dark, "dashboard-run-dark.png").await;
    // A phone's width: nothing wider than the screen but the tables'
    // own scrolling regions.
    dark.set_window_size(390, 844).await.unwrap();
    let overflow = dark
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        overflow,
        json!(true),
        "the page scrolls sideways on a phone"
    );
    screenshot(&dark, "dashboard-run-phone-dark.png").await;
    dark.close().await.unwrap();
}

#[test]
fn the_dashboard_starts_watches_and_approves_runs_in_a_real_browser() {
    if !browser_installed() {
        return;
    }
    let (dir, addr) = project();
    let serve = Serve::start_with_env(dir.path(), addr, &[], &[("AURAD_TOKEN", TOKEN)]);
    let (chromedriver, webdriver) = start_chromedriver();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(drive(&format!("http://{addr}"), &webdriver));
    drop(chromedriver);
    // Everything the page did went through the API with the token.
    let log = serve.log();
    assert!(!log.contains("refused a request"), "{log}");
    let out = support::serve::aurad(dir.path())
        .args(["runs", "--json"])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&out.stdout).expect("`aurad runs --json`");
    let states: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["state"].as_str())
        .collect();
    assert_eq!(states, ["succeeded", "succeeded"], "{runs}");
}

// ---------- the chat page and issue 33's item 7 ----------

/// The mock model's answer to `request`, by its conversation: a tool
/// result gets the final answer, "hang" never answers, "compute" calls the
/// calculator (which waits for approval), anything else is echoed.
fn chat_reply(request: &Recorded) -> Reply {
    let messages = request.messages();
    let Some(last) = messages.last() else {
        return Reply::Text("nothing asked".into());
    };
    if last["role"] == "tool" {
        return Reply::Text("The calculator says 42.".into());
    }
    let content = last["content"].as_str().unwrap_or_default().to_string();
    if content.contains("hang") {
        Reply::Hang
    } else if content.contains("compute") {
        Reply::tool_call("calc-1", "calculator", r#"{"expression":"6*7"}"#)
    } else {
        Reply::Text(format!("You said: {content}"))
    }
}

/// A project with the mock model: `talk` (chats, the calculator waits for
/// approval, a schedule) and `slow` (hangs when asked to).
fn mock_project(mock: &MockLlm) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let addr = support::serve::write_settings(dir.path(), mock);
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/talk.yaml"),
        "description: Talks.\nmodel: mock/m\nsystem: You are terse.\nprompt: say hello\ntools: [calculator]\napprove: [calculator]\nschedule: [{ cron: \"0 6 * * *\", timezone: Europe/Paris }]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agents/slow.yaml"),
        "description: Takes its time.\nmodel: mock/m\nprompt: hang on\n",
    )
    .unwrap();
    (dir, addr)
}

/// `method path` with the token and a JSON body: the status and the JSON.
fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Types `text` in the chat box and sends it with Enter; waits until the
/// turn has ended `succeeded` and `assistants` answers are shown.
async fn say(client: &Client, text: &str, assistants: usize) {
    let input = wait_for(client, "#chat-form textarea").await;
    input.send_keys(&format!("{text}\u{E007}")).await.unwrap();
    wait_until(
        client,
        &format!("the answer to {text:?}"),
        &format!(
            "return document.querySelector('#chat-status').dataset.finished === 'succeeded' \
             && document.querySelectorAll('#chat-log .msg-assistant').length === {assistants}"
        ),
    )
    .await;
}

/// Checks that every time on the page says its zone, the browser's
/// (`Asia/Tokyo`: GMT+9), and is that instant there; returns how many.
async fn check_times(client: &Client, view: &str) -> usize {
    let times = client
        .execute(
            "return [...document.querySelectorAll('main time')].map((t) => [t.dateTime, t.textContent])",
            vec![],
        )
        .await
        .unwrap();
    let times = times.as_array().unwrap();
    let tokyo = chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    for time in times {
        let (at, shown) = (time[0].as_str().unwrap(), time[1].as_str().unwrap());
        let at = chrono::DateTime::parse_from_rfc3339(at).unwrap();
        let expected = format!(
            "{} GMT+9",
            at.with_timezone(&tokyo).format("%Y-%m-%d %H:%M:%S")
        );
        assert_eq!(shown, expected, "a time on {view} without its zone");
    }
    times.len()
}

async fn drive_chat(base: &str, addr: SocketAddr, webdriver: &str, mock: &MockLlm) {
    let profile = tempfile::tempdir().unwrap();
    let client = browser(webdriver, false, profile.path()).await;
    client.goto(&format!("{base}/")).await.unwrap();
    wait_for(&client, "#token-form:not([hidden]) #token-input")
        .await
        .send_keys(TOKEN)
        .await
        .unwrap();
    click(&client, "#token-form button").await;
    wait_for(&client, "#agents-live table").await;

    // Pick the agent, start a session, talk twice.
    let view = open(&client, base, "#/chat").await;
    let select = view.find(Locator::Css("#chat-pick select")).await.unwrap();
    select.select_by_value("talk").await.unwrap();
    wait_for(
        &client,
        "main > .view[data-route=\"#/chat/talk\"] #new-session",
    )
    .await
    .click()
    .await
    .unwrap();
    wait_for(&client, "#chat-form textarea").await;
    check_accessibility(&client, "a new chat").await;
    say(&client, "first message", 1).await;
    say(&client, "second message", 2).await;
    assert_eq!(text_of(&client, "#chat-turns").await, "2", "the turn count");
    let log = text_of(&client, "#chat-log").await;
    for expected in ["You said: first message", "You said: second message"] {
        assert!(log.contains(expected), "{expected} not in:\n{log}");
    }
    // The session is real: the second turn's model request holds the first.
    let second = mock
        .requests()
        .into_iter()
        .find(|r| {
            r.messages()
                .last()
                .is_some_and(|m| m["content"] == "second message")
        })
        .expect("a model request for the second message");
    let said: Vec<(String, String)> = second
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect()
    };
    assert_eq!(
        said,
        pairs(&[
            ("user", "first message"),
            ("assistant", "You said: first message"),
            ("user", "second message"),
        ])
    );

    // Shift+Enter is a new line, not a message.
    let input = wait_for(&client, "#chat-form textarea").await;
    input
        .send_keys("line one\u{E008}\u{E007}\u{E000}line two")
        .await
        .unwrap();
    let value = client
        .execute(
            "return [document.querySelector('#chat-form textarea').value, document.querySelectorAll('#chat-log .msg-user').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(value, json!(["line one\nline two", 2]));
    input.clear().await.unwrap();

    // A tool call waiting for approval, shown inline, approved by a click.
    let input = wait_for(&client, "#chat-form textarea").await;
    input.send_keys("compute 6*7\u{E007}").await.unwrap();
    let approve = wait_for(&client, "#chat-log .approval button.approve").await;
    let tool = text_of(&client, "#chat-log .msg-tool").await;
    assert!(tool.contains("Tool calculator"), "{tool}");
    check_accessibility(&client, "a chat waiting for approval").await;
    screenshot(&client, "dashboard-chat-light.png").await;
    click_fresh(&client, &approve, "#chat-log .approval button.approve").await;
    wait_until(
        &client,
        "the approved turn's answer",
        "return document.querySelector('#chat-status').dataset.finished === 'succeeded' \
         && document.querySelector('#chat-log').textContent.includes('The calculator says 42.')",
    )
    .await;
    let log = text_of(&client, "#chat-log").await;
    assert!(log.contains("Approved by api"), "{log}");
    assert!(log.contains("calculator · ok"), "{log}");

    // A reload reopens the session with its messages.
    let hash = client
        .execute("return location.hash", vec![])
        .await
        .unwrap();
    let hash = hash.as_str().unwrap().to_string();
    let session = hash.rsplit('/').next().unwrap().to_string();
    client.refresh().await.unwrap();
    wait_for(
        &client,
        &format!("main > .view[data-route=\"{hash}\"] #chat-log"),
    )
    .await;
    let log = text_of(&client, "#chat-log").await;
    for expected in [
        "first message",
        "You said: first message",
        "second message",
        "You said: second message",
        "compute 6*7",
        "Tool calculator",
        "The calculator says 42.",
    ] {
        assert!(
            log.contains(expected),
            "{expected} not in the reopened:\n{log}"
        );
    }
    assert!(check_times(&client, "the chat").await >= 1);
    // And from the agent's list of sessions.
    open(&client, base, "#/chat/talk").await;
    let link = wait_for(&client, &format!("main a[href=\"#/chat/talk/{session}\"]")).await;
    assert_eq!(link.text().await.unwrap(), "first message");
    let turns = text_of(&client, "main table tbody tr td").await;
    assert_eq!(turns, "3", "the session's turns");
    check_times(&client, "the sessions").await;

    // The agent's page: triggers, system prompt, prompt, tools, runs, sessions.
    open(&client, base, "#/agent/talk").await;
    let page = text_of(&client, "main").await;
    for expected in [
        "0 6 * * *",
        "Europe/Paris",
        "You are terse.",
        "say hello",
        "calculator",
        "Recent runs",
        "first message",
    ] {
        assert!(
            page.contains(expected),
            "{expected} not on the agent page:\n{page}"
        );
    }
    assert_eq!(text_of(&client, "#agent-system").await, "You are terse.");
    assert!(check_times(&client, "the agent page").await >= 3);
    check_accessibility(&client, "the agent page").await;
    screenshot(&client, "dashboard-agent-light.png").await;

    // The runs list updates live: a run started through the API appears.
    open(&client, base, "#/runs").await;
    let (status, run) = call(
        addr,
        "POST",
        "/v1/agents/talk/runs",
        r#"{"input":"from the API"}"#,
    );
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap();
    wait_for(&client, &format!("#runs-live a[href=\"#/run/{id}\"]")).await;
    assert!(check_times(&client, "the runs").await >= 4);

    // A hanging run cancelled from its page. Counted before it starts: its
    // model request may come before the API's answer does.
    let requests = mock.request_count();
    let (status, run) = call(
        addr,
        "POST",
        "/v1/agents/slow/runs",
        r#"{"input":"hang there"}"#,
    );
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    open(&client, base, &format!("#/run/{id}")).await;
    // The run waits on the model (hanging) before it is cancelled.
    mock.wait_for_requests(requests + 1, STEP).await;
    let cancel = wait_for(&client, "#cancel-run:not([hidden])").await;
    cancel.click().await.unwrap();
    wait_for(&client, "#live[data-finished='cancelled']").await;
    let hidden = client
        .execute(
            "return document.querySelector('#cancel-run').hidden",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(hidden, json!(true), "Cancel stays on an ended run");
    let (status, run) = call(addr, "GET", &format!("/v1/runs/{id}"), "");
    assert_eq!(
        (status, run["state"].as_str()),
        (200, Some("cancelled")),
        "{run}"
    );
    assert!(check_times(&client, "the cancelled run").await >= 3);
    client.close().await.unwrap();
}

#[test]
fn the_chat_page_talks_approves_reopens_and_the_lists_cancel_and_times_work() {
    if !browser_installed() {
        return;
    }
    let mock = MockLlm::start_in_thread();
    mock.set_responder(chat_reply);
    let (dir, addr) = mock_project(&mock);
    let serve = Serve::start_with_env(dir.path(), addr, &[], &[("AURAD_TOKEN", TOKEN)]);
    let (chromedriver, webdriver) = start_chromedriver_with(&[("TZ", "Asia/Tokyo")]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(drive_chat(
        &format!("http://{addr}"),
        addr,
        &webdriver,
        &mock,
    ));
    drop(chromedriver);
    let log = serve.log();
    assert!(!log.contains("refused a request"), "{log}");
}
