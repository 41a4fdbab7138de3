//! aurad: a daemon that runs LLM agents declared in files.
//!
//! Module map and dependency rules: ARCHITECTURE.md (its layers table is
//! what `tests/layers.rs` enforces). `main.rs` only parses arguments and
//! calls [`cli::run`]; everything else lives here.

pub mod api;
pub mod app;
pub mod channels;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod engine;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod redact;
pub mod registry;
pub mod replay;
pub mod run;
pub mod scheduler;
pub mod skills;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tools;
pub mod types;
pub mod watcher;
