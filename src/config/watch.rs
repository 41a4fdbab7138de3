//! `watch:` in an agent file: one run per created or changed file matching
//! a glob under the project. Parsed into a validated [`WatchTrigger`]:
//! globs stay inside the project and never match the control files
//! (`agents/`, `skills/`, `tools.d/`, `mcp.json`, `aurad.yaml`, the
//! database, `.env`); `move_to` is a folder inside the project.
//!
//! Depends on `globset` and the config helpers only.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde_yaml::Value;

use super::diag::{Diagnostic, locate, locate_item};
use super::duration::duration_value;
use super::yaml_value::describe_value;

/// How long a file must stay unchanged before its run starts, by default.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(500);

/// Directories whose files are the project's own: never watched.
pub const CONTROL_DIRS: [&str; 6] = [
    "agents", "channels", "skills", "tools.d", ".agents", ".claude",
];

/// Paths that stand for the control files when a glob is checked: a glob
/// matching any of them is refused.
const CONTROL_PROBES: [&str; 14] = [
    "agents/a.yaml",
    "agents/a.yml",
    "skills/a/SKILL.md",
    ".agents/skills/a/SKILL.md",
    ".claude/skills/a/SKILL.md",
    "tools.d/a.yaml",
    "mcp.json",
    ".mcp.json",
    ".vscode/mcp.json",
    "aurad.yaml",
    "aurad.db",
    "aurad.db-wal",
    ".aurad.lock",
    ".env",
];

/// `watch:` of an agent.
#[derive(Debug, Clone)]
pub struct WatchTrigger {
    /// The globs as written, relative to the project root.
    pub paths: Vec<String>,
    matcher: GlobSet,
    pub debounce: Duration,
    /// Where each file goes once its run succeeded (relative to the root).
    pub move_to: Option<PathBuf>,
    /// minijinja template overriding the agent's `prompt` for these runs.
    pub input: Option<String>,
}

impl PartialEq for WatchTrigger {
    fn eq(&self, other: &Self) -> bool {
        self.paths == other.paths
            && self.debounce == other.debounce
            && self.move_to == other.move_to
            && self.input == other.input
    }
}

impl Eq for WatchTrigger {}

impl WatchTrigger {
    /// Whether `relative` (a path relative to the project root, `/`
    /// separated) is one of this agent's files: it matches a glob and is
    /// not in `move_to` (a processed file is not new work).
    pub fn matches(&self, relative: &Path) -> bool {
        if self
            .move_to
            .as_ref()
            .is_some_and(|d| relative.starts_with(d))
        {
            return false;
        }
        if relative
            .components()
            .next()
            .is_some_and(|c| CONTROL_DIRS.iter().any(|d| c.as_os_str() == *d))
        {
            return false;
        }
        self.matcher.is_match(relative)
    }

    /// Whether a glob that starts with a wildcard (`**/*.txt`, `*/in/*`)
    /// can match below the root's own files: its folders must then be
    /// watched too, not only the root.
    pub fn reaches_below_root(&self) -> bool {
        self.paths.iter().any(|p| {
            p.split_once('/')
                .is_some_and(|(first, _)| first.contains(['*', '?', '[', '{', '\\']))
        })
    }

    /// The directories (relative to the root) under which matching files
    /// can be: the literal part of each glob before its first wildcard.
    pub fn base_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .paths
            .iter()
            .map(|p| {
                let mut base = PathBuf::new();
                let parts: Vec<&str> = p.split('/').collect();
                for part in &parts[..parts.len().saturating_sub(1)] {
                    if part.contains(['*', '?', '[', '{', '\\']) {
                        break;
                    }
                    base.push(part);
                }
                base
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

/// Parses `watch:` (a mapping with `paths`, `debounce`, `move_to`,
/// `input`; or, short, just the paths: a glob or a list of globs, as
/// `after: digest` is short for its mapping), adding every problem to
/// `diags`.
pub(super) fn parse_watch(
    value: &Value,
    path: &Path,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<WatchTrigger> {
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);
    if matches!(value, Value::String(_) | Value::Sequence(_)) {
        let mut short = serde_yaml::Mapping::new();
        short.insert(Value::String("paths".into()), value.clone());
        return parse_watch(&Value::Mapping(short), path, text, diags);
    }
    let Value::Mapping(map) = value else {
        diags.push(err(
            &["watch"],
            format!(
                "`watch` is {}: expected globs such as \"inbox/*.md\", or a mapping such as `{{ paths: \"inbox/*.md\", move_to: inbox/done }}`",
                describe_value(value)
            ),
        ));
        return None;
    };
    let start = diags.len();
    let mut paths = Vec::new();
    let mut debounce = DEFAULT_DEBOUNCE;
    let mut move_to = None;
    let mut input = None;
    for (k, v) in map {
        let key = k.as_str().unwrap_or_default();
        match key {
            "paths" => {
                let items: Vec<&Value> = match v {
                    Value::Sequence(items) => items.iter().collect(),
                    other => vec![other],
                };
                for (i, item) in items.into_iter().enumerate() {
                    match item.as_str() {
                        Some(glob) => match check_glob(glob) {
                            Ok(()) => paths.push(glob.to_string()),
                            Err(msg) => diags.push(Diagnostic::error(
                                path,
                                locate_item(text, &["watch", "paths"], glob),
                                format!("watch.paths[{i}]: {msg}"),
                            )),
                        },
                        None => diags.push(err(
                            &["watch", "paths"],
                            format!(
                                "watch.paths[{i}] is {}: expected a glob such as \"inbox/*.md\"",
                                describe_value(item)
                            ),
                        )),
                    }
                }
            }
            "debounce" => match duration_value(v) {
                Ok(d) => debounce = d,
                Err(msg) => diags.push(err(&["watch", "debounce"], format!("watch.debounce: {msg}"))),
            },
            "move_to" => match v.as_str().map(check_folder) {
                Some(Ok(dir)) => move_to = Some(dir),
                Some(Err(msg)) => {
                    diags.push(err(&["watch", "move_to"], format!("watch.move_to: {msg}")))
                }
                None => diags.push(err(
                    &["watch", "move_to"],
                    format!(
                        "watch.move_to is {}: expected a folder of the project, e.g. inbox/done",
                        describe_value(v)
                    ),
                )),
            },
            "input" => match v.as_str() {
                Some(template) => match minijinja::Environment::new().template_from_str(template) {
                    Ok(_) => input = Some(template.to_string()),
                    Err(e) => diags.push(err(
                        &["watch", "input"],
                        format!(
                            "watch.input: template error: {}",
                            e.detail().unwrap_or("syntax error")
                        ),
                    )),
                },
                None => diags.push(err(
                    &["watch", "input"],
                    format!("watch.input must be a string, not {}", describe_value(v)),
                )),
            },
            other => diags.push(Diagnostic::error(
                path,
                locate(text, &["watch", other]),
                format!(
                    "unknown field `watch.{other}`: `watch` has `paths`, `debounce`, `move_to` and `input`"
                ),
            )),
        }
    }
    if paths.is_empty() && diags.len() == start {
        diags.push(err(
            &["watch"],
            "`watch.paths` is required: the files to run on, e.g. `paths: \"inbox/*.md\"`".into(),
        ));
    }
    if diags.len() > start {
        return None;
    }
    let mut set = GlobSetBuilder::new();
    for p in &paths {
        set.add(glob(p).ok()?);
    }
    Some(WatchTrigger {
        paths,
        matcher: set.build().ok()?,
        debounce,
        move_to,
        input,
    })
}

/// `*` and `?` stay within one path component; `**` crosses them.
fn glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern).literal_separator(true).build()
}

/// Refuses a glob that is empty, invalid, leaves the project or can match
/// a control file.
fn check_glob(pattern: &str) -> Result<(), String> {
    let relative = check_relative(pattern)?;
    let matcher = glob(pattern)
        .map_err(|e| format!("{pattern:?} is not a valid glob: {}", e.kind()))?
        .compile_matcher();
    let first = relative.components().next();
    let control_dir = first.filter(|c| CONTROL_DIRS.iter().any(|d| c.as_os_str() == *d));
    if let Some(probe) = CONTROL_PROBES.iter().find(|p| matcher.is_match(p)) {
        return Err(format!(
            "{pattern:?} matches the project's own files (such as {probe}): agents, skills, tools.d, mcp.json, aurad.yaml, the database and .env are never watched; use a folder of its own, e.g. \"inbox/*.md\""
        ));
    }
    if let Some(dir) = control_dir {
        return Err(format!(
            "{pattern:?} is inside {}/, one of the project's own folders, which are never watched; use a folder of its own, e.g. \"inbox/*.md\"",
            dir.as_os_str().to_string_lossy()
        ));
    }
    Ok(())
}

/// `move_to`: a folder inside the project, not a control folder.
fn check_folder(text: &str) -> Result<PathBuf, String> {
    let dir = check_relative(text)?;
    if text.contains(['*', '?', '[', '{']) {
        return Err(format!(
            "{text:?} is a glob: give one folder, e.g. inbox/done"
        ));
    }
    if dir
        .components()
        .next()
        .is_some_and(|c| CONTROL_DIRS.iter().any(|d| c.as_os_str() == *d))
    {
        return Err(format!(
            "{text:?} is inside one of the project's own folders (agents, skills, tools.d): use a folder of its own, e.g. inbox/done"
        ));
    }
    Ok(dir)
}

/// A path relative to the project root that stays inside it.
fn check_relative(text: &str) -> Result<PathBuf, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("it is empty: give a path relative to the project, e.g. \"inbox/*.md\"".into());
    }
    let path = Path::new(trimmed);
    if path.is_absolute() || trimmed.starts_with('/') || trimmed.starts_with('~') {
        return Err(format!(
            "{text:?} is absolute: paths are relative to the project root and stay inside it, e.g. \"inbox/*.md\""
        ));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(format!(
            "{text:?} leaves the project (`..`): paths stay inside the project root"
        ));
    }
    Ok(path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> (Option<WatchTrigger>, Vec<String>) {
        let map: std::collections::BTreeMap<String, Value> = serde_yaml::from_str(yaml).unwrap();
        let mut diags = Vec::new();
        let w = parse_watch(&map["watch"], Path::new("agents/a.yaml"), yaml, &mut diags);
        (w, diags.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn full_and_short_forms() {
        let (w, d) = parse(
            "watch:\n  paths: \"inbox/*.md\"\n  debounce: 200ms\n  move_to: inbox/done\n  input: \"Summarise {{ trigger.path }}\"\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let w = w.unwrap();
        assert_eq!(w.debounce, Duration::from_millis(200));
        assert_eq!(w.move_to, Some(PathBuf::from("inbox/done")));
        assert!(w.matches(Path::new("inbox/a.md")));
        assert!(!w.matches(Path::new("inbox/sub/a.md")));
        assert!(!w.matches(Path::new("inbox/a.txt")));
        assert_eq!(w.base_dirs(), [PathBuf::from("inbox")]);
        let (w, d) = parse("watch: { paths: [\"in/**/*.txt\", \"*.csv\"] }\n");
        assert!(d.is_empty(), "{d:?}");
        let w = w.unwrap();
        assert_eq!(w.debounce, DEFAULT_DEBOUNCE);
        assert!(w.matches(Path::new("in/x/y/z.txt")));
        assert!(w.matches(Path::new("data.csv")));
        assert_eq!(w.base_dirs(), [PathBuf::new(), PathBuf::from("in")]);
    }

    #[test]
    fn move_to_inside_the_glob_is_not_matched() {
        let (w, _) = parse("watch: { paths: \"inbox/**\", move_to: inbox/done }\n");
        let w = w.unwrap();
        assert!(w.matches(Path::new("inbox/a.md")));
        assert!(!w.matches(Path::new("inbox/done/a.md")));
    }

    #[test]
    fn errors_are_placed_and_say_what_to_do() {
        let (w, d) = parse(
            "watch:\n  paths: [\"../x/*.md\", \"/etc/*\", \"agents/*.yaml\", \"**/*\", \"[\"]\n  debounce: soon\n  move_to: ../done\n  input: \"{{ x\"\n  when: always\n",
        );
        assert!(w.is_none());
        let all = d.join("\n");
        assert!(
            all.contains("agents/a.yaml:2:12: watch.paths[0]: \"../x/*.md\" leaves the project"),
            "{all}"
        );
        assert!(
            all.contains("agents/a.yaml:2:25: watch.paths[1]: \"/etc/*\" is absolute"),
            "{all}"
        );
        assert!(
            all.contains("watch.paths[2]: \"agents/*.yaml\" matches the project's own files"),
            "{all}"
        );
        assert!(
            all.contains("watch.paths[3]: \"**/*\" matches the project's own files"),
            "{all}"
        );
        assert!(
            all.contains("watch.paths[4]: \"[\" is not a valid glob"),
            "{all}"
        );
        assert!(
            all.contains("agents/a.yaml:3:13: watch.debounce: invalid duration \"soon\""),
            "{all}"
        );
        assert!(
            all.contains("agents/a.yaml:4:12: watch.move_to: \"../done\" leaves the project"),
            "{all}"
        );
        assert!(
            all.contains("agents/a.yaml:5:11: watch.input: template error"),
            "{all}"
        );
        assert!(
            all.contains("agents/a.yaml:6:9: unknown field `watch.when`"),
            "{all}"
        );
        // The short form: the paths alone.
        let (w, d) = parse("watch: \"inbox/*.md\"\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(w.unwrap().paths, ["inbox/*.md"]);
        let (w, d) = parse("watch: [\"inbox/*.md\", \"drop/*.txt\"]\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(w.unwrap().paths, ["inbox/*.md", "drop/*.txt"]);
        let (_, d) = parse("watch: \"skills/*/x.md\"\n");
        assert!(d[0].contains("inside skills/"), "{d:?}");
        let (_, d) = parse("watch: 3\n");
        assert_eq!(
            d,
            [
                "agents/a.yaml:1:8: `watch` is 3: expected globs such as \"inbox/*.md\", or a mapping such as `{ paths: \"inbox/*.md\", move_to: inbox/done }`"
            ]
        );
        let (_, d) = parse("watch: { debounce: 1s }\n");
        assert!(d[0].contains("`watch.paths` is required"), "{d:?}");
        let (_, d) = parse("watch: { paths: \"skills/*/x.md\" }\n");
        assert!(d[0].contains("inside skills/"), "{d:?}");
    }
}
