//! The PostgreSQL schema, numbered by place in [`MIGRATIONS`] and tracked in
//! the table `aurad_schema`. At start every node calls [`migrate`]: one
//! transaction takes a transaction-level advisory lock, so nodes starting
//! together apply each migration once, in order, and a failed migration
//! leaves the database as it was.
//!
//! The schema mirrors the SQLite one as it stands after its migrations,
//! with PostgreSQL types: times are `timestamptz` (stored to the
//! millisecond, as in SQLite), counters `bigint`, JSON kept as the text the
//! store wrote. To change it, append a migration; never edit a released one.

use deadpool_postgres::Object;

use super::pg;
use crate::store::StoreError;

/// Key of the advisory lock held while migrating (`aurad` in ASCII).
const MIGRATION_LOCK: i64 = 0x61_7572_6164;

pub(super) struct Migration {
    pub name: &'static str,
    pub sql: &'static str,
}

pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "runs, events, fires, memory, approvals, pipelines, nodes",
        sql: r#"
CREATE TABLE runs (
    -- Compared bytewise, as SQLite does, whatever the database's default
    -- collation: an id prefix is then a range of the primary key.
    id                  TEXT COLLATE "C" PRIMARY KEY,
    -- Insertion order across nodes (SQLite's rowid): ties of created_at.
    row_seq             BIGINT GENERATED ALWAYS AS IDENTITY,
    agent               TEXT NOT NULL,
    state               TEXT NOT NULL,
    "trigger"           TEXT NOT NULL,
    input               TEXT NOT NULL,
    model               TEXT NOT NULL,
    definition_hash     TEXT NOT NULL,
    -- The node (or process) running it; NULL: nobody (queued for any node).
    owner               TEXT,
    created_at          TIMESTAMPTZ NOT NULL,
    started_at          TIMESTAMPTZ,
    finished_at         TIMESTAMPTZ,
    error               TEXT,
    output              TEXT,
    input_tokens        BIGINT,
    output_tokens       BIGINT,
    cached_input_tokens BIGINT,
    cost_usd            DOUBLE PRECISION,
    result              TEXT,
    schedule_id         TEXT,
    scheduled_for       TIMESTAMPTZ,
    template_context    TEXT,
    parent_run_id       TEXT,
    depth               INTEGER NOT NULL DEFAULT 0,
    checkpoint          TEXT,
    events_pruned_at    TIMESTAMPTZ,
    events_pruned       BIGINT
);
CREATE INDEX runs_agent_created ON runs(agent, created_at);
CREATE INDEX runs_state_created ON runs(state, created_at);
CREATE INDEX runs_created ON runs(created_at, row_seq);
-- A fire (agent, schedule, instant) has at most one run in the cluster.
CREATE UNIQUE INDEX runs_fire ON runs(agent, schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL AND scheduled_for IS NOT NULL;
CREATE INDEX runs_by_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_events_kept ON runs(created_at) WHERE events_pruned_at IS NULL;
-- The run queue: queued runs in order.
CREATE INDEX runs_queued ON runs(created_at) WHERE state = 'queued';

CREATE TABLE events (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    at     TIMESTAMPTZ NOT NULL,
    kind   TEXT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE webhook_deliveries (
    agent       TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (agent, delivery_id)
);
CREATE INDEX webhook_deliveries_received ON webhook_deliveries(received_at);

CREATE TABLE schedule_watches (
    agent       TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    since       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (agent, schedule_id)
);

CREATE TABLE after_runs (
    agent        TEXT NOT NULL,
    after_run_id TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    PRIMARY KEY (agent, after_run_id)
);
CREATE TABLE watched_files (
    agent        TEXT NOT NULL,
    path         TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    claimed_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (agent, path, content_hash)
);

CREATE TABLE approvals (
    run_id       TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    call_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL,
    timeout_at   TIMESTAMPTZ NOT NULL,
    decided_at   TIMESTAMPTZ,
    approved     BOOLEAN,
    decided_by   TEXT,
    reason       TEXT,
    PRIMARY KEY (run_id, call_id)
);
CREATE INDEX approvals_pending ON approvals(run_id) WHERE decided_at IS NULL;

CREATE TABLE pipeline_runs (
    run_id  TEXT PRIMARY KEY REFERENCES runs(id),
    context TEXT
);
CREATE TABLE pipeline_steps (
    run_id        TEXT NOT NULL REFERENCES runs(id),
    step          TEXT NOT NULL,
    item          INTEGER NOT NULL,
    state         TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    output        TEXT,
    error         TEXT,
    items         TEXT,
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ,
    input_tokens  BIGINT,
    output_tokens BIGINT,
    cost_usd      DOUBLE PRECISION,
    child_run_id  TEXT,
    PRIMARY KEY (run_id, step, item)
);

CREATE TABLE memory_namespaces (
    id      BIGSERIAL PRIMARY KEY,
    name    TEXT NOT NULL UNIQUE,
    entries BIGINT NOT NULL DEFAULT 0,
    epoch   BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE memories (
    id           BIGSERIAL PRIMARY KEY,
    namespace    TEXT NOT NULL,
    content      TEXT NOT NULL,
    category     TEXT NOT NULL,
    importance   INTEGER NOT NULL CHECK (importance BETWEEN 1 AND 10),
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    access_count BIGINT NOT NULL DEFAULT 0,
    run_id       TEXT,
    metadata     TEXT NOT NULL DEFAULT '{}',
    impact       DOUBLE PRECISION NOT NULL,
    norm         DOUBLE PRECISION,
    norm_epoch   BIGINT,
    -- The memory's terms (memory_score::term_counts, not PostgreSQL's
    -- stemming): recall's other way to find candidates (GIN).
    terms        TEXT[] NOT NULL DEFAULT '{}'
);
CREATE INDEX memories_namespace_updated ON memories(namespace, updated_at);
CREATE INDEX memories_terms ON memories USING GIN (terms);
CREATE TABLE memory_terms (
    ns        BIGINT NOT NULL REFERENCES memory_namespaces(id),
    term      TEXT NOT NULL,
    impact    DOUBLE PRECISION NOT NULL,
    memory_id BIGINT NOT NULL,
    tf        INTEGER NOT NULL,
    PRIMARY KEY (ns, term, impact, memory_id)
);
CREATE TABLE memory_df (
    ns   BIGINT NOT NULL REFERENCES memory_namespaces(id),
    term TEXT NOT NULL,
    df   BIGINT NOT NULL,
    PRIMARY KEY (ns, term)
);

-- The `aurad serve` processes sharing this database: each heartbeats;
-- one silent for longer than the lease is dead, and another takes over its
-- runs.
CREATE TABLE nodes (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    version      TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    stopped_at   TIMESTAMPTZ,
    -- {"agent": "definition hash"} of the project it loaded (JSON).
    agents       TEXT NOT NULL DEFAULT '{}'
);
"#,
    },
    Migration {
        name: "memories without their terms array",
        // `memories.terms` and its GIN index were recall's other way to find
        // candidates; the impact-ordered postings (`memory_terms`) won
        // (`benches/pg_memory.rs`, which now adds them to its own database),
        // so no save pays for them any more. Dropping a column only edits
        // the catalog: no table rewrite, whatever the number of memories.
        // A node still running an older aurad writes `terms` and so fails
        // its memory saves until it is upgraded too.
        sql: r#"
DROP INDEX IF EXISTS memories_terms;
ALTER TABLE memories DROP COLUMN IF EXISTS terms;
"#,
    },
    Migration {
        name: "sessions",
        // Conversations (store::sessions): a session of one agent with its
        // running totals, and its messages in order, each with the turn's
        // run that added it (JSON of types::Message).
        sql: r#"
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    title         TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    turns         BIGINT NOT NULL DEFAULT 0,
    messages      BIGINT NOT NULL DEFAULT 0,
    input_tokens  BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd      DOUBLE PRECISION
);
CREATE INDEX sessions_updated ON sessions (updated_at);
CREATE INDEX sessions_by_agent ON sessions (agent, updated_at);
CREATE TABLE session_messages (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    message    TEXT NOT NULL,
    run_id     TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"#,
    },
    Migration {
        name: "cancel requests kept with their runs",
        // A cancel request for a run another node runs was a notification
        // alone: lost when that node's listening connection was down or its
        // receiver fell behind. It is now kept with the run too, and the
        // nodes look for requests they have not acted on (`shared_queue`).
        // The index holds only the runs asked to stop that have not ended
        // yet, so that look is cheap whatever the number of runs. A nullable
        // column with no default only edits the catalog.
        sql: r#"
ALTER TABLE runs ADD COLUMN cancel_requested_at TIMESTAMPTZ;
CREATE INDEX runs_cancel_requested ON runs (id)
    WHERE cancel_requested_at IS NOT NULL
      AND state IN ('queued', 'running', 'waiting_approval');
"#,
    },
    Migration {
        name: "session turns",
        // A turn of a session is a run (store::sessions): the run names its
        // session; `turn_run` is the run taking its turn now (one at a
        // time; the others wait, oldest first), and a long history keeps
        // the summary that stands for its oldest messages, up to and
        // including `summary_through` (a message's seq).
        sql: r#"
ALTER TABLE runs ADD COLUMN session_id TEXT;
CREATE INDEX runs_by_session ON runs (session_id, id) WHERE session_id IS NOT NULL;
ALTER TABLE sessions ADD COLUMN summary TEXT;
ALTER TABLE sessions ADD COLUMN summary_through BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN turn_run TEXT;
"#,
    },
    Migration {
        name: "provider limits",
        // The limits every node shares per provider (store::provider_limits):
        // its request slots, each free or held by one call of one node, and
        // the reservations of its request and token rates and of a 429's
        // pause, as times of the database's clock.
        sql: r#"
CREATE TABLE provider_slots (
    provider TEXT NOT NULL,
    slot INTEGER NOT NULL,
    holder TEXT,
    node TEXT,
    taken_at TIMESTAMPTZ,
    PRIMARY KEY (provider, slot)
);
CREATE TABLE provider_rates (
    provider TEXT PRIMARY KEY,
    next_request TIMESTAMPTZ NOT NULL,
    tokens_paid TIMESTAMPTZ NOT NULL,
    paused_until TIMESTAMPTZ NOT NULL
);
"#,
    },
    Migration {
        name: "channels",
        // The session each conversation of a channel is, where its answers
        // go now, and the turns whose answer was sent (store::channels).
        sql: r#"
CREATE TABLE channel_sessions (
    session_id TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    conversation TEXT NOT NULL,
    reply TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX channel_sessions_channel ON channel_sessions (channel);
CREATE TABLE channel_replies (
    run_id TEXT PRIMARY KEY,
    replied_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX channel_replies_at ON channel_replies (replied_at);
"#,
    },
];

/// Brings the schema up to [`MIGRATIONS`], one node at a time.
pub(super) async fn migrate(client: &mut Object) -> Result<(), StoreError> {
    migrate_with(client, MIGRATIONS).await
}

pub(super) async fn migrate_with(
    client: &mut Object,
    list: &[Migration],
) -> Result<(), StoreError> {
    let known = list.len() as i64;
    let tx = client
        .transaction()
        .await
        .map_err(pg("starting the schema migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg("waiting for another node's schema migration"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS aurad_schema (
            version    BIGINT PRIMARY KEY,
            name       TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(pg("creating the schema version table"))?;
    let found: i64 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM aurad_schema", &[])
        .await
        .map_err(pg("reading the schema version"))?
        .get(0);
    if found > known {
        return Err(StoreError::NewerSchema { found, known });
    }
    for (index, migration) in list.iter().enumerate().skip(found as usize) {
        let version = index as i64 + 1;
        tx.batch_execute(migration.sql).await.map_err(|e| {
            StoreError::Database(format!(
                "PostgreSQL schema migration {version} ({}) failed: {}",
                migration.name,
                super::error_text(&e)
            ))
        })?;
        tx.execute(
            "INSERT INTO aurad_schema (version, name) VALUES ($1, $2)",
            &[&version, &migration.name],
        )
        .await
        .map_err(pg("recording the schema version"))?;
        tracing::debug!(
            version,
            name = migration.name,
            "applied PostgreSQL schema migration"
        );
    }
    tx.commit()
        .await
        .map_err(pg("committing the schema migration"))
}
