//! The memory tools of an agent with `memory.tools: true`: `memory_save`,
//! `memory_search` and `memory_delete`, bound to the agent's namespace and
//! the run that uses them. Depends on `store` and `tools`.

use std::sync::Arc;

use chrono::Utc;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{DEFAULT_CATEGORY, DEFAULT_IMPORTANCE, DEFAULT_MAX_ENTRIES, NewMemory};
use crate::store::Store;
use crate::store::memory_score as score;
use crate::tools::{Tool, ToolContext, ToolError};
use crate::types::ToolSpec;

/// Most memories `memory_search` returns.
const MAX_SEARCH_LIMIT: u64 = 50;
/// How many `memory_search` returns unless asked.
const DEFAULT_SEARCH_LIMIT: u64 = 5;

/// The three memory tools, bound to `namespace` and `run_id`, with cleanup
/// at [`DEFAULT_MAX_ENTRIES`].
pub fn memory_tools(store: Store, namespace: String, run_id: String) -> Vec<Arc<dyn Tool>> {
    memory_tools_with_limit(store, namespace, run_id, DEFAULT_MAX_ENTRIES)
}

/// [`memory_tools`] with the agent's `memory.max_entries`.
pub fn memory_tools_with_limit(
    store: Store,
    namespace: String,
    run_id: String,
    max_entries: usize,
) -> Vec<Arc<dyn Tool>> {
    let bound = Arc::new(Bound {
        store,
        namespace,
        run_id,
        max_entries,
    });
    [Kind::Save, Kind::Search, Kind::Delete]
        .into_iter()
        .map(|kind| {
            Arc::new(MemoryTool {
                spec: spec(kind),
                kind,
                bound: bound.clone(),
            }) as Arc<dyn Tool>
        })
        .collect()
}

/// The names of the memory tools an agent with `memory.tools` gets.
pub fn memory_tool_names() -> Vec<String> {
    [Kind::Save, Kind::Search, Kind::Delete]
        .into_iter()
        .map(|kind| spec(kind).name)
        .collect()
}

struct Bound {
    store: Store,
    namespace: String,
    run_id: String,
    max_entries: usize,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Save,
    Search,
    Delete,
}

struct MemoryTool {
    spec: ToolSpec,
    kind: Kind,
    bound: Arc<Bound>,
}

fn prop(ty: &str, description: &str, example: Value) -> Value {
    json!({"type": ty, "description": description, "examples": [example]})
}

fn spec(kind: Kind) -> ToolSpec {
    match kind {
        Kind::Save => ToolSpec {
            name: "memory_save".into(),
            description: "Saves a fact to your long-term memory so later runs can recall it. \
                Save durable, self-contained facts (preferences, decisions, names), one per call. \
                A text very close to an existing memory is merged into it."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "content": prop("string", "The fact, in one or two self-contained sentences.",
                        json!("The user prefers pnpm over npm")),
                    "category": prop("string", "A short kind: fact (default), preference, decision, todo...",
                        json!("preference")),
                    "importance": {
                        "type": "integer", "minimum": 1, "maximum": 10,
                        "description": "1 (trivia) to 10 (essential); default 5.",
                        "examples": [7]
                    }
                },
                "required": ["content"],
                "additionalProperties": false
            }),
        },
        Kind::Search => ToolSpec {
            name: "memory_search".into(),
            description: "Searches your long-term memory for facts relevant to a query, best \
                first, with their ids and scores."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": prop("string", "What to look for (keywords work best).",
                        json!("package manager preference")),
                    "limit": {
                        "type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT,
                        "description": "Most memories to return; default 5.",
                        "examples": [5]
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        },
        Kind::Delete => ToolSpec {
            name: "memory_delete".into(),
            description: "Deletes a memory that is wrong or outdated, by the id memory_search \
                showed."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "id": {
                        "type": "integer", "minimum": 1,
                        "description": "The memory's id, as shown by memory_search.",
                        "examples": [12]
                    }
                },
                "required": ["id"],
                "additionalProperties": false
            }),
        },
    }
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "`{name}` must be a string, got {other}"
        ))),
    }
}

fn int_arg(args: &Value, name: &str, range: (u64, u64)) -> Result<Option<u64>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .filter(|n| (range.0..=range.1).contains(n))
            .map(Some)
            .ok_or_else(|| {
                ToolError::InvalidArguments(format!(
                    "`{name}` must be an integer from {} to {}, got {v}",
                    range.0, range.1
                ))
            }),
    }
}

impl MemoryTool {
    async fn run(&self, args: Value) -> Result<String, ToolError> {
        let b = &self.bound;
        let failed = |e: crate::store::StoreError| ToolError::Failed(e.to_string());
        match self.kind {
            Kind::Save => {
                let content = string_arg(&args, "content")?
                    .filter(|c| !c.trim().is_empty())
                    .ok_or_else(|| {
                        ToolError::InvalidArguments("`content` is required and not empty".into())
                    })?;
                let mut new = NewMemory::new(b.namespace.clone(), content.trim());
                new.category = string_arg(&args, "category")?
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .unwrap_or(DEFAULT_CATEGORY)
                    .to_string();
                new.importance =
                    int_arg(&args, "importance", (1, 10))?.map_or(DEFAULT_IMPORTANCE, |n| n as u8);
                new.run_id = Some(b.run_id.clone());
                let saved = b
                    .store
                    .memory_save(new, b.max_entries, Utc::now())
                    .await
                    .map_err(failed)?;
                Ok(saved.to_string())
            }
            Kind::Search => {
                let query = string_arg(&args, "query")?.unwrap_or_default();
                let limit =
                    int_arg(&args, "limit", (1, MAX_SEARCH_LIMIT))?.unwrap_or(DEFAULT_SEARCH_LIMIT);
                let found = b
                    .store
                    .memory_recall(
                        &b.namespace,
                        query,
                        limit as usize,
                        score::DEFAULT_MIN_SCORE,
                        Utc::now(),
                    )
                    .await
                    .map_err(failed)?;
                if found.is_empty() {
                    return Ok(format!("no memories match {query:?}"));
                }
                let lines: Vec<String> = found
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        format!(
                            "{}. [{}] {} (id {}, importance {}, score {:.3})",
                            i + 1,
                            r.memory.category,
                            r.memory.content,
                            r.memory.id,
                            r.memory.importance,
                            r.score
                        )
                    })
                    .collect();
                Ok(lines.join("\n"))
            }
            Kind::Delete => {
                let id = int_arg(&args, "id", (1, i64::MAX as u64))?
                    .ok_or_else(|| ToolError::InvalidArguments("`id` is required".into()))?;
                let deleted = b
                    .store
                    .memory_delete(&b.namespace, id as i64)
                    .await
                    .map_err(failed)?;
                if deleted {
                    Ok(format!("deleted memory {id}"))
                } else {
                    Err(ToolError::Failed(format!(
                        "no memory {id} in this agent's memory: find ids with memory_search"
                    )))
                }
            }
        }
    }
}

impl Tool for MemoryTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> String {
        format!("memory (namespace {})", self.bound.namespace)
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.run(args))
    }
}
