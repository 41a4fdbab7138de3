//! What can go wrong in the store, on either backend. Messages say what to
//! do. Depends on nothing of the store's backends.

use chrono::{DateTime, SecondsFormat, Utc};

/// How many matches an ambiguous run id prefix error shows (the error holds
/// one more, to tell that there are more).
pub const MAX_MATCHES: usize = 10;

/// Everything that can go wrong in the store. Messages say what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The database failed; the text says which, what was being done and
    /// why it failed.
    #[error("{0}")]
    Database(String),
    /// The file or its directory could not be created.
    #[error("{0}")]
    Io(String),
    /// This build would not know the newer tables: it neither reads nor
    /// migrates them (a downgrade needs the copy taken before the upgrade).
    #[error(
        "the database was created by a newer aurad (schema {found}, this build knows {known}): \
         upgrade aurad to that version or later; to stay on this one, restore the copy \
         `aurad backup` made before the upgrade, or point `database:` in aurad.yaml at another file"
    )]
    NewerSchema { found: i64, known: i64 },
    /// An id prefix (or end) matches several runs; `matches` holds the
    /// first ids in order (at most 11: the message shows 10 and `...` when
    /// there are more).
    #[error(
        "run id `{prefix}` is ambiguous: it is the start or end of {}; give more characters",
        list_matches(matches)
    )]
    Ambiguous {
        prefix: String,
        matches: Vec<String>,
    },
    /// Something named by the caller does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Something the caller wants to create exists already.
    #[error("{0}")]
    Conflict(String),
    /// A scheduled fire has a run already (this process or an earlier one
    /// took it): the fire must not run again. `scheduled_for` is as stored.
    #[error(
        "agent `{agent}`: schedule {schedule_id} fire at {scheduled_for} has a run already; \
         each scheduled fire runs at most once, so skip it"
    )]
    FireTaken {
        agent: String,
        schedule_id: crate::types::ScheduleId,
        scheduled_for: String,
    },
    /// The database's file was deleted or replaced while it was open
    /// (`sqlite::file_guard`): nothing more is written to it.
    #[error("{0}")]
    Lost(String),
    /// The caller asked for something the store cannot do.
    #[error("{0}")]
    Invalid(String),
    #[error(
        "run {run_id}: stored row is unreadable ({message}); the database was edited by hand \
         or written by another program"
    )]
    CorruptRun { run_id: String, message: String },
    #[error(
        "run {run_id}: stored event {seq} is unreadable ({message}); the database was edited \
         by hand or written by an incompatible aurad"
    )]
    CorruptEvent {
        run_id: String,
        seq: i64,
        message: String,
    },
    /// Retention deleted the run's events (`retention: events:` in
    /// aurad.yaml, or `aurad runs prune --events-only`); the run's record
    /// is kept.
    #[error(
        "run {run_id}: its {events} events were pruned by retention on {} (`retention: events:` \
         in aurad.yaml); the run's record (state, times, usage, cost, output, error) is kept: \
         see `aurad runs` or GET /v1/runs/{run_id}",
        time_text(*pruned_at)
    )]
    EventsPruned {
        run_id: String,
        pruned_at: DateTime<Utc>,
        events: u64,
    },
    #[error(
        "the store is closed (its writer thread has stopped); this is a bug unless aurad is shutting down"
    )]
    Closed,
    /// A bug in the store itself (a panicking job); the store keeps working.
    #[error("internal store error: {0}; please report this bug")]
    Internal(String),
}

fn list_matches(matches: &[String]) -> String {
    let shown: Vec<&str> = matches
        .iter()
        .take(MAX_MATCHES)
        .map(String::as_str)
        .collect();
    let more = if matches.len() > MAX_MATCHES {
        ", ..."
    } else {
        ""
    };
    format!("{}{more}", shown.join(", "))
}

/// A time as messages show it: RFC 3339 UTC with milliseconds.
fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}
