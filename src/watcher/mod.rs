//! Watching files, with nothing of the daemon in it: `notify`'s events
//! gathered into batches that go once changes pause ([`batch`]), a watch
//! of the project root that leaves out writes to files kept open, such as
//! the database ([`root`]), `notify`'s recursive watch of trees ([`tree`]),
//! and [`Watcher`] ([`project`]), which turns changes to a project's
//! configuration into reload signals. The daemon uses them for reloads and
//! for `watch:` triggers.
//!
//! May depend on `config` (which files are configuration).

pub mod batch;
pub mod project;
pub mod root;
pub mod tree;

pub use project::Watcher;
