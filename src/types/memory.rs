//! Long-term memory as plain data: a stored memory, a recalled one with its
//! score, a memory to save, and what a save did. Shared by `store` (which
//! keeps them) and `memory` (the tools and the context block), so neither
//! names the other's types. No I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Category of a memory saved without one.
pub const DEFAULT_CATEGORY: &str = "fact";
/// Importance of a memory saved without one.
pub const DEFAULT_IMPORTANCE: u8 = 5;

/// A stored memory. Its times are kept to the millisecond and written as
/// RFC 3339 UTC (`2026-03-01T09:00:00.000Z`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub id: i64,
    pub namespace: String,
    pub content: String,
    pub category: String,
    /// 1 to 10.
    pub importance: u8,
    #[serde(serialize_with = "super::timestamp::millis")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "super::timestamp::millis")]
    pub updated_at: DateTime<Utc>,
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
    /// For import: when it was written. `None`: now.
    pub created_at: Option<DateTime<Utc>>,
    /// For import. `None`: `created_at`.
    pub updated_at: Option<DateTime<Utc>>,
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

/// What a save did (`Store::memory_save`).
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
