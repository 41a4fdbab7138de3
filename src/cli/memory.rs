//! `aurad memory list|search|add|forget|import`: the long-term memories of a
//! namespace (list and search: of every namespace, grouped, unless one is
//! named), read and written through the store's `memory_*` methods (no
//! runtime needed: the `_blocking` ones). `--json` prints a JSON array of
//! memories, best first, each with a `score` (null where none applies).

use std::path::{Path, PathBuf};

use chrono::Utc;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, open_store};
use crate::app::Store;
use crate::app::memory::{DEFAULT_MAX_ENTRIES, Memory, NewMemory, Saved};
use crate::app::memory::{Format, parse_import};

#[derive(Debug, Args)]
pub struct MemoryArgs {
    #[command(subcommand)]
    pub command: MemoryCommand,
    /// The memory namespace (an agent's is its name unless it sets
    /// `memory.namespace`). Without it `list` and `search` look in every
    /// namespace, grouped; `add`, `forget` and `import` use `default`.
    #[arg(long, global = true)]
    pub namespace: Option<String>,
    /// Print a JSON array of memories.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List memories, most recently updated first.
    List {
        /// How many to show (0: all).
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Show the memories that best match QUERY, best first (counts as a recall).
    Search {
        query: String,
        /// Most memories to show.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// Lowest score shown.
        #[arg(long, default_value_t = crate::app::memory::DEFAULT_MIN_SCORE)]
        min_score: f64,
    },
    /// Save TEXT as a memory (merged into a very similar one if there is one).
    Add {
        text: String,
        /// A short kind: fact, preference, decision...
        #[arg(long, default_value = "fact")]
        category: String,
        /// 1 (trivia) to 10 (essential).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=10))]
        importance: u8,
        /// Cleanup keeps 80% of this many once the namespace holds more.
        #[arg(long, default_value_t = DEFAULT_MAX_ENTRIES as u64, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
        max_entries: u64,
    },
    /// Delete memory ID.
    Forget { id: i64 },
    /// Import aura-agent's memories.json (a JSON array) or JSON Lines, keeping
    /// timestamps and access counts.
    Import { file: PathBuf },
}

pub fn run(root: &Path, args: MemoryArgs) -> i32 {
    let store = match open_store(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let ns = args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
    let result = match args.command {
        MemoryCommand::List { limit } => match &args.namespace {
            Some(ns) => list(&store, ns, limit, args.json),
            None => every_namespace(&store, args.json, |ns| {
                Ok(store
                    .memory_list_blocking(ns, limit)?
                    .into_iter()
                    .map(|m| (m, None))
                    .collect())
            }),
        },
        MemoryCommand::Search {
            query,
            limit,
            min_score,
        } => match &args.namespace {
            Some(ns) => search(&store, ns, &query, limit, min_score, args.json),
            None => every_namespace(&store, args.json, |ns| {
                Ok(store
                    .memory_recall_blocking(ns, &query, limit, min_score, Utc::now())?
                    .into_iter()
                    .map(|r| (r.memory, Some(r.score)))
                    .collect())
            }),
        },
        MemoryCommand::Add {
            text,
            category,
            importance,
            max_entries,
        } => {
            let mut new = NewMemory::new(ns, text);
            new.category = category;
            new.importance = importance;
            add(&store, new, max_entries as usize, args.json)
        }
        MemoryCommand::Forget { id } => forget(&store, ns, id, args.json),
        MemoryCommand::Import { file } => import_file(&store, ns, &file, args.json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILED
        }
    }
}

type Outcome = Result<i32, crate::app::StoreError>;

/// Where `add`, `forget` and `import` write without `--namespace`.
const DEFAULT_NAMESPACE: &str = "default";

/// `list` or `search` without `--namespace`: `read`'s memories (with their
/// scores) of every namespace that has memories, each under a line naming
/// it with its count; namespaces with nothing read are left out.
fn every_namespace(
    store: &Store,
    json: bool,
    read: impl Fn(&str) -> Result<Vec<(Memory, Option<f64>)>, crate::app::StoreError>,
) -> Outcome {
    let Some(runtime) = super::runtime() else {
        return Ok(EXIT_FAILED);
    };
    let namespaces = runtime.block_on(store.memory_namespaces())?;
    let mut items = Vec::new();
    let mut shown = 0;
    for ns in &namespaces {
        let found = read(&ns.name)?;
        if found.is_empty() {
            continue;
        }
        shown += 1;
        if json {
            items.extend(found.iter().map(|(m, score)| to_json(m, *score)));
            continue;
        }
        if shown > 1 {
            println!();
        }
        println!(
            "namespace `{}` ({} memor{}; --namespace {} for it alone):",
            ns.name,
            ns.entries,
            if ns.entries == 1 { "y" } else { "ies" },
            ns.name
        );
        for (memory, score) in &found {
            print_line(memory, *score);
        }
    }
    if json {
        print_json(items);
    } else if namespaces.is_empty() {
        eprintln!(
            "no memories in any namespace; agents with `memory:` save theirs under their name, \
             or add one with `aurad memory add TEXT --namespace NAME`"
        );
    } else if shown == 0 {
        eprintln!("no memory matches in any namespace");
    }
    Ok(EXIT_OK)
}

fn to_json(memory: &Memory, score: Option<f64>) -> Value {
    let mut value = serde_json::to_value(memory).unwrap_or_default();
    value["score"] = json!(score);
    value
}

fn print_json(items: Vec<Value>) {
    println!(
        "{}",
        serde_json::to_string_pretty(&Value::Array(items)).unwrap_or_default()
    );
}

fn print_line(memory: &Memory, score: Option<f64>) {
    let score = score.map(|s| format!("  score {s:.3}")).unwrap_or_default();
    println!(
        "{:>6}  [{}] {}  (importance {}, recalled {}x, updated {}){score}",
        memory.id,
        memory.category,
        memory.content,
        memory.importance,
        memory.access_count,
        memory.updated_at.format("%Y-%m-%d"),
    );
}

fn list(store: &Store, ns: &str, limit: usize, json: bool) -> Outcome {
    let memories = store.memory_list_blocking(ns, limit)?;
    if json {
        print_json(memories.iter().map(|m| to_json(m, None)).collect());
    } else if memories.is_empty() {
        eprintln!("no memories in namespace {ns:?}; add one with `aurad memory add TEXT`");
    } else {
        memories.iter().for_each(|m| print_line(m, None));
    }
    Ok(EXIT_OK)
}

fn search(store: &Store, ns: &str, query: &str, limit: usize, min: f64, json: bool) -> Outcome {
    let found = store.memory_recall_blocking(ns, query, limit, min, Utc::now())?;
    if json {
        print_json(
            found
                .iter()
                .map(|r| to_json(&r.memory, Some(r.score)))
                .collect(),
        );
    } else if found.is_empty() {
        eprintln!("no memory in namespace {ns:?} scores {min} or more for {query:?}");
    } else {
        found
            .iter()
            .for_each(|r| print_line(&r.memory, Some(r.score)));
    }
    Ok(EXIT_OK)
}

fn add(store: &Store, new: NewMemory, max_entries: usize, json: bool) -> Outcome {
    if new.content.trim().is_empty() {
        eprintln!("error: the text is empty: give the fact to remember");
        return Ok(EXIT_CONFIG);
    }
    let ns = new.namespace.clone();
    let saved = store.memory_save_blocking(new, max_entries, Utc::now())?;
    if json {
        let memory = store.memory_get_blocking(&ns, saved.id())?;
        let mut value = memory
            .map(|m| to_json(&m, None))
            .unwrap_or(json!({"id": saved.id()}));
        value["saved"] = json!(match saved {
            Saved::Created(_) => "created",
            Saved::Merged(_) => "merged",
        });
        print_json(vec![value]);
    } else {
        println!("{saved}");
    }
    Ok(EXIT_OK)
}

fn forget(store: &Store, ns: &str, id: i64, json: bool) -> Outcome {
    if !store.memory_delete_blocking(ns, id)? {
        eprintln!(
            "error: no memory {id} in namespace {ns:?}; find ids with `aurad memory list --namespace {ns}`"
        );
        return Ok(EXIT_FAILED);
    }
    if json {
        println!("{}", json!({"deleted": id}));
    } else {
        println!("forgot memory {id}");
    }
    Ok(EXIT_OK)
}

fn import_file(store: &Store, ns: &str, file: &Path, json: bool) -> Outcome {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return Ok(EXIT_FAILED);
        }
    };
    let (format, entries) = match parse_import(&text, ns) {
        Ok(parsed) => parsed,
        Err(problems) => {
            for p in &problems {
                eprintln!("{}: {p}", file.display());
            }
            eprintln!("error: nothing imported: fix the entries above and retry");
            return Ok(EXIT_CONFIG);
        }
    };
    let count = store.memory_import_blocking(entries, Utc::now())?;
    let total = store.memory_count_blocking(ns)?;
    if json {
        println!(
            "{}",
            json!({"imported": count, "namespace": ns, "total": total})
        );
    } else {
        let kind = match format {
            Format::JsonArray => "JSON array",
            Format::JsonLines => "JSON Lines",
        };
        println!("imported {count} memories ({kind}) into namespace {ns:?}; it now holds {total}");
    }
    if total > DEFAULT_MAX_ENTRIES {
        eprintln!(
            "note: namespace {ns:?} holds more than {DEFAULT_MAX_ENTRIES} memories: the next save \
             keeps only 80% of the agent's `memory.max_entries` (default {DEFAULT_MAX_ENTRIES}); \
             raise it to keep them all"
        );
    }
    Ok(EXIT_OK)
}
