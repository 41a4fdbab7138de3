//! Long-term memory (DESIGN.md section 3, issue 4): the types, the block a
//! run's recalled memories are put in, and the memory tools. The storage,
//! index and recall/save/merge/cleanup/import live in `store::memory` (all
//! SQL stays in `store`) as `Store::memory_*` methods; the scoring math is in
//! [`score`]. May depend on `store`, `text`, `tools` and `types`.

pub mod import;
pub mod score;
mod tools;

use serde::{Deserialize, Serialize};

pub use score::{DEFAULT_MIN_SCORE, MERGE_THRESHOLD};
pub use tools::{memory_tool_names, memory_tools, memory_tools_with_limit};

/// How many memories a namespace keeps before cleanup, unless configured.
pub const DEFAULT_MAX_ENTRIES: usize = 500;
/// Category of a memory saved without one.
pub const DEFAULT_CATEGORY: &str = "fact";
/// Importance of a memory saved without one.
pub const DEFAULT_IMPORTANCE: u8 = 5;

/// A stored memory. Times are RFC 3339 UTC with milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub id: i64,
    pub namespace: String,
    pub content: String,
    pub category: String,
    /// 1 to 10.
    pub importance: u8,
    pub created_at: String,
    pub updated_at: String,
    /// How many times recall returned it (and merges into it).
    pub access_count: u64,
    /// The run that last wrote it, if a run did.
    pub run_id: Option<String>,
    pub metadata: serde_json::Value,
}

/// A memory returned by recall with its score. The memory is as it was when
/// scored (before recall bumped its access count), so the score can be
/// recomputed from its fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    pub memory: Memory,
    pub score: f64,
}

/// A memory to save or import.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub namespace: String,
    pub content: String,
    pub category: String,
    /// 1 to 10.
    pub importance: u8,
    pub run_id: Option<String>,
    pub metadata: serde_json::Value,
    /// For import: kept as given (RFC 3339). `None`: now.
    pub created_at: Option<String>,
    /// For import. `None`: `created_at`.
    pub updated_at: Option<String>,
    /// For import; a save starts at 0.
    pub access_count: u64,
}

impl NewMemory {
    /// A memory with the default category and importance, written now.
    pub fn new(namespace: impl Into<String>, content: impl Into<String>) -> NewMemory {
        NewMemory {
            namespace: namespace.into(),
            content: content.into(),
            category: DEFAULT_CATEGORY.into(),
            importance: DEFAULT_IMPORTANCE,
            run_id: None,
            metadata: serde_json::Value::Object(Default::default()),
            created_at: None,
            updated_at: None,
            access_count: 0,
        }
    }
}

/// What [`crate::store::Store::memory_save`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Saved {
    /// A new memory with this id.
    Created(i64),
    /// Merged into the existing memory with this id.
    Merged(i64),
}

impl Saved {
    pub fn id(self) -> i64 {
        match self {
            Saved::Created(id) | Saved::Merged(id) => id,
        }
    }
}

impl std::fmt::Display for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Saved::Created(id) => write!(f, "saved memory {id}"),
            Saved::Merged(id) => write!(f, "merged into memory {id}"),
        }
    }
}

/// The block put ahead of a run's input, e.g.
/// `## Relevant memories\n1. [fact] The user prefers pnpm`. Empty when
/// nothing was recalled.
pub fn context_block(recalled: &[Recalled]) -> String {
    if recalled.is_empty() {
        return String::new();
    }
    let mut block = String::from("## Relevant memories");
    for (i, r) in recalled.iter().enumerate() {
        block.push_str(&format!(
            "\n{}. [{}] {}",
            i + 1,
            r.memory.category,
            r.memory.content
        ));
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_format() {
        assert_eq!(context_block(&[]), "");
        let mut memory = Memory {
            id: 1,
            namespace: "a".into(),
            content: "用户喜欢使用 Vue 3".into(),
            category: "fact".into(),
            importance: 5,
            created_at: String::new(),
            updated_at: String::new(),
            access_count: 0,
            run_id: None,
            metadata: serde_json::Value::Null,
        };
        let first = Recalled {
            memory: memory.clone(),
            score: 0.5,
        };
        memory.category = "preference".into();
        memory.content = "pnpm".into();
        let second = Recalled { memory, score: 0.2 };
        assert_eq!(
            context_block(&[first, second]),
            "## Relevant memories\n1. [fact] 用户喜欢使用 Vue 3\n2. [preference] pnpm"
        );
        assert_eq!(Saved::Merged(7).to_string(), "merged into memory 7");
    }
}
