//! Tools get an environment built from an allow-list, not a deny-list
//! (issue "Hardening II", item 7). Twenty secret-looking variables whose
//! names a deny-list of `*_KEY`/`*_TOKEN`/`*PASSWORD` words missed (or
//! would) are planted in the environment of a real `aurad run`; the model
//! has `bash` print its whole environment, plainly and as base64 (how a
//! value-redacted secret used to leave), and a `tools.d` plugin does the
//! same. None of the planted values reaches any of them;
//! the allow-listed variables (`PATH`, `HOME`, the locale, `TZ`) do, and so
//! does the one the agent declares in `pass_env` (to `bash` and to its
//! plugins alike), whose value the run's output then shows redacted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use support::serve::aurad;

const DEADLINE: Duration = Duration::from_secs(30);

/// Planted in aurad's environment; none may reach a tool.
const PLANTED: [(&str, &str); 20] = [
    ("DATABASE_URL", "postgres://u:planted-db-1@db:5432/x"),
    ("REDIS_URL", "redis://:planted-redis-2@cache:6379"),
    ("SLACK_WEBHOOK_URL", "https://hooks.example/planted-slack-3"),
    ("MYSQL_PWD", "planted-mysql-4"),
    ("PGPASS", "planted-pgpass-5"),
    ("GH_PAT", "planted-ghpat-6"),
    ("SENTRY_DSN", "https://planted-sentry-7@sentry.example/1"),
    ("SESSION_COOKIE_SIGNING", "planted-cookie-8"),
    ("OPENAI_API_KEY", "planted-openai-9"),
    ("AWS_SECRET_ACCESS_KEY", "planted-aws-10"),
    ("STRIPE_SK", "planted-stripe-11"),
    ("NPM_AUTH", "planted-npm-12"),
    ("DOCKER_AUTH_CONFIG", "planted-docker-13"),
    ("JWT_SIGNING", "planted-jwt-14"),
    ("SMTP_PASS", "planted-smtp-15"),
    ("PRIVATE_PEM", "planted-pem-16"),
    ("AURAD_TOKEN", "planted-aurad-token-17"),
    ("HF_HUB", "planted-hf-18"),
    ("TWILIO_AUTH", "planted-twilio-19"),
    ("VAULT_ADDR_AND_CRED", "planted-vault-20"),
];

/// Declared by the agent's `pass_env`: its tools get it.
const DECLARED: (&str, &str) = ("DEPLOY_TARGET_REF", "declared-target-value-0451");

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs `aurad run a` with everything planted, the model calling
/// `calls` then answering; the tool results the model was sent, by call id.
async fn tool_results(
    mock: &MockLlm,
    root: &Path,
    calls: Vec<(String, String, String)>,
) -> Vec<(String, String)> {
    mock.push(Reply::ToolCalls(calls));
    mock.push(Reply::Text("done".into()));
    let root = root.to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        let mut command = aurad(&root);
        command.args(["run", "a", "--input", "show me the environment"]);
        for (name, value) in PLANTED {
            command.env(name, value);
        }
        command
            .env(DECLARED.0, DECLARED.1)
            .env("TZ", "Europe/Paris")
            .env("LC_TIME", "C.UTF-8");
        command.output().expect("run aurad run")
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = mock.wait_for_requests(2, DEADLINE).await;
    requests[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn project(mock: &MockLlm) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "aurad.yaml",
        &format!(
            "providers:\n  mock: {{ kind: openai, base_url: \"{}\" }}\n",
            mock.base_url()
        ),
    );
    write(
        root,
        "agents/a.yaml",
        &format!(
            "model: mock/m\nsystem: Be brief.\ntools: [bash, envdump]\npass_env: [{}]\n",
            DECLARED.0
        ),
    );
    write(
        root,
        "tools.d/envdump.yaml",
        "description: Prints its environment.\nparameters: { type: object }\ncommand: [\"sh\", \"-c\", \"env\"]\n",
    );
    dir
}

/// The values and names of `PLANTED` none of which may be in `text`.
fn assert_nothing_planted(what: &str, text: &str) {
    for (name, value) in PLANTED {
        assert!(!text.contains(value), "{what} holds {name}'s value: {text}");
        assert!(
            !text.contains(&format!("{name}=")),
            "{what} holds the variable {name}: {text}"
        );
    }
}

#[tokio::test]
async fn bash_and_plugins_get_the_allow_list_and_what_the_agent_declares() {
    let mock = MockLlm::start().await;
    let dir = project(&mock);
    let sent = tool_results(
        &mock,
        dir.path(),
        vec![
            (
                "c1".into(),
                "bash".into(),
                json!({ "command": "env | sort" }).to_string(),
            ),
            (
                "c2".into(),
                "bash".into(),
                json!({ "command": "env | base64 -w0" }).to_string(),
            ),
            ("c3".into(), "envdump".into(), "{}".into()),
        ],
    )
    .await;
    let result = |id: &str| {
        sent.iter()
            .find(|(call, _)| call == id)
            .map(|(_, content)| content.clone())
            .unwrap_or_else(|| panic!("no result of call {id}: {sent:?}"))
    };
    let (plain, encoded, plugin) = (result("c1"), result("c2"), result("c3"));
    for (what, text) in [("bash's env", &plain), ("the plugin's env", &plugin)] {
        assert_nothing_planted(what, text);
    }
    // The base64 of bash's environment, decoded: what a tool could smuggle
    // past a redactor that looks for values.
    let decoded = std::process::Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(encoded.trim().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let decoded = String::from_utf8_lossy(&decoded.stdout);
    assert!(decoded.contains("PATH="), "{encoded}\n{decoded}");
    assert_nothing_planted("the base64 of bash's environment", &decoded);
    // What tools need to run is there; what the agent declared too, shown
    // redacted (it is the agent's tools' to use, not to print).
    for wanted in [
        "PATH=".to_string(),
        "HOME=".to_string(),
        "TZ=Europe/Paris".to_string(),
        "LC_TIME=C.UTF-8".to_string(),
        format!("{}=[redacted:{}]", DECLARED.0, DECLARED.0),
    ] {
        assert!(
            plain.contains(&wanted),
            "bash's env lacks {wanted}: {plain}"
        );
    }
    assert!(!plain.contains(DECLARED.1), "{plain}");
    // The agent's tools.d plugin is one of its tools: it gets it too.
    assert!(plugin.contains("PATH="), "{plugin}");
    assert!(
        plugin.contains(&format!("{}=[redacted:{}]", DECLARED.0, DECLARED.0)),
        "{plugin}"
    );
}

#[test]
fn a_bad_or_forbidden_pass_env_name_is_located() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "agents/a.yaml",
        "model: test\nprompt: hi\npass_env: [GOOD_NAME, 9bad, AURAD_TOKEN]\n",
    );
    let output = aurad(dir.path()).arg("validate").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("agents/a.yaml:3:23: pass_env: \"9bad\" is not a variable name"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("agents/a.yaml:3:29: pass_env: `AURAD_TOKEN` is the daemon's API credential"),
        "{stderr}"
    );
}

/// Issue #32 item 7: commands that print configuration printed the value
/// of a `${VAR}` interpolated into it (a type error quoting the value, an
/// MCP server's `args` and `url`).
#[test]
fn commands_that_print_configuration_redact_interpolated_secrets() {
    const SECRET: &str = "ghp_planted0secret0value0123456";
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "agents/a.yaml",
        "model: test\nprompt: go\ntemperature: ${GITHUB_TOKEN}\n",
    );
    write(
        root,
        "mcp.json",
        r#"{"mcpServers": {"s": {"command": "aurad-no-such-server", "args": ["--token", "${GITHUB_TOKEN}"]},
            "h": {"url": "http://127.0.0.1:9/mcp?key=${GITHUB_TOKEN}"}}}"#,
    );
    for args in [
        &["validate"][..],
        &["mcp"],
        &["mcp", "--json"],
        &["tools"],
        &["agents"],
    ] {
        let out = aurad(root)
            .args(args)
            .env("GITHUB_TOKEN", SECRET)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains(SECRET),
            "`aurad {args:?}` printed it:\n{text}"
        );
        assert!(
            text.contains("[redacted:GITHUB_TOKEN]"),
            "`aurad {args:?}` shows no trace of the value:\n{text}"
        );
    }
}
