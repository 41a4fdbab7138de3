//! The composition root. For now: the one path that turns a run request into
//! a stored, finished run ([`runner`]), shared by `aurad run` and, later, the
//! scheduler and the HTTP API. May depend on `registry`, `engine`, `store`.

pub mod recorder;
pub mod runner;

pub use runner::{PreparedRun, RunRequest, execute, prepare};
