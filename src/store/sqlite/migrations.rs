//! Schema migrations, numbered by their place in [`MIGRATIONS`] and tracked in
//! `PRAGMA user_version`. Each runs in its own `BEGIN IMMEDIATE` transaction
//! that also bumps the version, so a failed migration leaves the database as
//! it was, and two processes opening the same file never both apply one.
//!
//! To change the schema, append a migration; never edit a released one.

use rusqlite::{Connection, TransactionBehavior};

use super::{Durability, StoreError, set_durability, sql};

/// One schema step: version = its index in [`MIGRATIONS`] + 1.
pub(super) struct Migration {
    pub name: &'static str,
    pub sql: &'static str,
}

pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "runs and events",
        sql: r#"
CREATE TABLE runs (
    id              TEXT PRIMARY KEY NOT NULL,
    agent           TEXT NOT NULL,
    state           TEXT NOT NULL,
    "trigger"       TEXT NOT NULL,
    input           TEXT NOT NULL,
    model           TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    owner           TEXT,
    created_at      TEXT NOT NULL,
    started_at      TEXT,
    finished_at     TEXT,
    error           TEXT,
    output          TEXT,
    input_tokens    INTEGER,
    output_tokens   INTEGER
);
CREATE INDEX runs_agent_created ON runs(agent, created_at);
CREATE INDEX runs_state_created ON runs(state, created_at);
CREATE INDEX runs_created ON runs(created_at);

CREATE TABLE events (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL,
    at     TEXT NOT NULL,
    kind   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "long-term memory and its inverted index",
        sql: r#"
CREATE TABLE memory_namespaces (
    id      INTEGER PRIMARY KEY,
    name    TEXT NOT NULL UNIQUE,
    entries INTEGER NOT NULL DEFAULT 0,
    epoch   INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE memories (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace    TEXT NOT NULL,
    content      TEXT NOT NULL,
    category     TEXT NOT NULL,
    importance   INTEGER NOT NULL CHECK (importance BETWEEN 1 AND 10),
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    run_id       TEXT,
    metadata     TEXT NOT NULL DEFAULT '{}',
    -- log2 of an upper bound of the boosts at the Unix epoch (store::memory_score::impact)
    impact       REAL NOT NULL,
    -- cached TF-IDF vector norm, valid while memory_namespaces.epoch = norm_epoch
    norm         REAL,
    norm_epoch   INTEGER
);
CREATE INDEX memories_namespace_updated ON memories(namespace, updated_at);

-- Postings, per term in impact order (recall reads the best first and stops).
CREATE TABLE memory_terms (
    ns        INTEGER NOT NULL REFERENCES memory_namespaces(id),
    term      TEXT NOT NULL,
    impact    REAL NOT NULL,
    memory_id INTEGER NOT NULL,
    tf        INTEGER NOT NULL,
    PRIMARY KEY (ns, term, impact, memory_id)
) WITHOUT ROWID;

CREATE TABLE memory_df (
    ns   INTEGER NOT NULL REFERENCES memory_namespaces(id),
    term TEXT NOT NULL,
    df   INTEGER NOT NULL,
    PRIMARY KEY (ns, term)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "scheduled fires and webhook deliveries",
        sql: r#"
-- Set together, on scheduled runs only. scheduled_for: RFC 3339 UTC with
-- milliseconds, like every stored time.
ALTER TABLE runs ADD COLUMN schedule_index INTEGER;
ALTER TABLE runs ADD COLUMN scheduled_for TEXT;
-- A fire (agent, schedule, instant) has at most one run, across restarts.
CREATE UNIQUE INDEX runs_fire ON runs(agent, schedule_index, scheduled_for)
    WHERE scheduled_for IS NOT NULL;

-- Webhook delivery ids seen in the last 24 hours (redeliveries run once).
CREATE TABLE webhook_deliveries (
    agent       TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (agent, delivery_id)
) WITHOUT ROWID;
CREATE INDEX webhook_deliveries_received ON webhook_deliveries(received_at);
"#,
    },
    Migration {
        name: "run cost, cached tokens and structured result",
        sql: r#"
-- Input tokens read from the provider's prompt cache (part of input_tokens).
ALTER TABLE runs ADD COLUMN cached_input_tokens INTEGER;
-- US dollars, from `prices` in aurad.yaml; NULL: unknown (not zero).
ALTER TABLE runs ADD COLUMN cost_usd REAL;
-- The final answer parsed as JSON, for agents with an output_schema.
ALTER TABLE runs ADD COLUMN result TEXT;
"#,
    },
    Migration {
        name: "schedules watched, and since when",
        sql: r#"
-- A schedule the daemon has been watching since `since` (RFC 3339 UTC),
-- as long as its expression and zone stay `cron`: after a restart, fires
-- between `since` and now with no run were missed, even the first one.
CREATE TABLE schedule_watches (
    agent          TEXT NOT NULL,
    schedule_index INTEGER NOT NULL,
    cron           TEXT NOT NULL,
    since          TEXT NOT NULL,
    PRIMARY KEY (agent, schedule_index)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "schedules keyed by what they are, not their place in the list",
        sql: r#"
-- A fire is (agent, schedule_id, scheduled_for): schedule_id hashes what
-- the schedule is (agent, expression, zone, input; types::ScheduleId), so
-- reordering, deleting or editing one schedule no longer moves the fires of
-- another. New scheduled runs store schedule_id and leave schedule_index
-- NULL.
--
-- Existing rows cannot get an id here (it is computed from the agent files,
-- which SQL cannot read): they keep schedule_index and scheduled_for as
-- history, with schedule_id NULL, and nothing is deleted. Their uniqueness
-- by index is dropped (a reordered schedule's new fires must not collide
-- with another schedule's old ones); new fires are unique by id.
ALTER TABLE runs ADD COLUMN schedule_id TEXT;
DROP INDEX runs_fire;
CREATE UNIQUE INDEX runs_fire ON runs(agent, schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL AND scheduled_for IS NOT NULL;

-- Watches by id. The old rows, keyed by place, move to
-- schedule_watches_by_index; the daemon's first sync hands each to the
-- schedule of the same agent written the same way (`cron`: expression and
-- zone), resuming from the later of its `since` and that place's newest
-- stored fire, so an unchanged schedule neither loses its missed fires nor
-- replays handled ones across the upgrade. A schedule no old row matches
-- starts from the moment it is loaded. Rows left unclaimed are schedules
-- that are gone; that sync deletes them.
ALTER TABLE schedule_watches RENAME TO schedule_watches_by_index;
CREATE TABLE schedule_watches (
    agent       TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    since       TEXT NOT NULL,
    PRIMARY KEY (agent, schedule_id)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "a queued run's template variables",
        sql: r#"
-- `{"vars": {...}, "payload": ...}` of a run accepted but still queued, so a
-- daemon that takes it over after a crash renders its templates as the one
-- that accepted it would have. Cleared when the run starts or ends.
ALTER TABLE runs ADD COLUMN template_context TEXT;
"#,
    },
    Migration {
        name: "runs started by another run's end or by a file",
        sql: r#"
-- The follow-up run `run_id` of agent `agent` started because run
-- `after_run_id` ended (`after:`): at most one per (agent, after_run_id),
-- recorded in the transaction that claims the follow-up.
CREATE TABLE after_runs (
    agent        TEXT NOT NULL,
    after_run_id TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    PRIMARY KEY (agent, after_run_id)
);
-- The run `run_id` of agent `agent` for the file `path` (relative to the
-- project) with content `content_hash` (SHA-256, hex) (`watch:`): one per
-- file version, recorded in the transaction that claims the run.
CREATE TABLE watched_files (
    agent        TEXT NOT NULL,
    path         TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    claimed_at   TEXT NOT NULL,
    PRIMARY KEY (agent, path, content_hash)
);
"#,
    },
    Migration {
        name: "runs started by another run",
        sql: r#"
-- The run that started this one (a sub-agent call, a pipeline step), and how
-- deep it is below a run nobody started (0 for those).
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
"#,
    },
    Migration {
        name: "tool calls waiting for a person's approval",
        sql: r#"
-- One row per tool call a run waited on (`approve:` in its agent file): the
-- exact call, when it was asked and until when, and the decision (NULL
-- while pending). decided_by: cli | api | timeout.
CREATE TABLE approvals (
    run_id       TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    call_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    timeout_at   TEXT NOT NULL,
    decided_at   TEXT,
    approved     INTEGER,
    decided_by   TEXT,
    reason       TEXT,
    PRIMARY KEY (run_id, call_id)
) WITHOUT ROWID;
CREATE INDEX approvals_pending ON approvals(decided_at) WHERE decided_at IS NULL;
-- The engine's state (JSON) of a run in `waiting_approval`, from which it
-- resumes after a restart. Cleared when the run goes on.
ALTER TABLE runs ADD COLUMN checkpoint TEXT;
"#,
    },
    Migration {
        name: "pipeline runs and their steps",
        sql: r#"
-- A run of a pipeline (an agent with `steps:`): its template variables, so
-- the daemon that resumes it after a crash renders its steps as before.
-- A running run listed here is resumed at start-up, not interrupted.
CREATE TABLE pipeline_runs (
    run_id  TEXT PRIMARY KEY REFERENCES runs(id),
    context TEXT
) WITHOUT ROWID;
-- One row per step of a pipeline run, and one per `for_each` item of a
-- step (`item` >= 0; -1 is the step itself), written when it starts and
-- when it ends. `items` is the JSON list a `for_each` step rendered, kept
-- so a resumed step fans out over the same items.
CREATE TABLE pipeline_steps (
    run_id        TEXT NOT NULL REFERENCES runs(id),
    step          TEXT NOT NULL,
    item          INTEGER NOT NULL,
    state         TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    output        TEXT,
    error         TEXT,
    items         TEXT,
    started_at    TEXT,
    finished_at   TEXT,
    input_tokens  INTEGER,
    output_tokens INTEGER,
    cost_usd      REAL,
    child_run_id  TEXT,
    PRIMARY KEY (run_id, step, item)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "event bodies pruned by retention",
        sql: r#"
-- Set when retention deleted the run's events (store::retention): when,
-- and how many (0 for a run that had none). Readers then say the events
-- were pruned instead of showing an empty log. NULL: events kept.
ALTER TABLE runs ADD COLUMN events_pruned_at TEXT;
ALTER TABLE runs ADD COLUMN events_pruned INTEGER;
-- The runs whose events are still kept, oldest first: the pruner walks
-- these only, not the runs it pruned before.
CREATE INDEX runs_events_kept ON runs(created_at) WHERE events_pruned_at IS NULL;
"#,
    },
    Migration {
        name: "sessions",
        sql: r#"
-- Conversations (store::sessions): a session of one agent, its running
-- totals, and its messages in order, each with the turn's run that added
-- it. The messages are JSON (types::Message).
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    title         TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    turns         INTEGER NOT NULL DEFAULT 0,
    messages      INTEGER NOT NULL DEFAULT 0,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd      REAL
);
CREATE INDEX sessions_updated ON sessions(updated_at);
CREATE INDEX sessions_by_agent ON sessions(agent, updated_at);
CREATE TABLE session_messages (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    run_id     TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "memory times in one form",
        sql: r#"
-- Memory times as every aurad now writes them, RFC 3339 UTC with
-- milliseconds (2026-03-01T09:00:00.000Z), so they sort as text and read
-- back as times. Earlier versions kept an imported memory's times as given
-- (any offset, any precision). A time SQLite cannot read stays as it is:
-- reading that memory then names it and says what to do.
UPDATE memories
SET created_at = COALESCE(strftime('%Y-%m-%dT%H:%M:%fZ', created_at), created_at),
    updated_at = COALESCE(strftime('%Y-%m-%dT%H:%M:%fZ', updated_at), updated_at);
"#,
    },
    Migration {
        name: "session turns",
        sql: r#"
-- A turn of a session is a run (store::sessions): the run names its
-- session; `turn_run` is the run taking its turn now (one at a time; the
-- others wait, oldest first), and a long history keeps the summary that
-- stands for its oldest messages, up to and including `summary_through`
-- (a message's seq).
ALTER TABLE runs ADD COLUMN session_id TEXT;
CREATE INDEX runs_by_session ON runs(session_id, id) WHERE session_id IS NOT NULL;
ALTER TABLE sessions ADD COLUMN summary TEXT;
ALTER TABLE sessions ADD COLUMN summary_through INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN turn_run TEXT;
"#,
    },
    Migration {
        name: "channels",
        sql: r#"
-- The session each conversation of a channel is, and where its answers
-- go now (store::channels).
CREATE TABLE channel_sessions (
    session_id   TEXT PRIMARY KEY NOT NULL,
    channel      TEXT NOT NULL,
    conversation TEXT NOT NULL,
    reply        TEXT NOT NULL,
    updated_at   TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX channel_sessions_channel ON channel_sessions(channel);
-- The replies (a turn's answer by run id, an approval prompt by its token)
-- claimed for sending: each goes out once, across restarts and nodes.
CREATE TABLE channel_replies (
    run_id     TEXT PRIMARY KEY NOT NULL,
    replied_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX channel_replies_at ON channel_replies(replied_at);
"#,
    },
];

/// Brings the schema up to [`MIGRATIONS`].
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    migrate_with(conn, MIGRATIONS)
}

fn user_version(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(sql("reading the schema version"))
}

/// Applies the migrations of `list` the database lacks. Reading the version
/// takes no write lock, so opening an up-to-date database stays cheap.
pub(super) fn migrate_with(conn: &mut Connection, list: &[Migration]) -> Result<(), StoreError> {
    let known = list.len() as i64;
    let found = user_version(conn)?;
    if found > known {
        return Err(StoreError::NewerSchema { found, known });
    }
    if found == known {
        return Ok(());
    }
    set_durability(conn, Durability::Full)?;
    for (index, migration) in list.iter().enumerate() {
        let version = index as i64 + 1;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("starting a schema migration"))?;
        // Re-read under the write lock: another process may have migrated.
        let current = user_version(&tx)?;
        if current > known {
            return Err(StoreError::NewerSchema {
                found: current,
                known,
            });
        }
        if current >= version {
            continue;
        }
        tx.execute_batch(migration.sql).map_err(|e| {
            StoreError::sqlite(
                &format!("schema migration {version} ({}) failed", migration.name),
                e,
            )
        })?;
        tx.pragma_update(None, "user_version", version)
            .map_err(sql("recording the schema version"))?;
        tx.commit().map_err(sql("committing a schema migration"))?;
        tracing::debug!(version, name = migration.name, "applied schema migration");
    }
    set_durability(conn, Durability::Normal)
}
