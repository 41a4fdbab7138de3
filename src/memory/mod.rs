//! Long-term memory: the types, the block a
//! run's recalled memories are put in, and the memory tools. The types are
//! plain data in `types::memory`; the storage, index and
//! recall/save/merge/cleanup/import live in `store::memory` (all SQL stays
//! in `store`) as `Store::memory_*` methods, with the scoring math the SQL
//! prunes with (`store::memory_score`). May depend on `store`, `tools` and
//! `types`; `store` does not depend on it.

pub mod import;
mod tools;

pub use crate::store::memory_score::{DEFAULT_MIN_SCORE, MERGE_THRESHOLD};
pub use crate::types::memory::{
    DEFAULT_CATEGORY, DEFAULT_IMPORTANCE, Memory, NewMemory, Recalled, Saved,
};
pub use tools::{memory_tool_names, memory_tools, memory_tools_with_limit};

/// How many memories a namespace keeps before cleanup, unless configured.
pub const DEFAULT_MAX_ENTRIES: usize = 500;
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
            created_at: chrono::DateTime::UNIX_EPOCH,
            updated_at: chrono::DateTime::UNIX_EPOCH,
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
