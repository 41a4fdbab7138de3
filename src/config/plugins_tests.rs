//! Tests of `plugins.rs`: the accepted shapes, defaults, and one diagnostic
//! with its place for each kind of mistake.

use super::*;

const PARAMS: &str = "parameters:\n  type: object\n  properties:\n    city: { type: string }\n";

fn parse(text: &str) -> (Option<PluginConfig>, Vec<String>) {
    let (p, d) = parse_plugin("weather", Path::new("tools.d/weather.yaml"), text);
    (p, d.iter().map(|d| d.to_string()).collect())
}

fn ok(text: &str) -> PluginConfig {
    let (p, d) = parse(text);
    assert!(d.is_empty(), "{d:?}");
    p.unwrap()
}

fn one_error(text: &str) -> String {
    let (p, d) = parse(text);
    assert!(p.is_none(), "{p:?}");
    assert_eq!(d.len(), 1, "{d:?}");
    d[0].clone()
}

#[test]
fn command_plugin_with_defaults() {
    let p = ok(&format!(
        "description: Weather.\n{PARAMS}command: [python3, weather.py, 5]\nenv: {{ KEY: abc, PORT: 8080 }}\n"
    ));
    assert_eq!(p.name, "weather");
    assert_eq!(p.path, Path::new("tools.d/weather.yaml"));
    assert_eq!(p.timeout, DEFAULT_TIMEOUT);
    assert_eq!(p.parameters["properties"]["city"]["type"], "string");
    let PluginAction::Command { argv, env } = p.action else {
        panic!("not a command");
    };
    assert_eq!(argv, ["python3", "weather.py", "5"]);
    assert_eq!(env["KEY"], "abc");
    assert_eq!(env["PORT"], "8080");
}

#[test]
fn single_string_command_and_timeouts() {
    let p = ok(&format!(
        "description: d\n{PARAMS}command: ./run.sh\ntimeout: 1m30s\n"
    ));
    assert_eq!(p.timeout, Duration::from_secs(90));
    assert!(matches!(p.action, PluginAction::Command { ref argv, .. } if argv == &["./run.sh"]));
    let p = ok(&format!(
        "description: d\n{PARAMS}command: [x]\ntimeout: 2.5\n"
    ));
    assert_eq!(p.timeout, Duration::from_millis(2500));
    for bad in ["1e30", "-1", "0", "[1]"] {
        let d = one_error(&format!(
            "description: d\n{PARAMS}command: [x]\ntimeout: {bad}\n"
        ));
        assert!(d.starts_with("tools.d/weather.yaml:7:10: "), "{bad}: {d}");
    }
}

#[test]
fn http_plugin_defaults_by_method() {
    let p = ok(&format!(
        "description: d\n{PARAMS}http:\n  url: https://api.example.com/w\n  headers: {{ Authorization: Bearer x }}\n"
    ));
    assert_eq!(
        p.action,
        PluginAction::Http {
            method: "POST".into(),
            url: "https://api.example.com/w".into(),
            headers: [("Authorization".to_string(), "Bearer x".to_string())].into(),
            send_as: ArgsIn::Body,
        }
    );
    let p = ok(&format!(
        "description: d\n{PARAMS}http: {{ method: get, url: 'http://127.0.0.1:9/x' }}\n"
    ));
    let PluginAction::Http {
        method, send_as, ..
    } = p.action
    else {
        panic!("not http");
    };
    assert_eq!((method.as_str(), send_as), ("GET", ArgsIn::Query));
}

#[test]
fn unknown_field_lists_valid_ones() {
    let d = one_error(&format!(
        "description: d\n{PARAMS}command: [x]\ntimout: 5s\n"
    ));
    // A field near a known one is named alone.
    assert_eq!(
        d,
        "tools.d/weather.yaml:7:1: unknown field `timout`: did you mean `timeout`?"
    );
    let d = one_error(&format!(
        "description: d\n{PARAMS}http:\n  url: http://h\n  verb: GET\n"
    ));
    assert!(
        d.starts_with("tools.d/weather.yaml:8:3: http: unknown field `verb`"),
        "{d}"
    );
}

#[test]
fn both_or_neither_action() {
    let d = one_error(&format!(
        "description: d\n{PARAMS}command: [x]\nhttp: {{ url: 'http://h' }}\n"
    ));
    assert!(
        d.starts_with("tools.d/weather.yaml:7:7: give either `command`"),
        "{d}"
    );
    let d = one_error(&format!("description: d\n{PARAMS}"));
    assert!(
        d.starts_with("tools.d/weather.yaml:1:1: the tool does nothing"),
        "{d}"
    );
}

#[test]
fn schema_problems_point_at_parameters() {
    let d = one_error("description: d\nparameters:\n  type: string\ncommand: [x]\n");
    assert!(
        d.starts_with("tools.d/weather.yaml:3:9: `parameters` must have `type: object`"),
        "{d}"
    );
    let d = one_error(
        "description: d\nparameters: { type: object, properties: { a: { type: 5 } } }\ncommand: [x]\n",
    );
    assert!(
        d.starts_with(
            "tools.d/weather.yaml:2:54: `parameters` is not a valid JSON Schema at /properties/a/type: "
        ) && d.ends_with("; use a JSON type: object, array, string, number, integer, boolean or null"),
        "{d}"
    );
    let d = one_error("description: d\nparameters: [a]\ncommand: [x]\n");
    assert!(
        d.starts_with("tools.d/weather.yaml:2:13: `parameters` must be"),
        "{d}"
    );
    let d = one_error("description: d\ncommand: [x]\n");
    assert!(d.contains("`parameters` is required"), "{d}");
}

#[test]
fn reports_every_problem_of_a_file() {
    let text = "description: ''\nparameters: { type: object }\ncommand: []\ntimeout: 10q\n";
    let (p, d) = parse(text);
    assert!(p.is_none());
    assert_eq!(d.len(), 3, "{d:?}");
    assert!(
        d[0].starts_with("tools.d/weather.yaml:1:16: `description` is required"),
        "{d:?}"
    );
    assert!(
        d[1].starts_with("tools.d/weather.yaml:4:10: timeout: invalid duration \"10q\""),
        "{d:?}"
    );
    assert!(
        d[2].starts_with("tools.d/weather.yaml:3:10: `command` is empty"),
        "{d:?}"
    );
}

#[test]
fn http_field_problems() {
    let text = format!(
        "description: d\n{PARAMS}http:\n  method: FETCH\n  url: ftp://h/x\n  send_as: form\n  headers: {{ X-Key: [1] }}\nenv: {{ A: b }}\n"
    );
    let (p, d) = parse(&text);
    assert!(p.is_none());
    let joined = d.join("\n");
    assert_eq!(d.len(), 5, "{joined}");
    for needle in [
        ":11:6: `env` applies to `command` tools only",
        ":7:11: http.method \"FETCH\" is not supported",
        ":8:8: http.url \"ftp://h/x\" must be",
        ":9:12: http.send_as \"form\" is not known",
        ":10:21: the value of header `X-Key` must be a string",
    ] {
        assert!(joined.contains(needle), "{needle} in\n{joined}");
    }
}

#[test]
fn command_and_env_types() {
    let d = one_error(&format!("description: d\n{PARAMS}command: [[a]]\n"));
    assert!(d.contains("command[0] is not a string"), "{d}");
    let d = one_error(&format!("description: d\n{PARAMS}command: {{ a: b }}\n"));
    assert!(d.contains("`command` must be a list of strings"), "{d}");
    let d = one_error(&format!(
        "description: d\n{PARAMS}command: [x]\nenv: {{ A: [1] }}\n"
    ));
    assert!(d.starts_with("tools.d/weather.yaml:7:"), "{d}");
    assert!(d.contains("`env.A` must be a string"), "{d}");
}

#[test]
fn empty_file() {
    let d = one_error("# nothing\n");
    assert!(
        d.starts_with("tools.d/weather.yaml:1:1: the tool file is empty"),
        "{d}"
    );
}

#[test]
fn names() {
    assert!(valid_tool_name("get_weather-2"));
    assert!(valid_tool_name("Weather"));
    assert!(!valid_tool_name("bad.name"));
    assert!(!valid_tool_name("bad name"));
    assert!(!valid_tool_name(""));
    assert!(!valid_tool_name(&"a".repeat(65)));
    assert_eq!(suggest_name("bad.name"), "bad_name");
}

#[test]
fn loads_a_directory_and_skips_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let (p, d) = load_plugins(dir.path(), &|_| None);
    assert!(p.is_empty() && d.is_empty(), "no tools.d: {d:?}");
    let tools = dir.path().join(PLUGIN_DIR);
    std::fs::create_dir(&tools).unwrap();
    let good = format!("description: d\n{PARAMS}command: [echo, \"${{WORD}}\"]\n");
    std::fs::write(tools.join("good.yaml"), &good).unwrap();
    std::fs::write(tools.join("good.yml"), &good).unwrap();
    std::fs::write(tools.join("script.sh"), "echo hi\n").unwrap();
    std::fs::write(
        tools.join("local.yaml"),
        format!("description: d\n{PARAMS}command: [script.sh]\n"),
    )
    .unwrap();
    std::fs::write(tools.join("unset.yaml"), "description: ${NOPE}\n").unwrap();
    let env = |name: &str| (name == "WORD").then(|| "hi".to_string());
    let (p, d) = load_plugins(dir.path(), &env);
    let d: Vec<String> = d.iter().map(|d| d.to_string()).collect();
    let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["good", "local"], "{d:?}");
    assert!(matches!(&p[0].action, PluginAction::Command { argv, .. } if argv[1] == "hi"));
    assert_eq!(d.len(), 3, "{d:?}");
    assert!(
        d[0].starts_with("tools.d/good.yml: tool `good` is also defined by tools.d/good.yaml"),
        "{d:?}"
    );
    assert!(
        d[1].starts_with("tools.d/local.yaml:6:10: warning: `script.sh` is looked up in PATH"),
        "{d:?}"
    );
    assert!(d[2].starts_with("tools.d/unset.yaml:1:14: "), "{d:?}");
}
