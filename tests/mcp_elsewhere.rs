//! MCP files as other editors leave them, through the real binary: with
//! only Cursor's, Roo Code's, Zed's or VS Code's own file present, `aurad
//! mcp` and `aurad validate` name each one at its place and say how to use
//! it instead of a bare "no MCP servers"; VS Code's settings.json shape in
//! an MCP file is explained at its place; and an HTTP server that refuses
//! the connection gets aurad's located message without rmcp's raw
//! `reqwest::Error` debug line.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use std::path::Path;

use support::serve::{free_port, run, show, text};

/// A project with `files` (relative path, text) and an empty agents/.
fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    for (path, body) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    dir
}

/// `aurad mcp` and `aurad validate` of `root`: their stderr.
fn both(root: &Path) -> [String; 2] {
    ["mcp", "validate"].map(|command| {
        let out = run(root, &[command]);
        assert_eq!(out.status.code(), Some(0), "{command}: {}", show(&out));
        text(&out.stderr)
    })
}

const CURSOR: &str = "{\n  \"mcpServers\": {\n    \"fs\": { \"command\": \"npx\", \"args\": [\"-y\", \"x\"] }\n  }\n}\n";

#[test]
fn cursor_and_roo_files_are_named_with_the_symlink_that_shares_them() {
    for (file, editor) in [
        (".cursor/mcp.json", "Cursor"),
        (".roo/mcp.json", "Roo Code"),
    ] {
        let dir = project(&[(file, CURSOR)]);
        for err in both(dir.path()) {
            assert!(
                err.contains(&format!(
                    "{file}:2:3: warning: {editor}'s MCP servers, which aurad does not read (it reads the first of mcp.json, .mcp.json, .vscode/mcp.json, and none exists)"
                )),
                "{err}"
            );
            assert!(err.contains(&format!("`ln -s {file} mcp.json`")), "{err}");
        }
        let err = &both(dir.path())[0];
        assert!(
            err.contains("no MCP servers: aurad reads mcp.json, .mcp.json, .vscode/mcp.json; the other editors' files named above"),
            "{err}"
        );
        // The fix it gives works: the servers are then read.
        std::os::unix::fs::symlink(file, dir.path().join("mcp.json")).unwrap();
        let out = run(dir.path(), &["validate"]);
        assert!(out.status.success(), "{}", show(&out));
        assert!(
            text(&out.stderr).contains("MCP servers: 1 from mcp.json"),
            "{}",
            show(&out)
        );
        assert!(
            !text(&out.stderr).contains("does not read"),
            "{}",
            show(&out)
        );
    }
}

#[test]
fn zed_and_vscode_settings_are_named_only_when_they_hold_servers() {
    let zed = "// Zed settings\n{\n  \"theme\": \"One Dark\",\n  \"context_servers\": {\n    \"fs\": { \"command\": \"npx\", \"args\": [] },\n  },\n}\n";
    let vscode = "{\n  \"editor.tabSize\": 2,\n  \"mcp\": { \"servers\": { \"fs\": { \"command\": \"npx\" } } }\n}\n";
    let dir = project(&[
        (".zed/settings.json", zed),
        (".vscode/settings.json", vscode),
    ]);
    let [mcp, validate] = both(dir.path());
    for err in [&mcp, &validate] {
        assert!(
            err.contains(
                ".zed/settings.json:4:3: warning: Zed's MCP servers, which aurad does not read"
            ),
            "{err}"
        );
        assert!(
            err.contains(
                "copy the `context_servers` object into mcp.json as `{\"context_servers\": {...}}`"
            ),
            "{err}"
        );
        assert!(
            err.contains(".vscode/settings.json:3:3: warning: VS Code's MCP servers, which aurad does not read"),
            "{err}"
        );
        assert!(
            err.contains("move what is inside `mcp` there, `{\"servers\": {...}}`"),
            "{err}"
        );
    }
    // Settings files without servers are nobody's business.
    let dir = project(&[
        (".zed/settings.json", "{\"theme\": \"One Dark\"}"),
        (".vscode/settings.json", "{\"editor.tabSize\": 2}"),
    ]);
    let [mcp, validate] = both(dir.path());
    assert!(
        !mcp.contains("does not read") && !validate.contains("does not read"),
        "{mcp}\n{validate}"
    );
    assert!(mcp.contains("no MCP servers: add them to"), "{mcp}");
}

#[test]
fn vscode_settings_shape_in_an_mcp_file_is_explained_at_its_place() {
    let text_ = "{\n  \"mcp\": {\n    \"servers\": { \"fs\": { \"command\": \"npx\" } }\n  }\n}\n";
    for file in ["mcp.json", ".vscode/mcp.json"] {
        let dir = project(&[(file, text_)]);
        let out = run(dir.path(), &["validate"]);
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "{file}:2:3: unknown field `mcp`: `{{\"mcp\": {{\"servers\": {{...}}}}}}` is the shape of VS Code's settings.json; an MCP file holds the servers at its top: write `{{\"servers\": {{...}}}}`"
            )),
            "{err}"
        );
    }
}

#[test]
fn a_refused_http_server_gets_aurads_message_without_rmcps_debug_line() {
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let dir = project(&[(
        "mcp.json",
        &format!("{{\"mcpServers\": {{\"web\": {{\"type\": \"http\", \"url\": \"{url}\"}}}}}}"),
    )]);
    let out = run(dir.path(), &["mcp"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        all.contains(&format!("web  failed: cannot connect to {url}"))
            && all.contains("is the server running?"),
        "{}",
        show(&out)
    );
    for noise in ["reqwest::Error", "rmcp::", "hyper_util::"] {
        assert!(!all.contains(noise), "{noise} in\n{}", show(&out));
    }
    // -vv asks for everything, the dependencies' lines too.
    let out = run(dir.path(), &["-vv", "mcp"]);
    assert!(
        text(&out.stderr).contains("reqwest::Error"),
        "{}",
        show(&out)
    );
}
