//! The malformed-file corpus of `tests/fixtures/malformed/`: every file,
//! put at its place in a fresh project (`agent/X.yaml` -> `agents/X.yaml`,
//! `skill/X.md` -> `skills/X/SKILL.md`, `tools.d/X.yaml` -> `tools.d/X.yaml`,
//! `channel/X.yaml` -> `channels/X.yaml`,
//! `mcp/X.json` -> `mcp.json`, `settings/X.yaml` -> `aurad.yaml`), makes the
//! load report an error at the place and with the message fragment of its
//! `X.expect` (first line `LINE:COLUMN`, or `file` for a whole-file error;
//! second line the fragment), and never panics. Generated attacks too (10 MB
//! and 200 KB nested files, a FIFO, `/dev/zero`), BOM and CRLF files that
//! must load, and a real `aurad serve` that keeps serving the previous
//! version while bad files are written over good ones.
//!
//! `AURAD_BLESS=1 cargo test --test malformed` writes missing `.expect`
//! files from what the load reports (review them before committing).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aurad::config::{self, Diagnostic};
use aurad::registry;
use support::mock_llm::{MockLlm, Reply};
use support::serve::{Serve, http_get, http_post_json, poll, write_settings};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/malformed");

/// Where a corpus file goes in a project, by its corpus folder.
fn destination(kind: &str, stem: &str) -> PathBuf {
    match kind {
        "agent" => PathBuf::from(format!("agents/{stem}.yaml")),
        "skill" => PathBuf::from(format!("skills/{stem}/SKILL.md")),
        "tools.d" => PathBuf::from(format!("tools.d/{stem}.yaml")),
        "channel" => PathBuf::from(format!("channels/{stem}.yaml")),
        "mcp" => PathBuf::from("mcp.json"),
        "settings" => PathBuf::from("aurad.yaml"),
        other => panic!("unknown corpus folder {other}"),
    }
}

struct Case {
    /// `kind/file`, for messages.
    name: String,
    source: PathBuf,
    /// Relative to the project root.
    dest: PathBuf,
    expect: PathBuf,
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    for kind in ["agent", "skill", "tools.d", "channel", "mcp", "settings"] {
        let dir = Path::new(CORPUS).join(kind);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e != "expect"))
            .collect();
        files.sort();
        for source in files {
            let stem = source.file_stem().unwrap().to_str().unwrap().to_string();
            cases.push(Case {
                name: format!("{kind}/{}", source.file_name().unwrap().to_str().unwrap()),
                dest: destination(kind, &stem),
                expect: dir.join(format!("{stem}.expect")),
                source,
            });
        }
    }
    cases
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// Loads the project at `root` as `aurad validate` does: every diagnostic.
fn diagnostics(root: &Path) -> Vec<Diagnostic> {
    let loaded = config::load(root, &no_env);
    let (_, diagnostics) = registry::build(loaded, &no_env);
    diagnostics
}

/// A project holding `bytes` at `dest` (parents created).
fn project_with(dest: &Path, bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(dest);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    dir
}

/// The expected place (`None`: the whole file) and message fragment.
fn read_expect(path: &Path) -> Option<(Option<(usize, usize)>, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let place = lines.next()?.trim();
    let fragment = lines.next()?.trim().to_string();
    let place = (place != "file").then(|| {
        let (line, column) = place.split_once(':').expect("LINE:COLUMN or file");
        (line.parse().unwrap(), column.parse().unwrap())
    });
    Some((place, fragment))
}

fn place_of(d: &Diagnostic) -> Option<(usize, usize)> {
    (d.line > 0).then_some((d.line, d.column))
}

fn shown(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| format!("  {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_corpus_file_fails_with_a_located_error_and_no_panic() {
    let cases = corpus();
    assert!(cases.len() >= 60, "the corpus has {} files", cases.len());
    let bless = std::env::var_os("AURAD_BLESS").is_some();
    let mut failures = Vec::new();
    for case in &cases {
        let bytes = std::fs::read(&case.source).unwrap();
        let dir = project_with(&case.dest, &bytes);
        let started = Instant::now();
        let diags = match catch_unwind(AssertUnwindSafe(|| diagnostics(dir.path()))) {
            Ok(diags) => diags,
            Err(_) => {
                failures.push(format!("{}: the load panicked", case.name));
                continue;
            }
        };
        let elapsed = started.elapsed();
        let errors: Vec<Diagnostic> = diags
            .iter()
            .filter(|d| d.is_error() && d.path == case.dest)
            .cloned()
            .collect();
        let Some((place, fragment)) = read_expect(&case.expect) else {
            if bless && let Some(first) = errors.first() {
                let place = place_of(first)
                    .map(|(l, c)| format!("{l}:{c}"))
                    .unwrap_or_else(|| "file".into());
                std::fs::write(&case.expect, format!("{place}\n{}\n", first.message)).unwrap();
                eprintln!("blessed {}: {first}", case.name);
            } else {
                failures.push(format!(
                    "{}: no {} (errors:\n{})",
                    case.name,
                    case.expect.display(),
                    shown(&diags)
                ));
            }
            continue;
        };
        let found = errors
            .iter()
            .any(|d| place_of(d) == place && d.message.contains(&fragment));
        if !found {
            failures.push(format!(
                "{}: expected an error at {place:?} containing {fragment:?}; got:\n{}",
                case.name,
                shown(&diags)
            ));
        }
        // Not a timing assertion: just shown, so a slow file stands out.
        if elapsed > Duration::from_secs(1) {
            eprintln!("{} took {elapsed:?}", case.name);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus files failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Loads a one-file project and returns its diagnostics and how long the
/// load took (shown, never asserted).
fn load_one(dest: &str, bytes: &[u8]) -> (Vec<Diagnostic>, Duration) {
    let dir = project_with(Path::new(dest), bytes);
    let started = Instant::now();
    let diags = diagnostics(dir.path());
    let elapsed = started.elapsed();
    eprintln!("{dest} ({} bytes): {elapsed:?}", bytes.len());
    (diags, elapsed)
}

fn assert_error(diags: &[Diagnostic], dest: &str, place: Option<(usize, usize)>, fragment: &str) {
    assert!(
        diags.iter().any(|d| d.is_error()
            && d.path == Path::new(dest)
            && place_of(d) == place
            && d.message.contains(fragment)),
        "expected {dest} at {place:?}: {fragment:?}; got:\n{}",
        shown(diags)
    );
}

#[test]
fn a_10_mb_file_is_refused_by_its_size_before_it_is_read() {
    let mut huge = b"model: test\nprompt: hi\ndescription: \"".to_vec();
    huge.resize(10 * 1024 * 1024, b'x');
    huge.extend_from_slice(b"\"\n");
    let len = huge.len();
    for dest in [
        "agents/a.yaml",
        "tools.d/t.yaml",
        "mcp.json",
        "aurad.yaml",
        "skills/s/SKILL.md",
    ] {
        let (diags, _) = load_one(dest, &huge);
        assert_error(
            &diags,
            dest,
            None,
            &format!("the file is {len} bytes, the limit is 1048576 bytes"),
        );
    }
}

#[test]
fn a_200_kb_nested_file_fails_at_the_first_level_too_deep() {
    // The file: it took over 60 s and blocked the reloader.
    let yaml = format!(
        "model: test\nprompt: hi\ntools: {}\n",
        "[".repeat(200 * 1024)
    );
    let (diags, _) = load_one("agents/a.yaml", yaml.as_bytes());
    // `tools:` is level 1; the 64th `[` opens level 65, at column 8 + 63.
    assert_error(
        &diags,
        "agents/a.yaml",
        Some((3, 71)),
        "nested more than 64 levels",
    );
    let json = format!("{{\"mcpServers\": {}", "[".repeat(200 * 1024));
    let (diags, _) = load_one("mcp.json", json.as_bytes());
    assert_error(
        &diags,
        "mcp.json",
        Some((1, 79)),
        "nested more than 64 levels",
    );
    let block: String = (0..200).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
    let (diags, _) = load_one("aurad.yaml", block.as_bytes());
    assert_error(
        &diags,
        "aurad.yaml",
        Some((65, 65)),
        "nested more than 64 levels",
    );
}

#[test]
fn special_files_are_refused_without_being_read() {
    let dir = tempfile::tempdir().unwrap();
    // /dev/zero never ends: reading it whole would eat the memory.
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("aurad.yaml")).unwrap();
    // A FIFO would block the loader until something writes to it.
    let fifo = std::ffi::CString::new(dir.path().join("mcp.json").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::create_dir(dir.path().join("skills")).unwrap();
    std::fs::create_dir(dir.path().join("skills/s")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("skills/s/SKILL.md")).unwrap();
    let diags = diagnostics(dir.path());
    assert_error(&diags, "aurad.yaml", None, "not a regular file");
    assert_error(&diags, "mcp.json", None, "not a regular file");
    // `skills/` passes over what is not a regular file without reading it.
    assert!(
        diags
            .iter()
            .any(|d| d.path.starts_with("skills/s") && !d.is_error()),
        "{}",
        shown(&diags)
    );
}

/// A good file of each kind, written with a byte-order mark and CRLF line
/// ends, loads without a diagnostic; an error in such a file has the place
/// it has in an editor.
#[test]
fn bom_and_crlf_files_load_and_keep_their_places() {
    let crlf = |text: &str| {
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend_from_slice(text.replace('\n', "\r\n").as_bytes());
        bytes
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let put = |rel: &str, bytes: Vec<u8>| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    };
    put(
        "agents/a.yaml",
        crlf(
            "model: test\nsystem: |\n  line one\n  line two\nprompt: hi\nschedule:\n  - cron: \"0 9 * * *\"\n",
        ),
    );
    put(
        "skills/s/SKILL.md",
        crlf("---\nname: s\ndescription: Does s.\n---\nBody\nmore\n"),
    );
    put(
        "tools.d/t.yaml",
        crlf("description: t\nparameters: { type: object }\ncommand: [\"true\"]\n"),
    );
    put(
        "mcp.json",
        crlf(
            "{\n  \"mcpServers\": {\n    \"h\": { \"type\": \"http\", \"url\": \"http://127.0.0.1:1/mcp\" }\n  }\n}\n",
        ),
    );
    put(
        "aurad.yaml",
        crlf("max_concurrent_runs: 2\nlisten: 127.0.0.1:7777\n"),
    );
    let loaded = config::load(root, &no_env);
    let agent = loaded.project.agents.get("a").cloned();
    let (snapshot, diags) = registry::build(loaded, &no_env);
    assert!(diags.is_empty(), "{}", shown(&diags));
    let agent = agent.expect("agent a loads");
    assert_eq!(agent.system.as_deref(), Some("line one\nline two\n"));
    assert_eq!(snapshot.project.settings.max_concurrent_runs, 2);
    assert_eq!(snapshot.project.mcp_servers.len(), 1);
    let skill = snapshot
        .skills
        .iter()
        .find(|s| s.name == "s")
        .expect("skill s");
    assert_eq!(skill.body, "Body\nmore");

    put(
        "agents/a.yaml",
        crlf("model: test\nprompt: hi\nlimits:\n  timeout: 10q\n"),
    );
    put(
        "mcp.json",
        crlf("{\n  \"mcpServers\": {\n    \"h\": { \"url\": 7 }\n  }\n}\n"),
    );
    let diags = diagnostics(root);
    assert_error(&diags, "agents/a.yaml", Some((4, 12)), "timeout");
    assert!(
        diags
            .iter()
            .any(|d| d.path == Path::new("mcp.json") && d.line == 3),
        "{}",
        shown(&diags)
    );
}

/// How many times the log mentions `needle`.
fn mentions(serve: &Serve, needle: &str) -> usize {
    serve.log().matches(needle).count()
}

/// Starts a run of `a` and waits for it to succeed.
fn run_succeeds(serve: &Serve) {
    let (status, body) = http_post_json(serve.addr, "/v1/agents/a/runs", "{\"input\": \"hi\"}")
        .expect("POST /v1/agents/a/runs answers");
    assert_eq!(status, 202, "{body}\n{}", serve.log());
    let run: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = run["id"].as_str().expect("run id").to_string();
    poll(
        "the run to succeed",
        || serve.log(),
        || {
            let (_, body) = http_get(serve.addr, &format!("/v1/runs/{id}"))?;
            let run: serde_json::Value = serde_json::from_str(&body).ok()?;
            match run["state"].as_str()? {
                "succeeded" => Some(()),
                "queued" | "running" => None,
                other => panic!("run {id} ended {other}: {body}"),
            }
        },
    );
}

/// The description `GET /v1/agents` shows for `a`.
fn served_description(serve: &Serve) -> String {
    let (status, body) = http_get(serve.addr, "/v1/agents").expect("GET /v1/agents");
    assert_eq!(status, 200, "{body}");
    let agents: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = agents
        .as_array()
        .or_else(|| agents["agents"].as_array())
        .unwrap_or_else(|| panic!("unexpected /v1/agents body {body}"));
    list.iter()
        .find(|a| a["name"] == "a")
        .and_then(|a| a["description"].as_str())
        .unwrap_or_else(|| panic!("agent a is not served: {body}"))
        .to_string()
}

/// A real `aurad serve` with a good agent `a` (and a good file of every
/// other kind): each sampled corpus file is written over the good file of
/// its kind (or beside it, for agents and skills), the reload is seen to
/// reject it, and the previous version still serves: `GET /v1/agents` shows
/// the good `a` and a run of it succeeds. Then the good file is put back.
#[test]
fn bad_files_written_under_a_live_serve_leave_the_previous_version_serving() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Text("done".into()));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr = write_settings(root, &mock);
    let good_settings = std::fs::read(root.join("aurad.yaml")).unwrap();
    let good_agent = b"description: good agent\nmodel: mock/m\nprompt: hi\n".to_vec();
    let good_tool = b"description: t\nparameters: { type: object }\ncommand: [\"true\"]\n".to_vec();
    let good_mcp = b"{ \"mcpServers\": {} }\n".to_vec();
    let good_skill = b"---\nname: s\ndescription: Does s.\n---\nBody\n".to_vec();
    let goods: Vec<(&str, &[u8])> = vec![
        ("agents/a.yaml", &good_agent),
        ("tools.d/t.yaml", &good_tool),
        ("mcp.json", &good_mcp),
        ("skills/s/SKILL.md", &good_skill),
    ];
    for (rel, bytes) in &goods {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let serve = Serve::start(root, addr, &[]);
    assert_eq!(served_description(&serve), "good agent");

    // One in three corpus files, every kind represented.
    let cases: Vec<Case> = corpus().into_iter().step_by(3).collect();
    assert!(cases.len() >= 20);
    for case in &cases {
        let bytes = std::fs::read(&case.source).unwrap();
        let kind = case.name.split('/').next().unwrap();
        // Agents and tools are written over the good one of their kind,
        // unless the file's name is what is wrong.
        let stem = case.source.file_stem().unwrap().to_str().unwrap();
        let dest = match kind {
            "agent" if aurad::config::agent_name::valid_name(stem) => {
                PathBuf::from("agents/a.yaml")
            }
            "tools.d" if aurad::config::plugins::valid_tool_name(stem) => {
                PathBuf::from("tools.d/t.yaml")
            }
            _ => case.dest.clone(),
        };
        let shown_path = dest.display().to_string();
        let before = mentions(&serve, &shown_path);
        let path = root.join(&dest);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        poll(
            &format!("the reload to report {} (as {shown_path})", case.name),
            || serve.log(),
            || (mentions(&serve, &shown_path) > before).then_some(()),
        );
        assert_eq!(
            served_description(&serve),
            "good agent",
            "after {}",
            case.name
        );
        run_succeeds(&serve);
        // Put the good file back (or remove the bad one) and wait until
        // that is loaded, so the next case starts from a good project.
        let reloads = mentions(&serve, "reloaded");
        match goods.iter().find(|(rel, _)| Path::new(rel) == dest) {
            Some((_, good)) => std::fs::write(&path, good).unwrap(),
            None if kind == "settings" => std::fs::write(&path, &good_settings).unwrap(),
            None if kind == "skill" => std::fs::remove_dir_all(path.parent().unwrap()).unwrap(),
            None => std::fs::remove_file(&path).unwrap(),
        }
        poll(
            &format!("the good files to load again after {}", case.name),
            || serve.log(),
            || (mentions(&serve, "reloaded") > reloads).then_some(()),
        );
    }
    serve.wait_healthy();
}

/// Issue #32 item 11: a FIFO, a symbolic link loop, a dangling link and a
/// directory named like an agent were skipped silently (a FIFO, if read,
/// would hang the load). Each is now a located error; the real agent loads.
#[test]
fn entries_of_agents_that_are_not_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("agents/dir.yaml")).unwrap();
    std::fs::write(root.join("agents/ok.yaml"), "model: test\nprompt: hi\n").unwrap();
    let fifo = std::ffi::CString::new(root.join("agents/pipe.yaml").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("loop.yaml", root.join("agents/loop.yaml")).unwrap();
    std::os::unix::fs::symlink("nowhere.yaml", root.join("agents/dangling.yaml")).unwrap();
    let loaded = config::load(root, &|_| None);
    let shown: Vec<String> = loaded
        .diagnostics
        .iter()
        .map(Diagnostic::to_string)
        .collect();
    for (file, what) in [
        ("dangling", "a symbolic link to a missing file"),
        ("dir", "a directory"),
        ("loop", "a symbolic link that loops"),
        ("pipe", "a named pipe (FIFO)"),
    ] {
        let want = format!("agents/{file}.yaml: this is {what}");
        assert!(
            shown.iter().any(|d| d.starts_with(&want)),
            "{want} in {shown:#?}"
        );
    }
    assert!(loaded.project.agents.contains_key("ok"));
}
