//! Webhooks from real senders, end to end through a real daemon on
//! loopback: GitHub's documented signature test vector, a GitHub delivery
//! in form mode, GitHub's `ping`, a Stripe delivery (`signature: stripe`)
//! a generic HMAC sender, GitLab (`X-Gitlab-Token`) and Slack (v0
//! signatures, `url_verification`), and requests from a sender the agent
//! was not set up for, with what each run's templates see
//! (`{{ payload }}` as JSON, `{{ event }}`, `{{ headers.X }}`). The
//! deliveries are committed in `tests/fixtures/webhooks/`, signed with
//! Python's hmac module, not with aurad's code.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use support::daemon::{Api, json_of, sign};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

/// A delivery as committed: the secret it was signed with, the raw body
/// and the headers sent.
#[derive(serde::Deserialize)]
struct Delivery {
    secret: String,
    body: String,
    headers: serde_json::Map<String, Value>,
}

fn fixture(name: &str) -> Delivery {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/webhooks")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A daemon whose project has agent `name` defined by `yaml` (its webhook
/// secret in `SECRET_VAR` = `secret`), and the mock LLM answering its first
/// run with `answer`. The runs API needs the token `tok`.
async fn start(
    name: &str,
    yaml: &str,
    secret: &str,
    answer: &str,
) -> (MockLlm, tempfile::TempDir, Api) {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text(answer.into()));
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: x\n");
    std::fs::write(dir.path().join("agents").join(format!("{name}.yaml")), yaml).unwrap();
    let api = Api::start(
        dir.path(),
        &[
            ("SECRET_VAR", secret),
            ("AURAD_TOKEN", "tok-long-enough-000"),
        ],
    )
    .await;
    (mock, dir, api)
}

/// POSTs `body` with `headers` to `/hooks/{agent}`: (status, JSON answer).
async fn post(api: &Api, agent: &str, headers: &[(String, String)], body: &[u8]) -> (u16, Value) {
    let mut request = api
        .client
        .post(api.url(&format!("/hooks/{agent}")))
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    json_of(request.send().await.unwrap()).await
}

fn headers_of(delivery: &Delivery) -> Vec<(String, String)> {
    delivery
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// Waits for run `id` to end (with a token, as the runs API needs one).
async fn finished(api: &mut Api, id: &Value) -> Value {
    api.token = Some("tok-long-enough-000".into());
    let run = api.wait_run(id.as_str().unwrap()).await;
    api.token = None;
    run
}

/// The template that shows what a webhook run's templates see.
const SHOW: &str = "prompt: \"event={{ event }} agent={{ headers['User-Agent'] }} id={{ headers.x_github_delivery }} title={{ payload.issue.title }} payload={{ payload }} headers={{ headers }}\"\n";

#[tokio::test]
async fn github_signed_deliveries_in_json_and_form_mode_and_ping() {
    let vector = fixture("github-docs-test-vector");
    let form = fixture("github-issues-form");
    let ping = fixture("github-ping");
    assert_eq!(vector.secret, form.secret);
    let (mock, _dir, mut api) = start(
        "triage",
        &format!(
            "model: mock/m
{SHOW}webhook: {{ secret_env: SECRET_VAR }}
"
        ),
        &vector.secret,
        "triaged",
    )
    .await;

    // GitHub's own test vector: the signature passes (the body, not JSON,
    // is then refused with 400); one changed byte is refused with 401.
    let mut headers = headers_of(&vector);
    headers.push(("X-GitHub-Delivery".into(), "vector-1".into()));
    let (status, answer) = post(&api, "triage", &headers, vector.body.as_bytes()).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("must be JSON"),
        "{answer}"
    );
    let (status, answer) = post(&api, "triage", &headers, b"Hello, World?").await;
    assert_eq!(status, 401, "{answer}");

    // `ping`: 200, no run.
    let (status, answer) = post(&api, "triage", &headers_of(&ping), ping.body.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({ "ping": true, "agent": "triage" }));
    // A ping with a bad signature is still refused.
    let (status, _) = post(&api, "triage", &headers_of(&ping), b"{}").await;
    assert_eq!(status, 401);

    // Form mode: the JSON in the `payload` field; the signature over the
    // form body as sent.
    let (status, run) = post(&api, "triage", &headers_of(&form), form.body.as_bytes()).await;
    assert_eq!(status, 202, "{run}");
    let input = run["input"].as_str().unwrap();
    assert!(
        input.starts_with(
            "event=issues agent=GitHub-Hookshot/044aadd id=72d3162e-cc78-11e3-81ab-4c9367dc0958 title=Found a bug payload="
        ),
        "{input}"
    );
    // `{{ payload }}` is the JSON itself, not a Python-like rendering.
    let payload_text = input
        .split(" payload=")
        .nth(1)
        .unwrap()
        .split(" headers=")
        .next()
        .unwrap();
    let payload: Value =
        serde_json::from_str(payload_text).unwrap_or_else(|e| panic!("{e}: {payload_text}"));
    assert_eq!(payload["issue"]["milestone"], Value::Null);
    assert_eq!(payload["issue"]["labels"][0]["name"], "bug");
    // `{{ headers }}` leaves the signatures out.
    let headers_text = input.split(" headers=").nth(1).unwrap();
    let shown: Value = serde_json::from_str(headers_text).unwrap();
    assert_eq!(shown["x-github-hook-id"], "292430182");
    assert!(
        shown.get("x-hub-signature-256").is_none() && shown.get("x-hub-signature").is_none(),
        "{shown}"
    );
    let done = finished(&mut api, &run["id"]).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(mock.request_count(), 1);

    // The same delivery again is not run again.
    let (status, answer) = post(&api, "triage", &headers_of(&form), form.body.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["duplicate"], true);

    // A form without `payload` says what it lacks.
    let body = b"action=opened";
    let mut headers = headers_of(&form);
    headers.retain(|(k, _)| k != "X-Hub-Signature-256" && k != "X-GitHub-Delivery");
    headers.push(("X-Hub-Signature-256".into(), sign(&form.secret, body)));
    headers.push(("X-GitHub-Delivery".into(), "form-2".into()));
    let (status, answer) = post(&api, "triage", &headers, body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("field `payload`"),
        "{answer}"
    );
    api.stop().await;
    assert_eq!(mock.request_count(), 1);
}

/// `Stripe-Signature` of `body` at time `t` under `secret`.
fn stripe_sign(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test]
async fn stripe_deliveries_with_signature_stripe() {
    let stripe = fixture("stripe-invoice-paid");
    let (mock, _dir, mut api) = start(
        "billing",
        "model: mock/m
prompt: \"{{ event }}: {{ payload.data.object.amount_paid }} {{ payload.data.object.currency }}\"
webhook: { secret_env: SECRET_VAR, signature: stripe }
",
        &stripe.secret,
        "noted",
    )
    .await;
    let body = stripe.body.as_bytes();

    // The committed delivery is signed right, but long ago: a replay.
    let (status, answer) = post(&api, "billing", &headers_of(&stripe), body).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("t=1767225600 is"),
        "{answer}"
    );

    let fresh = |t: i64, secret: &str| {
        let mut headers = headers_of(&stripe);
        headers.retain(|(k, _)| k != "Stripe-Signature");
        headers.push(("Stripe-Signature".into(), stripe_sign(secret, t, body)));
        headers
    };
    let now = chrono::Utc::now().timestamp();
    let (status, answer) = post(&api, "billing", &fresh(now, "whsec_other"), body).await;
    assert_eq!(status, 401, "{answer}");
    // A GitHub-style signature is not accepted for a Stripe webhook.
    let github = vec![
        (
            "X-Hub-Signature-256".to_string(),
            sign(&stripe.secret, body),
        ),
        ("X-GitHub-Delivery".to_string(), "g-1".to_string()),
    ];
    let (status, answer) = post(&api, "billing", &github, body).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("looks like a GitHub (or Gitea, Forgejo) delivery (X-Hub-Signature-256), but this agent's webhook expects Stripe-Signature (`stripe`)"),
        "{answer}"
    );
    assert_eq!(mock.request_count(), 0);

    // Signed now: runs once; the event id is the delivery id, so Stripe's
    // retry of the same event (a new t, a new signature) is not run again.
    let (status, run) = post(&api, "billing", &fresh(now, &stripe.secret), body).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["input"], "invoice.paid: 2000 usd");
    let done = finished(&mut api, &run["id"]).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let (status, answer) = post(&api, "billing", &fresh(now + 5, &stripe.secret), body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({ "duplicate": true, "delivery": "evt_1QxYzA2eZvKYlo2C0aBcDeFg" })
    );
    api.stop().await;
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn a_generic_hmac_sender_with_its_own_event_header() {
    const SECRET: &str = "generic-sender-secret";
    let (mock, _dir, mut api) = start(
        "deploys",
        "model: mock/m
prompt: \"{{ event }} by {{ headers.USER_AGENT }} [{{ headers.authorization }}]: {{ payload.services }}\"
webhook: { secret_env: SECRET_VAR }
",
        SECRET,
        "deployed",
    )
    .await;
    // What a script would send: `openssl dgst -sha256 -hmac` of the body.
    let body = br#"{"services": ["api", "web"], "version": "1.4.2"}"#;
    let headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("User-Agent".to_string(), "deploy-bot/2".to_string()),
        (
            "Authorization".to_string(),
            "Bearer not-for-the-model".to_string(),
        ),
        ("X-Event-Type".to_string(), "deploy.finished".to_string()),
        ("X-Delivery-Id".to_string(), "dep-77".to_string()),
        ("X-Hub-Signature-256".to_string(), sign(SECRET, body)),
    ];
    let (status, run) = post(&api, "deploys", &headers, body).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(
        run["input"],
        r#"deploy.finished by deploy-bot/2 []: ["api","web"]"#
    );
    let done = finished(&mut api, &run["id"]).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    api.stop().await;
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn gitlab_deliveries_with_their_token_run_once_per_idempotency_key() {
    const TOKEN: &str = "gitlab-hook-secret-token";
    let (mock, _dir, mut api) = start(
        "ci",
        "model: mock/m
prompt: \"{{ event }}: {{ payload.object_kind }} to {{ payload.ref }}\"
webhook: { secret_env: SECRET_VAR, signature: [github, gitlab] }
",
        TOKEN,
        "seen",
    )
    .await;
    // As GitLab sends a push event (docs.gitlab.com, webhook events).
    let body = br#"{"object_kind":"push","ref":"refs/heads/main","project":{"path_with_namespace":"g/p"}}"#;
    let headers = |token: &str, key: &str| {
        vec![
            ("Content-Type".to_string(), "application/json".to_string()),
            ("X-Gitlab-Event".to_string(), "Push Hook".to_string()),
            ("X-Gitlab-Token".to_string(), token.to_string()),
            (
                "X-Gitlab-Instance".to_string(),
                "https://gitlab.example.com".to_string(),
            ),
            ("Idempotency-Key".to_string(), key.to_string()),
        ]
    };
    let (status, answer) = post(&api, "ci", &headers("wrong", "k-1"), body).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("X-Gitlab-Token does not match"),
        "{answer}"
    );
    let (status, run) = post(&api, "ci", &headers(TOKEN, "k-1"), body).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["input"], "Push Hook: push to refs/heads/main");
    let done = finished(&mut api, &run["id"]).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    // GitLab retrying the same event keeps its Idempotency-Key.
    let (status, answer) = post(&api, "ci", &headers(TOKEN, "k-1"), body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({ "duplicate": true, "delivery": "k-1" }));
    // The same agent still takes GitHub's signature.
    mock.push(Reply::Text("seen again".into()));
    let github = vec![
        ("X-Hub-Signature-256".to_string(), sign(TOKEN, body)),
        ("X-GitHub-Event".to_string(), "push".to_string()),
        ("X-GitHub-Delivery".to_string(), "gh-9".to_string()),
    ];
    let (status, run) = post(&api, "ci", &github, body).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["input"], "push: push to refs/heads/main");
    finished(&mut api, &run["id"]).await;
    api.stop().await;
    assert_eq!(mock.request_count(), 2);
}

fn slack_sign(secret: &str, ts: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test]
async fn slack_requests_with_v0_signatures_and_the_url_verification_challenge() {
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    let (mock, _dir, mut api) = start(
        "slackbot",
        "model: mock/m
prompt: \"{{ event }} from {{ payload.event.user }}: {{ payload.event.text }}\"
webhook: { secret_env: SECRET_VAR, signature: slack }
",
        SECRET,
        "answered",
    )
    .await;
    let now = chrono::Utc::now().timestamp();
    let signed = |ts: i64, body: &[u8]| {
        vec![
            ("Content-Type".to_string(), "application/json".to_string()),
            ("X-Slack-Request-Timestamp".to_string(), ts.to_string()),
            (
                "X-Slack-Signature".to_string(),
                slack_sign(SECRET, ts, body),
            ),
        ]
    };
    // Slack checks the endpoint with a challenge before sending events.
    let challenge = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let (status, answer) = post(&api, "slackbot", &signed(now, challenge), challenge).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    let event = br#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention","user":"U061F7AUR","text":"deploy please","channel":"C0LAN2Q65"}}"#;
    // Signed six minutes ago: a replay.
    let (status, answer) = post(&api, "slackbot", &signed(now - 360, event), event).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("X-Slack-Request-Timestamp"),
        "{answer}"
    );
    let mut forged = signed(now, event);
    forged[2].1 = slack_sign("other-secret", now, event);
    let (status, _) = post(&api, "slackbot", &forged, event).await;
    assert_eq!(status, 401);
    let (status, run) = post(&api, "slackbot", &signed(now, event), event).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["input"], "app_mention from U061F7AUR: deploy please");
    finished(&mut api, &run["id"]).await;
    // Slack's retry (X-Slack-Retry-Num) keeps the event_id.
    let mut retry = signed(now + 2, event);
    retry.push(("X-Slack-Retry-Num".to_string(), "1".to_string()));
    let (status, answer) = post(&api, "slackbot", &retry, event).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["duplicate"], true);
    api.stop().await;
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn a_request_from_a_sender_the_agent_does_not_expect_is_named() {
    let (mock, _dir, api) = start(
        "gh",
        "model: mock/m\nprompt: x\nwebhook: { secret_env: SECRET_VAR }\n",
        "s",
        "never",
    )
    .await;
    let body = br#"{"object_kind":"push"}"#;
    let gitlab = vec![
        ("X-Gitlab-Event".to_string(), "Push Hook".to_string()),
        ("X-Gitlab-Token".to_string(), "s".to_string()),
    ];
    let (status, answer) = post(&api, "gh", &gitlab, body).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(
        answer["error"],
        "this request looks like a GitLab delivery (X-Gitlab-Token), but this agent's webhook expects X-Hub-Signature-256 (`github`): add `gitlab` to `webhook.signature` (a list takes several), or sign it as expected"
    );
    let (status, answer) = post(&api, "gh", &[], body).await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("no signature header of a known sender"),
        "{answer}"
    );
    api.stop().await;
    assert_eq!(mock.request_count(), 0);
}
