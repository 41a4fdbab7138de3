//! The registry of every tool a project knows, and the allow-listed
//! [`ToolSet`] one agent sees. A `ToolSet` validates each call's arguments
//! against the tool's JSON Schema before running it and turns every failure
//! into error text for the model.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures::FutureExt;

use super::sandbox::Sandbox;
use super::{Tool, ToolContext, ToolError, cap_output};
use crate::types::{ToolCall, ToolSpec};

/// Every tool known to the project, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Known>,
}

/// A tool of the registry, and its compiled schema, shared by every
/// [`ToolSet`] selected from the registry: compiled by the first call of
/// any run, not once per run (a tool's schema never changes: a changed
/// tool is a new registry, from a reload).
#[derive(Clone)]
struct Known {
    tool: Arc<dyn Tool>,
    validator: SharedValidator,
}

/// A compiled parameter schema, or why it does not compile; built on first
/// use, so start-up pays nothing for unused tools.
type SharedValidator = Arc<OnceLock<Result<jsonschema::Validator, String>>>;

impl Known {
    fn new(tool: Arc<dyn Tool>) -> Known {
        Known {
            tool,
            validator: Arc::default(),
        }
    }
}

impl ToolRegistry {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let tools = tools
            .into_iter()
            .map(|t| (t.spec().name.clone(), Known::new(t)))
            .collect();
        ToolRegistry { tools }
    }

    /// The built-in tools, the file tools refusing what `protected`
    /// protects.
    pub fn builtin(protected: super::builtin::ProtectedPaths) -> Self {
        ToolRegistry::new(super::builtin::all(protected))
    }

    /// Adds a tool. A name already taken is refused with a message naming
    /// both sources; the first one stays.
    pub fn add(&mut self, tool: Arc<dyn Tool>) -> Result<(), String> {
        let name = tool.spec().name.clone();
        if let Some(existing) = self.tools.get(&name) {
            return Err(format!(
                "tool name `{name}` is taken twice: by {} and by {}; rename one of them",
                existing.tool.source(),
                tool.source()
            ));
        }
        self.tools.insert(name, Known::new(tool));
        Ok(())
    }

    /// Every tool, in name order.
    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values().map(|k| &k.tool)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|k| &k.tool)
    }

    /// The tools matching any of `patterns`, in name order.
    pub fn select(&self, patterns: &[String]) -> ToolSet {
        let entries = self
            .matching(patterns)
            .map(|k| Entry {
                tool: k.tool.clone(),
                validator: k.validator.clone(),
            })
            .collect();
        ToolSet {
            entries,
            sandbox: Sandbox::none(),
            observer: None,
        }
    }

    /// The names of the tools [`ToolRegistry::select`] would give, in order.
    pub fn names_matching(&self, patterns: &[String]) -> Vec<String> {
        self.matching(patterns)
            .map(|k| k.tool.spec().name.clone())
            .collect()
    }

    fn matching<'a>(&'a self, patterns: &'a [String]) -> impl Iterator<Item = &'a Known> {
        self.tools
            .values()
            .filter(|k| patterns.iter().any(|p| glob_match(p, &k.tool.spec().name)))
    }

    /// The patterns that match no known tool.
    pub fn unmatched<'a>(&self, patterns: &'a [String]) -> Vec<&'a str> {
        patterns
            .iter()
            .filter(|p| !self.tools.keys().any(|n| glob_match(p, n)))
            .map(String::as_str)
            .collect()
    }
}

/// Shell-style glob with `*` (any run) and `?` (one character).
///
/// Hand-written rather than `globset`: [`glob_could_extend`] must read the
/// very same pattern language and globset cannot answer its question (could
/// the pattern match some name with this prefix?), so it stays hand-written;
/// globset here would make `[`, `{` and `\` special in allow-lists while
/// `glob_could_extend` treats them as plain characters, and compile a regex
/// per check.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Could `pattern` match some name `PREFIX` followed by at least one more
/// character? Used to start only the MCP servers (`<server>_*` names) an
/// agent's allow-list can reach.
pub fn glob_could_extend(pattern: &str, prefix: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let closure = |states: &mut Vec<usize>| {
        let mut i = 0;
        while i < states.len() {
            let s = states[i];
            if s < p.len() && p[s] == '*' && !states.contains(&(s + 1)) {
                states.push(s + 1);
            }
            i += 1;
        }
    };
    let mut states = vec![0];
    closure(&mut states);
    for c in prefix.chars() {
        let mut next = Vec::new();
        for &s in &states {
            if s < p.len() {
                let to = match p[s] {
                    '*' => Some(s),
                    '?' => Some(s + 1),
                    pc if pc == c => Some(s + 1),
                    _ => None,
                };
                if let Some(t) = to.filter(|t| !next.contains(t)) {
                    next.push(t);
                }
            }
        }
        states = next;
        closure(&mut states);
        if states.is_empty() {
            return false;
        }
    }
    states.iter().any(|&s| s < p.len())
}

struct Entry {
    tool: Arc<dyn Tool>,
    /// Shared with the registry's other selections for a registry tool;
    /// the set's own for a tool bound to one run.
    validator: SharedValidator,
}

/// A tool's parameter schema, compiled. Building a validator first checks
/// the schema against its draft's meta-schema, and the first check in a
/// process builds that meta-schema's own validator: for draft 2020-12 (the
/// default, with its vocabularies) that was about half of the instructions
/// of a one-shot `aurad run` calling `bash` (callgrind). The built-in
/// tools' schemas are ours and use only keywords that mean the same in
/// draft 7, whose meta-schema is one small document (a test checks them
/// under both); schemas from elsewhere (plugins, MCP servers) keep the
/// default draft.
/// What `value` breaks of `validator`'s schema, at most `most` problems, each
/// with the JSON pointer where it is (`at /count: ...`); empty when valid.
pub fn schema_problems(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
    most: usize,
) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(most)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect()
}

/// Builds, on a thread of its own, what compiling the first built-in
/// tool's schema in a process spends most of its time on: jsonschema checks
/// every schema against its draft's meta-schema, and builds that
/// meta-schema's validator (a process-wide static) on the first check,
/// about 1.1M instructions. `aurad run` calls this at start, so its first
/// tool call finds it built instead of building it between the model's
/// answer and the tool's process.
pub fn prepare_builtin_schemas() {
    let _ = std::thread::Builder::new()
        .name("aurad-schemas".into())
        .spawn(|| {
            let _ = jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .build(&serde_json::json!({"type": "object"}));
        });
}

fn compile_schema(tool: &dyn Tool) -> Result<jsonschema::Validator, String> {
    let schema = &tool.spec().parameters;
    let compiled = if tool.source() == "builtin" {
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft7)
            .build(schema)
    } else {
        jsonschema::validator_for(schema)
    };
    compiled.map_err(|e| e.to_string())
}

/// The result of one tool call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub output: String,
    pub is_error: bool,
    pub duration_ms: u64,
}

/// The tools one agent may use. The model is shown only these, and a call
/// to any other name is refused without running anything.
#[derive(Default)]
pub struct ToolSet {
    entries: Vec<Entry>,
    /// The confinement of the processes its tools start, whatever the
    /// caller's context says.
    sandbox: Sandbox,
    /// Told of each call as it starts and ends (traces).
    observer: Option<Arc<dyn CallObserver>>,
}

/// Watches the calls a [`ToolSet`] executes (the daemon's traces): `start`
/// just before a call runs; the returned watch's `end` with its outcome.
pub trait CallObserver: Send + Sync {
    fn start(&self, call: &ToolCall) -> Box<dyn CallWatch>;
}

/// One call being watched ([`CallObserver::start`]).
pub trait CallWatch: Send {
    fn end(self: Box<Self>, outcome: &ToolOutcome);
}

impl ToolSet {
    /// The same tools, their processes confined by `sandbox` (the agent's
    /// `sandbox:` for one run).
    pub fn with_sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The tools whose name `keep` accepts (the caller's allow-lists of a
    /// sub-run).
    pub fn retain(mut self, keep: impl Fn(&str) -> bool) -> Self {
        self.entries.retain(|e| keep(&e.tool.spec().name));
        self
    }

    /// The same tools, each call told to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Adds a tool bound to one run (the memory tools); a name already in
    /// the set keeps the first tool.
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        if self
            .entries
            .iter()
            .all(|e| e.tool.spec().name != tool.spec().name)
        {
            self.entries.push(Entry {
                tool,
                validator: SharedValidator::default(),
            });
        }
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.entries.iter().map(|e| e.tool.spec().clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Validates and runs one call. Never fails: every problem becomes an
    /// error outcome whose text tells the model what to do.
    pub async fn execute(&self, call: &ToolCall, ctx: &ToolContext) -> ToolOutcome {
        let watch = self.observer.as_ref().map(|o| o.start(call));
        let started = Instant::now();
        let ctx = &ToolContext {
            sandbox: self.sandbox.clone(),
            ..ctx.clone()
        };
        let result = self.run(call, ctx).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let outcome = match result {
            Ok(output) => ToolOutcome {
                output: cap_output(output, ctx.output_cap),
                is_error: false,
                duration_ms,
            },
            Err(message) => ToolOutcome {
                output: cap_output(message, ctx.output_cap),
                is_error: true,
                duration_ms,
            },
        };
        if let Some(watch) = watch {
            watch.end(&outcome);
        }
        outcome
    }

    async fn run(&self, call: &ToolCall, ctx: &ToolContext) -> Result<String, String> {
        let Some(entry) = self
            .entries
            .iter()
            .find(|e| e.tool.spec().name == call.name)
        else {
            let names: Vec<&str> = self
                .entries
                .iter()
                .map(|e| e.tool.spec().name.as_str())
                .collect();
            return Err(if names.is_empty() {
                format!(
                    "error: tool `{}` is not available: this agent has no tools; answer without calling tools",
                    call.name
                )
            } else {
                format!(
                    "error: tool `{}` is not available to this agent; available tools: {}",
                    call.name,
                    names.join(", ")
                )
            });
        };
        let raw = call.arguments.trim();
        let args: serde_json::Value = if raw.is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(raw).map_err(|e| {
                format!("error: the arguments of `{}` are not valid JSON ({e}); send one JSON object matching the tool's schema", call.name)
            })?
        };
        if !args.is_object() {
            return Err(format!(
                "error: the arguments of `{}` must be a JSON object, got {args}",
                call.name
            ));
        }
        let validator = entry
            .validator
            .get_or_init(|| compile_schema(entry.tool.as_ref()));
        match validator {
            Err(e) => {
                return Err(format!(
                    "error: tool `{}` has an invalid schema ({e}); it cannot be called",
                    call.name
                ));
            }
            Ok(v) => {
                let problems = schema_problems(v, &args, 10);
                if !problems.is_empty() {
                    return Err(format!(
                        "error: invalid arguments for `{}`: {}; fix them and call again",
                        call.name,
                        problems.join("; ")
                    ));
                }
            }
        }
        // A panicking tool is a failed call, not a dead run.
        let result = std::panic::AssertUnwindSafe(entry.tool.call(args, ctx))
            .catch_unwind()
            .await
            .map_err(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                ToolError::Failed(format!(
                    "the tool crashed ({what}); this is a bug in the tool"
                ))
            })
            .and_then(|r| r);
        result.map_err(|e| match e {
            ToolError::InvalidArguments(m) => {
                format!("error: invalid arguments for `{}`: {m}", call.name)
            }
            other => format!("error: {other}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_schemas_are_valid_and_mean_the_same_in_draft_7_and_2020_12() {
        let protected = super::super::builtin::ProtectedPaths::defaults(std::path::Path::new("/p"));
        for tool in super::super::builtin::all(protected) {
            let schema = &tool.spec().parameters;
            let draft7 = compile_schema(tool.as_ref()).expect("a valid draft 7 schema");
            let latest = jsonschema::validator_for(schema).expect("a valid 2020-12 schema");
            let mut samples = vec![serde_json::json!({}), serde_json::json!({"unknown": 1})];
            // Each property's example alone, and all of them together.
            let mut all = serde_json::Map::new();
            for (name, property) in schema["properties"].as_object().unwrap() {
                let example = property["examples"][0].clone();
                samples.push(serde_json::json!({ name: example.clone() }));
                samples.push(serde_json::json!({ name: [example.clone()] }));
                all.insert(name.clone(), example);
            }
            samples.push(serde_json::Value::Object(all));
            for sample in &samples {
                assert_eq!(
                    draft7.is_valid(sample),
                    latest.is_valid(sample),
                    "{}: {sample}",
                    tool.spec().name
                );
            }
        }
    }

    /// Runs of one snapshot select their tools from one registry: a
    /// tool's schema is compiled by the first call of any of them, and the
    /// others find it compiled (in the daemon, once per tool instead of
    /// once per run); a schema the calls break is still refused in each.
    #[tokio::test]
    async fn selections_of_one_registry_share_each_compiled_schema() {
        let registry = ToolRegistry::builtin(super::super::builtin::ProtectedPaths::defaults(
            std::path::Path::new("/p"),
        ));
        let first = registry.select(&["calculator".into()]);
        let second = registry.select(&["calculator".into()]);
        let compiled = |set: &ToolSet| set.entries[0].validator.get().is_some();
        assert!(!compiled(&first) && !compiled(&second));
        let ctx = ToolContext {
            root: std::env::temp_dir(),
            cancel: Default::default(),
            output_cap: 1024,
            sandbox: Default::default(),
        };
        let call = |arguments: &str| ToolCall {
            id: "c1".into(),
            name: "calculator".into(),
            arguments: arguments.into(),
        };
        let ok = first
            .execute(&call(r#"{"expression": "1 + 2"}"#), &ctx)
            .await;
        assert_eq!((ok.output.as_str(), ok.is_error), ("3", false));
        assert!(compiled(&second), "the second selection compiles it again");
        let bad = second.execute(&call(r#"{"expression": 7}"#), &ctx).await;
        assert!(
            bad.is_error && bad.output.contains("invalid arguments"),
            "{}",
            bad.output
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("bash", "bash"));
        assert!(!glob_match("bash", "bash2"));
        assert!(glob_match("github_*", "github_create_issue"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("read_?ile", "read_file"));
        assert!(glob_match("*_file", "write_file"));
        assert!(!glob_match("*_file", "list_dir"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
    }

    #[test]
    fn prefix_reachability() {
        assert!(glob_could_extend("filesystem_*", "filesystem_"));
        assert!(glob_could_extend("*", "github_"));
        assert!(glob_could_extend("github_create_issue", "github_"));
        assert!(!glob_could_extend("github_create_issue", "gitlab_"));
        assert!(!glob_could_extend("bash", "bash_"));
        assert!(glob_could_extend("*_read", "fs_"));
        assert!(glob_could_extend("f?_*", "fs_"));
        assert!(!glob_could_extend("fs_", "fs_"));
    }
}
