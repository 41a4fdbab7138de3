//! Watching files under `aurad serve`, in two jobs that share their
//! primitives: [`project`] turns changes to the project's configuration
//! into reloads; [`files`] runs agents on files their `watch:` globs match.
//! Both gather events into batches ([`batch`]), from a watch of the
//! project root that ignores the database's writes ([`root`]) and
//! `notify`'s recursive watch of trees ([`tree`]).
//!
//! May depend on `config`, `registry`, `store`, `run` and the supervisor.

pub mod batch;
pub mod files;
pub mod project;
pub mod root;
pub mod tree;

pub use project::Watcher;
