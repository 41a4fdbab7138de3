//! Unit tests of MCP file parsing: aurad's shapes, defaults, and one test
//! per kind of error, each checking the reported place. The editors'
//! dialects are tested on fixtures in `tests/mcp_dialects.rs`.

use super::*;

fn parse(text: &str) -> (Vec<McpServerConfig>, Vec<String>) {
    let (servers, diags) = parse_mcp(Path::new("/proj"), text);
    (servers, diags.iter().map(ToString::to_string).collect())
}

fn only_error(text: &str) -> String {
    let (servers, errors) = parse(text);
    assert!(servers.is_empty(), "unexpected servers: {servers:?}");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().unwrap_or_default()
}

#[test]
fn reads_the_list_shape() {
    let text = r#"{ "servers": [
  { "name": "fs", "transport": "stdio", "command": "npx", "args": ["-y", "srv"],
    "env": {"A": "1"}, "cwd": "data", "startup_timeout": "2s", "call_timeout": 5 },
  { "name": "search", "transport": "http", "url": "http://127.0.0.1:9000/mcp",
    "headers": { "Authorization": "Bearer x" } }
] }"#;
    let (servers, errors) = parse(text);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(servers.len(), 2);
    assert_eq!(
        servers[0],
        McpServerConfig {
            name: "fs".into(),
            transport: McpTransport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "srv".into()],
                env: BTreeMap::from([("A".into(), "1".into())]),
                cwd: PathBuf::from("/proj/data"),
                sandbox: crate::types::SandboxMode::None,
                root: PathBuf::from("/proj"),
                env_file: None,
            },
            startup_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(5),
            source: PathBuf::from("mcp.json"),
            line: 2,
            column: 3,
        }
    );
    assert_eq!(
        servers[1].transport,
        McpTransport::Http {
            url: "http://127.0.0.1:9000/mcp".into(),
            headers: BTreeMap::from([("Authorization".into(), "Bearer x".into())]),
        }
    );
    assert_eq!(servers[1].startup_timeout, DEFAULT_STARTUP_TIMEOUT);
    assert_eq!(servers[1].call_timeout, DEFAULT_CALL_TIMEOUT);
    assert_eq!((servers[1].line, servers[1].column), (4, 3));
}

#[test]
fn reads_the_map_shape_and_infers_the_transport() {
    let text = r#"{"mcpServers": {
  "local": {"command": "./bin/srv", "args": []},
  "remote": {"url": "https://example.com/mcp"},
  "typed": {"type": "streamable-http", "url": "http://x/mcp", "call_timeout": "1m"}
}}"#;
    let (servers, errors) = parse(text);
    assert!(errors.is_empty(), "{errors:?}");
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["local", "remote", "typed"]);
    assert!(matches!(&servers[0].transport,
        McpTransport::Stdio { command, .. } if command == "/proj/./bin/srv"));
    assert!(matches!(servers[1].transport, McpTransport::Http { .. }));
    assert_eq!(servers[2].call_timeout, Duration::from_secs(60));
    assert_eq!((servers[0].line, servers[0].column), (2, 3));
}

#[test]
fn vscode_servers_object_is_read_like_mcp_servers() {
    let (servers, errors) = parse(r#"{"servers": {"a": {"type": "stdio", "command": "x"}}}"#);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(servers[0].name, "a");
}

#[test]
fn empty_document_has_no_servers() {
    assert_eq!(parse("{}"), (Vec::new(), Vec::new()));
    assert_eq!(parse(r#"{"mcpServers": {}}"#), (Vec::new(), Vec::new()));
}

#[test]
fn syntax_errors_have_serde_places() {
    let e = only_error("{\n  \"mcpServers\": {\n    \"a\": {\"command\" \"x\"}\n  }\n}");
    assert!(
        e.starts_with("mcp.json:3:21: invalid JSON: expected `:`"),
        "{e}"
    );
    let e = only_error("");
    assert!(e.starts_with("mcp.json:1:1: invalid JSON: EOF"), "{e}");
}

#[test]
fn a_servers_description_is_a_note_and_keeps_the_server() {
    let (servers, diags) = parse(
        "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"description\": \"Files of the team\"}, \"b\": {\"type\": \"http\", \"url\": \"https://mcp.example.com/mcp\", \"description\": \"Search\"}}}",
    );
    assert!(diags.is_empty(), "{diags:?}");
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn unknown_fields_list_the_valid_ones() {
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"comand\": 1}}}");
    assert!(e.starts_with("mcp.json:1:39: unknown field `comand` in server `a`; valid fields: `type`, `startup_timeout`"), "{e}");
    assert!(
        e.ends_with("`url`, `serverUrl`, `headers`, `disabled`, `enabled`"),
        "{e}"
    );
    let e = only_error("{\"mcpServer\": {}}");
    assert!(
        e.starts_with("mcp.json:1:2: unknown field `mcpServer`"),
        "{e}"
    );
}

#[test]
fn wrong_types_point_at_the_value() {
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": \"-y\"}}}");
    assert_eq!(
        e,
        "mcp.json:1:47: `args` must be an array of strings, got a string"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": [\"a\", 1]}}}");
    assert!(
        e.starts_with("mcp.json:1:53: `args` must contain only strings, got a number"),
        "{e}"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"K\": [1]}}}}");
    assert!(
        e.starts_with("mcp.json:1:52: the value of environment variable `K` must be a string"),
        "{e}"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": 3}}}");
    assert_eq!(e, "mcp.json:1:34: `command` must be a string, got a number");
    let e = only_error("{\"mcpServers\": []}");
    assert!(
        e.starts_with("mcp.json:1:16: `mcpServers` must be an object"),
        "{e}"
    );
    let e =
        only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"call_timeout\": \"soon\"}}}");
    assert!(
        e.starts_with("mcp.json:1:55: `call_timeout`: invalid duration"),
        "{e}"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"startup_timeout\": 0}}}");
    assert!(e.contains("must be more than zero"), "{e}");
}

#[test]
fn missing_and_impossible_combinations() {
    let e = only_error("{\"mcpServers\": {\"a\": {\"args\": []}}}");
    assert!(
        e.starts_with("mcp.json:1:17: server `a` needs `command`"),
        "{e}"
    );
    let e = only_error("{\"servers\": [{\"name\": \"a\", \"transport\": \"http\"}]}");
    assert!(
        e.starts_with("mcp.json:1:14: server `a` is an http server but has no `url`"),
        "{e}"
    );
    let e = only_error(
        "{\"servers\": [{\"name\": \"a\", \"transport\": \"stdio\", \"command\": \"x\", \"url\": \"http://h/\"}]}",
    );
    assert!(
        e.starts_with("mcp.json:1:66: `url` is for http servers, but server `a` is stdio"),
        "{e}"
    );
    let e = only_error(
        "{\"mcpServers\": {\"a\": {\"type\": \"http\", \"url\": \"http://h/\", \"command\": \"x\"}}}",
    );
    assert!(
        e.starts_with("mcp.json:1:59: `command` is for stdio servers, but server `a` is http"),
        "{e}"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"url\": \"http://h/\"}}}");
    assert!(e.contains("has both `command` and `url`"), "{e}");
    let e = only_error("{\"mcpServers\": {\"a\": {\"type\": \"wss\", \"url\": \"http://h/\"}}}");
    assert!(
        e.starts_with("mcp.json:1:31: server `a`: unknown type \"wss\""),
        "{e}"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"type\": \"sse\", \"url\": \"http://h/\"}}}");
    assert!(e.contains("the legacy HTTP+SSE transport"), "{e}");
    let e = only_error(
        "{\"mcpServers\": {\"a\": {\"url\": \"http://h/\", \"serverUrl\": \"http://h/\"}}}",
    );
    assert!(e.contains("has both `url` and `serverUrl`"), "{e}");
    let e = only_error(
        "{\"mcpServers\": {\"a\": {\"type\": \"http\", \"transportType\": \"http\", \"url\": \"http://h/\"}}}",
    );
    assert!(e.contains("has both `type` and `transportType`"), "{e}");
    let e = only_error(
        "{\"context_servers\": {\"a\": {\"command\": {\"path\": \"x\", \"args\": []}, \"args\": []}}}",
    );
    assert!(
        e.contains("gives `args` both inside `command` and beside it"),
        "{e}"
    );
    let e = only_error("{\"mcpServers\": {\"a\": {\"url\": \"ftp://h/\"}}}");
    assert!(e.contains("is not an http:// or https:// URL"), "{e}");
    let e = only_error(
        "{\"mcpServers\": {\"a\": {\"url\": \"http://h/\", \"headers\": {\"Accept\": \"x\"}}}}",
    );
    assert!(
        e.contains("header `Accept` is set by the MCP transport itself"),
        "{e}"
    );
    let e = only_error(
        "{\"mcpServers\": {\"a\": {\"url\": \"http://h/\", \"headers\": {\"a b\": \"x\"}}}}",
    );
    assert!(e.contains("\"a b\" is not a valid header name"), "{e}");
}

#[test]
fn names_must_be_usable_and_unique() {
    let text = "{\"servers\": [\n {\"name\": \"a\", \"command\": \"x\"},\n {\"name\": \"a\", \"command\": \"y\"},\n {\"name\": \"b.c\", \"command\": \"z\"},\n {\"command\": \"w\"},\n {\"name\": \"b_c\", \"command\": \"v\"}\n]}";
    let (servers, errors) = parse(text);
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b_c"]);
    assert_eq!(
        errors,
        [
            "mcp.json:3:11: server name `a` is used twice (first on line 2); rename or remove one",
            "mcp.json:4:11: warning: server name \"b.c\" has characters tool names cannot: aurad calls it `b_c` (its tools are `b_c_<tool>`)",
            "mcp.json:5:2: this server has no `name`; add `\"name\": \"...\"` (letters, digits, `_`, `-`)",
            "mcp.json:6:11: server name `b_c` is used twice (first on line 4); rename or remove one",
        ]
    );
    let text = "{\"mcpServers\": {\"a\": {\"command\": \"x\"}, \"a\": {\"command\": \"y\"}}}";
    let (servers, errors) = parse(text);
    assert_eq!(servers.len(), 1);
    assert_eq!(
        errors,
        ["mcp.json:1:40: server name `a` is used twice (first on line 1); rename or remove one"]
    );
}

#[test]
fn both_top_level_keys_is_an_error() {
    let (servers, errors) = parse("{\"servers\": [], \"mcpServers\": {}}");
    assert!(servers.is_empty());
    assert_eq!(
        errors,
        [
            "mcp.json:1:17: both `servers` and `mcpServers` are present; put every server under one of them"
        ]
    );
}

#[test]
fn a_bad_server_does_not_hide_the_good_ones() {
    let text = "{\"mcpServers\": {\"good\": {\"command\": \"x\"}, \"bad\": {\"command\": 1}}}";
    let (servers, errors) = parse(text);
    assert_eq!(servers.len(), 1);
    assert_eq!(errors.len(), 1);
}

#[test]
fn variables_expand_per_value_and_break_only_their_server() {
    let dir = std::env::temp_dir().join(format!("aurad-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mcp.json"),
        "{\"mcpServers\": {\"s\": {\"url\": \"http://h/\", \"headers\": {\"Authorization\": \"Bearer ${TOKEN}\"}},\n \"t\": {\"command\": \"x\"}}}",
    )
    .unwrap();
    let env = |name: &str| (name == "TOKEN").then(|| "a\"b".to_string());
    let (servers, errors) = load_mcp(&dir, &env);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(matches!(&servers[0].transport,
        McpTransport::Http { headers, .. } if headers["Authorization"] == "Bearer a\"b"));
    let none = |_: &str| None;
    let (servers, errors) = load_mcp(&dir, &none);
    assert_eq!(servers.len(), 1, "the other server is kept");
    assert_eq!(
        errors[0].to_string(),
        "mcp.json:1:80: environment variable TOKEN is not set (`${TOKEN}`); set it, or write ${TOKEN:-default}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(load_mcp(&dir, &none), (Vec::new(), Vec::new()));
}

#[test]
fn a_variable_cannot_change_the_structure() {
    let text = "{\"mcpServers\": {\"s\": {\"command\": \"x\", \"args\": [\"${V}\"]}}}";
    let env = |_: &str| Some("\", \"--evil".to_string());
    let (servers, errors) = parse_mcp_file(Path::new("/p"), Path::new("mcp.json"), text, &env);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(matches!(&servers[0].transport,
        McpTransport::Stdio { args, .. } if args == &["\", \"--evil"]));
}

#[test]
fn jsonc_comments_and_trailing_commas_are_read_and_places_stay() {
    // VS Code's and Zed's files are JSONC.
    let text = "{\n  // servers of this workspace\n  \"servers\": {\n    /* the good one */ \"a\": {\"command\": \"x\",},\n    \"b\": {\"command\": 5},\n  },\n}\n";
    let (servers, errors) = parse(text);
    assert_eq!(servers.len(), 1, "{errors:?}");
    assert_eq!(servers[0].name, "a");
    assert_eq!(errors.len(), 1, "{errors:?}");
    // The error of `b` is placed on its own line of the original text.
    assert!(errors[0].starts_with("mcp.json:5:22:"), "{}", errors[0]);
    // Plain JSON is left as it is, `//` inside strings included.
    assert_eq!(blank_jsonc("{\"a\": \"//x\"}"), "{\"a\": \"//x\"}");
}
