//! A project whose agents are offered as MCP tools (`aurad mcp serve`,
//! `/mcp` under `aurad serve`), answered by one mock model by what each
//! run asks: `writer` answers text, `summary` (an `output_schema`) answers
//! JSON, `slow` never answers (a run to cancel), `broken` gets a 400 (a
//! failed run). `hidden` exists but `mcp_server.agents` leaves it out.

use std::net::SocketAddr;
use std::path::Path;

use super::mock_llm::{MockLlm, Reply};
use super::serve::{aurad, free_port};

/// The text `writer` answers with.
pub const WRITER_ANSWER: &str = "A short text, written.";
/// The token `aurad serve` of these tests requires.
pub const TOKEN: &str = "mcp-test-token-5f1c";

/// The agents offered, in the order `tools/list` gives them (by name).
pub const OFFERED: [&str; 4] = ["broken", "slow", "summary", "writer"];

/// Writes the project; returns where its `aurad serve` would listen.
pub fn write_project(root: &Path, mock: &MockLlm) -> SocketAddr {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        root.join("aurad.yaml"),
        format!(
            "providers:\n  mock: {{ kind: openai, base_url: \"{}\" }}\nlisten: {addr}\nshutdown_grace: 5s\nmcp_server:\n  agents: [writer, summary, slow, broken]\n",
            mock.base_url()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("agents")).unwrap();
    let agents = [
        (
            "writer",
            "description: Writes short texts.\nmodel: mock/m\nsystem: Be brief.\n",
        ),
        (
            "summary",
            "description: Sums up a text as a title.\nmodel: mock/m\nsystem: Be brief.\noutput_schema:\n  type: object\n  properties:\n    title: { type: string }\n  required: [title]\n",
        ),
        ("slow", "model: mock/m\nsystem: Be brief.\n"),
        (
            "broken",
            "description: Always fails.\nmodel: mock/m\nsystem: Be brief.\n",
        ),
        (
            "hidden",
            "description: Not offered.\nmodel: mock/m\nprompt: hello\n",
        ),
    ];
    for (name, yaml) in agents {
        std::fs::write(root.join(format!("agents/{name}.yaml")), yaml).unwrap();
    }
    mock.set_responder(|request| {
        let asked = request.body.to_string();
        if asked.contains("take your time") {
            Reply::Hang
        } else if asked.contains("response_format") {
            Reply::Text("{\"title\": \"A title\"}".into())
        } else if asked.contains("fail please") {
            Reply::error(400, "the mock refuses this request")
        } else {
            Reply::Text(WRITER_ANSWER.into())
        }
    });
    addr
}

/// The stored runs of `agent`, newest first, as `aurad runs --json` lists
/// them.
pub fn runs_of(root: &Path, agent: &str) -> Vec<serde_json::Value> {
    let out = aurad(root)
        .args(["runs", "--json", "--agent", agent])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", super::serve::show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until run `id` is stored in `state`; returns it.
pub fn wait_stored(root: &Path, agent: &str, id: &str, state: &str) -> serde_json::Value {
    super::serve::poll(
        &format!("run {id} to be stored {state}"),
        || format!("{:#?}", runs_of(root, agent)),
        || {
            runs_of(root, agent)
                .into_iter()
                .find(|r| r["id"] == id && r["state"] == state)
        },
    )
}
