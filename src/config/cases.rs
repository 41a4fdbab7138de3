//! `agents/NAME.test.yaml`: the regression cases of agent NAME that
//! `aurad test` runs. A case has an input, the model's answers (scripted
//! turns, or a recorded run of the store), tool results (scripted with each
//! call, or real for the tools the case names in `real_tools`) and
//! expectations. The agent loader skips these files; `aurad validate`
//! checks them here, every problem located (file:line:column). Depends on
//! `types` only.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::diag::{Diagnostic, locate};
use super::yaml_value::yaml_diagnostic;
use crate::types::{RunState, Usage};

/// The name ends of a test file; the agent is the name before them.
pub const SUFFIXES: [&str; 2] = [".test.yaml", ".test.yml"];

/// Whether `path` names an agent test file (`NAME.test.yaml`), which the
/// agent loader and the watcher skip.
pub fn is_test_file(path: &Path) -> bool {
    agent_of(path).is_some()
}

/// The agent a test file is for: `a` for `agents/a.test.yaml`.
pub fn agent_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    SUFFIXES
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .filter(|stem| !stem.is_empty())
        .map(str::to_string)
}

/// One test file, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct TestFile {
    /// The agent its cases run.
    pub agent: String,
    /// Relative to the project root.
    pub path: PathBuf,
    pub cases: Vec<Case>,
    /// The file as parsed, for `--update` to write back.
    pub raw: RawTestFile,
}

/// One regression case.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub name: String,
    /// 1-based line of the case in its file.
    pub line: usize,
    /// The run's input; `None`: the agent's `prompt`.
    pub input: Option<String>,
    pub answers: Answers,
    /// Tools whose calls run for real instead of answering from the script.
    pub real_tools: Vec<String>,
    pub expect: Expect,
}

/// Where a case's model answers come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Answers {
    /// Written in the file, one per model turn.
    Scripted(Vec<ScriptedTurn>),
    /// The answers and tool results of a run in the store.
    Run(String),
}

/// The file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTestFile {
    pub cases: Vec<RawCase>,
}

/// One case as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCase {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<ScriptedTurn>>,
    /// A stored run whose answers and tool results replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub real_tools: Vec<String>,
    #[serde(default)]
    pub expect: Expect,
}

/// One scripted model answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptedCall>,
    /// Token counts of the answer, for `max_cost_usd` (priced by `prices:`).
    #[serde(default, skip_serializing_if = "is_unknown")]
    pub usage: Usage,
}

fn is_unknown(usage: &Usage) -> bool {
    *usage == Usage::default()
}

/// One tool call of a scripted answer, with the result the tool gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
    /// What the tool returns; absent only for a tool of `real_tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The result is an error (the model sees it as a failed call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// What a case's run must show.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The state the run ends in; default `succeeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<RunState>,
    /// Calls that must be made (in any order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_called: Vec<ExpectedCall>,
    /// Tools that must not be called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_not_called: Vec<String>,
    /// Texts the final answer must contain (one or a list).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    pub answer_contains: Vec<String>,
    /// A regular expression (Rust `regex` syntax) the answer must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_matches: Option<String>,
    /// A JSON Schema the answer, read as JSON, must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_schema: Option<serde_json::Value>,
    /// The most model turns the run may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// The most the run may cost, in US dollars (needs a price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

/// A call `tools_called` asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    pub name: String,
    /// The arguments; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// How `arguments` compare: `exact` (default) or `subset` (the call
    /// has at least these fields, with these values).
    #[serde(default, rename = "match")]
    pub matching: ArgsMatch,
}

/// How expected arguments compare with a call's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgsMatch {
    #[default]
    Exact,
    Subset,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// Every test file of `root/agents`, sorted, with the diagnostics of those
/// that have problems (which are left out). `agents`: the agent names
/// present, to report a test file for no agent.
pub fn load_all(root: &Path, agents: &[String]) -> (Vec<TestFile>, Vec<Diagnostic>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("agents"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && is_test_file(p))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut loaded = Vec::new();
    let mut diagnostics = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        match load_file(&file, &rel, agents) {
            Ok(test_file) => loaded.push(test_file),
            Err(diags) => diagnostics.extend(diags),
        }
    }
    (loaded, diagnostics)
}

/// Reads and parses one test file (bounded like every project file).
pub fn load_file(file: &Path, rel: &Path, agents: &[String]) -> Result<TestFile, Vec<Diagnostic>> {
    let bytes = match super::bounds::read_bounded(file, rel) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(vec![Diagnostic::error(
                rel,
                (0, 0),
                "the file disappeared while loading",
            )]);
        }
        Err(d) => return Err(vec![d]),
    };
    let text = super::bounds::decode(bytes, rel).map_err(|d| vec![d])?;
    let agent = agent_of(rel).unwrap_or_default();
    if !agents.contains(&agent) {
        return Err(vec![Diagnostic::error(
            rel,
            (0, 0),
            format!(
                "there is no agent `{agent}` for these tests: create agents/{agent}.yaml or rename the file to agents/NAME.test.yaml"
            ),
        )]);
    }
    parse(&agent, rel, &text)
}

/// Parses a test file's text.
pub fn parse(agent: &str, path: &Path, text: &str) -> Result<TestFile, Vec<Diagnostic>> {
    if let Err(d) = super::bounds::check_text(path, text, super::bounds::Syntax::Yaml, 1) {
        return Err(vec![d]);
    }
    let raw: RawTestFile =
        serde_yaml::from_str(text).map_err(|e| vec![yaml_diagnostic(path, text, &e)])?;
    let mut diags = Vec::new();
    if raw.cases.is_empty() {
        diags.push(Diagnostic::error(
            path,
            locate(text, &["cases"]),
            "`cases` is empty: add at least one case with a `name`, an `input` and `turns`",
        ));
    }
    let lines = case_lines(text);
    let mut cases = Vec::new();
    for (i, raw_case) in raw.cases.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(1);
        let end = lines.get(i + 1).copied().unwrap_or(usize::MAX);
        let at = |needle: &str| place_in(text, line, end, needle);
        let mut err = |place: (usize, usize), message: String| {
            diags.push(Diagnostic::error(
                path,
                place,
                format!("case `{}`: {message}", raw_case.name),
            ))
        };
        if raw.cases[..i].iter().any(|c| c.name == raw_case.name) {
            err(
                (line, 1),
                "another case has this name; give each case its own".into(),
            );
        }
        let answers = match (&raw_case.turns, &raw_case.run) {
            (Some(turns), None) => Answers::Scripted(turns.clone()),
            (None, Some(run)) => Answers::Run(run.clone()),
            (Some(_), Some(_)) => {
                err(
                    (line, 1),
                    "has both `turns` and `run`: give the model's answers one way".into(),
                );
                continue;
            }
            (None, None) => {
                err(
                    (line, 1),
                    "needs the model's answers: `turns` (scripted) or `run` (a stored run id)"
                        .into(),
                );
                continue;
            }
        };
        if let Answers::Scripted(turns) = &answers {
            if turns.is_empty() {
                err(
                    (line, 1),
                    "`turns` is empty: script at least the final answer".into(),
                );
            }
            for (t, turn) in turns.iter().enumerate() {
                for call in &turn.tool_calls {
                    if !call.arguments.is_object() {
                        err(
                            at(&call.name),
                            format!(
                                "turn {}: the arguments of `{}` must be a mapping, got {}",
                                t + 1,
                                call.name,
                                call.arguments
                            ),
                        );
                    }
                    if call.result.is_none() && !raw_case.real_tools.contains(&call.name) {
                        err(
                            at(&call.name),
                            format!(
                                "turn {}: the call of `{}` has no `result:`; script what the tool returns, or list `{}` in `real_tools` to run it for real",
                                t + 1,
                                call.name,
                                call.name
                            ),
                        );
                    }
                }
            }
        }
        let expect = &raw_case.expect;
        if let Some(pattern) = &expect.answer_matches
            && let Err(e) = regex::Regex::new(pattern)
        {
            err(
                at("answer_matches"),
                format!("`answer_matches` is not a valid regular expression: {e}"),
            );
        }
        if let Some(schema) = &expect.answer_schema
            && let Err(e) = jsonschema::validator_for(schema)
        {
            err(
                at("answer_schema"),
                format!("`answer_schema` is not a valid JSON Schema: {e}"),
            );
        }
        if let Some(max) = expect.max_cost_usd
            && !(max.is_finite() && max >= 0.0)
        {
            err(
                at("max_cost_usd"),
                format!("`max_cost_usd` must be a number of dollars >= 0, got {max}"),
            );
        }
        cases.push(Case {
            name: raw_case.name.clone(),
            line,
            input: raw_case.input.clone(),
            answers,
            real_tools: raw_case.real_tools.clone(),
            expect: expect.clone(),
        });
    }
    if diags.is_empty() {
        Ok(TestFile {
            agent: agent.to_string(),
            path: path.to_path_buf(),
            cases,
            raw,
        })
    } else {
        Err(diags)
    }
}

/// Where `needle` first stands on lines `from..to` (1-based) of `text`;
/// the start of line `from` when it does not.
fn place_in(text: &str, from: usize, to: usize, needle: &str) -> (usize, usize) {
    text.lines()
        .enumerate()
        .skip(from - 1)
        .take(to.saturating_sub(from))
        .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, l[..c].chars().count() + 1)))
        .unwrap_or((from, 1))
}

/// The 1-based lines where the items of the top-level `cases:` list start,
/// in order.
fn case_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let mut in_cases = false;
    let mut indent: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let depth = line.len() - trimmed.len();
        if depth == 0 && !trimmed.starts_with('-') {
            in_cases = trimmed.starts_with("cases:");
            indent = None;
            continue;
        }
        if in_cases && trimmed.starts_with('-') && indent.is_none_or(|d| d == depth) {
            indent = Some(depth);
            lines.push(i + 1);
        }
    }
    lines
}

/// The text of `file` with the model turns of `updated` cases (by name)
/// written in place of their `turns` or `run`. The file is written anew
/// from its parsed form: comments are not kept.
pub fn render_updated(
    file: &TestFile,
    updated: &[(String, Vec<ScriptedTurn>)],
) -> Result<String, String> {
    let mut raw = file.raw.clone();
    for case in &mut raw.cases {
        if let Some((_, turns)) = updated.iter().find(|(name, _)| *name == case.name) {
            case.turns = Some(turns.clone());
            case.run = None;
        }
    }
    serde_yaml::to_string(&raw).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_told_from_agent_files() {
        assert_eq!(agent_of(Path::new("agents/a.test.yaml")), Some("a".into()));
        assert_eq!(
            agent_of(Path::new("agents/a-b.test.yml")),
            Some("a-b".into())
        );
        assert!(!is_test_file(Path::new("agents/a.yaml")));
        assert!(!is_test_file(Path::new("agents/.test.yaml")));
    }

    #[test]
    fn a_case_parses_with_its_line_and_expectations() {
        let text = "cases:\n  - name: one\n    input: hi\n    turns:\n      - tool_calls:\n          - { name: bash, arguments: { command: ls }, result: \"a\\n\" }\n      - text: done\n    expect:\n      answer_contains: done\n      tools_called: [{ name: bash, arguments: { command: ls }, match: subset }]\n  - name: two\n    run: 0192\n";
        let file = parse("a", Path::new("agents/a.test.yaml"), text).unwrap();
        assert_eq!(file.cases.len(), 2);
        assert_eq!(file.cases[0].line, 2);
        assert_eq!(file.cases[1].line, 11);
        assert_eq!(file.cases[0].expect.answer_contains, vec!["done"]);
        assert_eq!(
            file.cases[0].expect.tools_called[0].matching,
            ArgsMatch::Subset
        );
        assert_eq!(file.cases[1].answers, Answers::Run("0192".into()));
        let Answers::Scripted(turns) = &file.cases[0].answers else {
            panic!("scripted");
        };
        assert_eq!(turns[0].tool_calls[0].result.as_deref(), Some("a\n"));
    }

    #[test]
    fn problems_are_located() {
        let path = Path::new("agents/a.test.yaml");
        let errs = parse(
            "a",
            path,
            "cases:\n  - name: x\n    turns: []\n    expct: {}\n",
        )
        .unwrap_err();
        assert_eq!((errs[0].line, errs[0].column > 0), (4, true), "{errs:?}");
        assert!(errs[0].message.contains("expct"), "{errs:?}");
        let errs = parse(
            "a",
            path,
            "cases:\n  - name: x\n    turns: [{ text: hi }]\n  - name: y\n    turns:\n      - tool_calls: [{ name: bash }]\n    expect: { answer_matches: \"(\" }\n",
        )
        .unwrap_err();
        let shown: Vec<String> = errs.iter().map(|d| d.to_string()).collect();
        assert!(
            shown.iter().any(|s| s.starts_with("agents/a.test.yaml:6:")
                && s.contains("case `y`: turn 1: the call of `bash` has no `result:`")),
            "{shown:?}"
        );
        assert!(
            shown.iter().any(|s| s.starts_with("agents/a.test.yaml:7:")
                && s.contains("not a valid regular expression")),
            "{shown:?}"
        );
    }
}
