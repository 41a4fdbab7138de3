//! Runs and their events: the `runs` and `events` tables. The typed [`Store`]
//! methods here send plain functions over a `Connection` to the writer
//! thread; all of this module's SQL is in those functions.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params, params_from_iter};
use serde::{Deserialize, Serialize};

use super::{Durability, Store, StoreError, now_text, set_durability, sql};
use crate::types::{RunEvent, RunState, Usage};

/// A run about to start, claimed before its first model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub id: String,
    pub agent: String,
    /// What started it: `cli`, `schedule`, `api`, `webhook`.
    pub trigger: String,
    pub input: String,
    /// `<provider>/<model>` as resolved for this run.
    pub model: String,
    pub definition_hash: String,
    /// The process running it (e.g. `pid:1234`); empty means none.
    pub owner: String,
}

/// A stored run. Times are RFC 3339 UTC with milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub agent: String,
    pub state: RunState,
    pub trigger: String,
    pub input: String,
    pub model: String,
    pub definition_hash: String,
    pub owner: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub usage: Usage,
}

/// Which runs [`Store::list_runs`] returns, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub agent: Option<String>,
    pub state: Option<RunState>,
    /// At most this many; 0 means no limit.
    pub limit: usize,
}

/// The shortest prefix [`Store::get_run`] looks up.
const MIN_PREFIX: usize = 4;
/// How many matches an ambiguous prefix error shows (it holds one more, to
/// tell that there are more).
pub(super) const MAX_MATCHES: usize = 10;

impl Store {
    /// Records `run` as `running` (created and started now), committed with
    /// `synchronous=FULL` before this returns. An id in use is a `Conflict`.
    pub async fn claim_run(&self, run: NewRun) -> Result<(), StoreError> {
        self.call(move |conn| claim(conn, &run)).await
    }

    /// Appends `events` to the run in one transaction (`synchronous=NORMAL`),
    /// numbering them after the run's last stored event.
    pub async fn append_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let rows = encode_events(run_id, &events)?;
        let run_id = run_id.to_owned();
        self.call(move |conn| append(conn, &run_id, &rows)).await
    }

    /// Records the run's final state, committed with `synchronous=FULL`.
    pub async fn finish_run(
        &self,
        run_id: &str,
        state: RunState,
        error: Option<String>,
        output: Option<String>,
        usage: Usage,
    ) -> Result<(), StoreError> {
        self.finish_run_with_events(run_id, Vec::new(), state, error, output, usage)
            .await
    }

    /// Appends the run's last events and records its final state in one
    /// transaction committed with `synchronous=FULL`, so the stored events
    /// (ending with `finished`) and the row's state never disagree.
    pub async fn finish_run_with_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        state: RunState,
        error: Option<String>,
        output: Option<String>,
        usage: Usage,
    ) -> Result<(), StoreError> {
        if !state.is_final() {
            return Err(StoreError::Invalid(format!(
                "run {run_id}: cannot finish a run as `{state}`, which is not a final state"
            )));
        }
        let rows = encode_events(run_id, &events)?;
        let run_id = run_id.to_owned();
        self.call(move |conn| finish(conn, &run_id, &rows, state, error, output, usage))
            .await
    }

    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let filter = filter.clone();
        self.call(move |conn| list(conn, &filter)).await
    }

    /// The runs matching `filter`, newest first. Blocking.
    pub fn list_runs_blocking(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let filter = filter.clone();
        self.call_blocking(move |conn| list(conn, &filter))
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.call(move |conn| get(conn, &id)).await
    }

    /// The run with this id, or with this unique id prefix (at least 4
    /// characters). An ambiguous prefix is an error listing the matches.
    /// Blocking.
    pub fn get_run_blocking(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.call_blocking(move |conn| get(conn, &id))
    }

    pub async fn run_events(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        let run_id = run_id.to_owned();
        self.call(move |conn| events(conn, &run_id)).await
    }

    /// The run's events in order (the exact id). `NotFound` when there is no
    /// such run. Blocking.
    pub fn run_events_blocking(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        let run_id = run_id.to_owned();
        self.call_blocking(move |conn| events(conn, &run_id))
    }
}

/// Serialises events on the caller's side, so the writer thread only writes.
fn encode_events(
    run_id: &str,
    events: &[RunEvent],
) -> Result<Vec<(&'static str, String)>, StoreError> {
    events
        .iter()
        .map(|event| {
            serde_json::to_string(event)
                .map(|data| (event.kind(), data))
                .map_err(|e| {
                    StoreError::Invalid(format!(
                        "run {run_id}: cannot encode a `{}` event: {e}",
                        event.kind()
                    ))
                })
        })
        .collect()
}

fn tokens_to_sql(tokens: Option<u64>) -> Option<i64> {
    tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX))
}

fn claim(conn: &mut Connection, run: &NewRun) -> Result<(), StoreError> {
    set_durability(conn, Durability::Full)?;
    let now = now_text();
    let owner = Some(run.owner.as_str()).filter(|o| !o.is_empty());
    let result = conn.execute(
        r#"INSERT INTO runs (id, agent, state, "trigger", input, model, definition_hash, owner,
                             created_at, started_at)
           VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)"#,
        params![
            run.id,
            run.agent,
            RunState::Running.as_str(),
            run.trigger,
            run.input,
            run.model,
            run.definition_hash,
            owner,
            now
        ],
    );
    match result {
        Ok(_) => Ok(()),
        Err(e)
            if e.sqlite_extended_error_code()
                == Some(rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY) =>
        {
            Err(StoreError::Conflict(format!(
                "run {} exists already; every run needs a new id",
                run.id
            )))
        }
        Err(e) => Err(StoreError::sqlite(
            &format!("run {}: cannot record its start", run.id),
            e,
        )),
    }
}

fn append(
    conn: &mut Connection,
    run_id: &str,
    rows: &[(&'static str, String)],
) -> Result<(), StoreError> {
    set_durability(conn, Durability::Normal)?;
    let context = |what: &str| format!("run {run_id}: cannot store events ({what})");
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| StoreError::sqlite(&context("begin"), e))?;
    insert_events(&tx, run_id, rows)?;
    tx.commit()
        .map_err(|e| StoreError::sqlite(&context("commit"), e))
}

/// Inserts `rows` after the run's last stored event, inside `tx`.
fn insert_events(
    tx: &rusqlite::Transaction<'_>,
    run_id: &str,
    rows: &[(&'static str, String)],
) -> Result<(), StoreError> {
    let context = |what: &str| format!("run {run_id}: cannot store events ({what})");
    let (exists, last): (bool, Option<i64>) = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1),
                    (SELECT MAX(seq) FROM events WHERE run_id = ?1)",
            [run_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(|e| StoreError::sqlite(&context("read the last seq"), e))?;
    if !exists {
        return Err(StoreError::NotFound(format!(
            "run {run_id} does not exist; claim a run before storing its events"
        )));
    }
    let at = now_text();
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO events (run_id, seq, at, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(|e| StoreError::sqlite(&context("prepare"), e))?;
        let mut seq = last.unwrap_or(0);
        for (kind, data) in rows {
            seq += 1;
            insert
                .execute(params![run_id, seq, at, kind, data])
                .map_err(|e| StoreError::sqlite(&context("insert"), e))?;
        }
    }
    Ok(())
}

fn finish(
    conn: &mut Connection,
    run_id: &str,
    rows: &[(&'static str, String)],
    state: RunState,
    error: Option<String>,
    output: Option<String>,
    usage: Usage,
) -> Result<(), StoreError> {
    set_durability(conn, Durability::Full)?;
    let context = format!("run {run_id}: cannot record its final state");
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| StoreError::sqlite(&context, e))?;
    if !rows.is_empty() {
        insert_events(&tx, run_id, rows)?;
    }
    let changed = tx
        .execute(
            "UPDATE runs SET state = ?2, finished_at = ?3, error = ?4, output = ?5,
                             input_tokens = ?6, output_tokens = ?7
             WHERE id = ?1",
            params![
                run_id,
                state.as_str(),
                now_text(),
                error,
                output,
                tokens_to_sql(usage.input_tokens),
                tokens_to_sql(usage.output_tokens)
            ],
        )
        .map_err(|e| StoreError::sqlite(&context, e))?;
    if changed == 0 {
        return Err(StoreError::NotFound(format!(
            "run {run_id} does not exist; claim a run before finishing it"
        )));
    }
    tx.commit().map_err(|e| StoreError::sqlite(&context, e))
}

const RUN_COLUMNS: &str = r#"id, agent, state, "trigger", input, model, definition_hash, owner,
    created_at, started_at, finished_at, error, output, input_tokens, output_tokens"#;

/// A `runs` row as stored, before its values are checked.
struct RawRun {
    record: RunRecord,
    state: String,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
}

fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        record: RunRecord {
            id: row.get(0)?,
            agent: row.get(1)?,
            state: RunState::Queued, // replaced by `check`
            trigger: row.get(3)?,
            input: row.get(4)?,
            model: row.get(5)?,
            definition_hash: row.get(6)?,
            owner: row.get(7)?,
            created_at: row.get(8)?,
            started_at: row.get(9)?,
            finished_at: row.get(10)?,
            error: row.get(11)?,
            output: row.get(12)?,
            usage: Usage::default(),
        },
        state: row.get(2)?,
        input_tokens: row.get(13)?,
        output_tokens: row.get(14)?,
    })
}

impl RawRun {
    fn check(self) -> Result<RunRecord, StoreError> {
        let RawRun {
            mut record,
            state,
            input_tokens,
            output_tokens,
        } = self;
        let corrupt = |message: String| StoreError::CorruptRun {
            run_id: record.id.clone(),
            message,
        };
        record.state =
            RunState::parse(&state).ok_or_else(|| corrupt(format!("unknown state `{state}`")))?;
        let tokens = |name: &str, value: Option<i64>| {
            value
                .map(|v| u64::try_from(v).map_err(|_| corrupt(format!("negative {name} {v}"))))
                .transpose()
        };
        record.usage = Usage {
            input_tokens: tokens("input_tokens", input_tokens)?,
            output_tokens: tokens("output_tokens", output_tokens)?,
        };
        Ok(record)
    }
}

fn list(conn: &mut Connection, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
    let mut clauses = Vec::new();
    let mut values = Vec::new();
    if let Some(agent) = &filter.agent {
        values.push(Value::Text(agent.clone()));
        clauses.push(format!("agent = ?{}", values.len()));
    }
    if let Some(state) = filter.state {
        values.push(Value::Text(state.as_str().to_owned()));
        clauses.push(format!("state = ?{}", values.len()));
    }
    let limit = match filter.limit {
        0 => -1, // SQLite: no limit
        n => i64::try_from(n).unwrap_or(i64::MAX),
    };
    values.push(Value::Integer(limit));
    let filter_sql = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let query = format!(
        "SELECT {RUN_COLUMNS} FROM runs {filter_sql} ORDER BY created_at DESC, rowid DESC LIMIT ?{}",
        values.len()
    );
    let mut stmt = conn.prepare_cached(&query).map_err(sql("listing runs"))?;
    let rows = stmt
        .query_map(params_from_iter(values), raw_run)
        .map_err(sql("listing runs"))?;
    rows.map(|raw| raw.map_err(sql("listing runs"))?.check())
        .collect()
}

fn get(conn: &mut Connection, id: &str) -> Result<Option<RunRecord>, StoreError> {
    let context = "looking up a run";
    let exact = conn
        .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], raw_run).optional())
        .map_err(sql(context))?;
    if let Some(raw) = exact {
        return raw.check().map(Some);
    }
    if id.chars().count() < MIN_PREFIX {
        return Err(StoreError::Invalid(format!(
            "no run has the id `{id}`; give the whole run id or at least {MIN_PREFIX} characters of it"
        )));
    }
    // Ids are compared bytewise, so `[id, id + U+10FFFF)` holds every id
    // starting with `id` and the primary key index finds them.
    let upper = format!("{id}\u{10FFFF}");
    let matches: Vec<String> = conn
        .prepare_cached("SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3")
        .and_then(|mut stmt| {
            stmt.query_map(params![id, upper, MAX_MATCHES as i64 + 1], |row| row.get(0))?
                .collect()
        })
        .map_err(sql(context))?;
    match matches.as_slice() {
        [] => Ok(None),
        [only] => {
            let only = only.clone();
            get(conn, &only)
        }
        _ => Err(StoreError::Ambiguous {
            prefix: id.to_owned(),
            matches,
        }),
    }
}

fn events(conn: &mut Connection, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
    let context = "reading run events";
    let rows: Vec<(i64, String)> = conn
        .prepare_cached("SELECT seq, data FROM events WHERE run_id = ?1 ORDER BY seq")
        .and_then(|mut stmt| {
            stmt.query_map([run_id], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })
        .map_err(sql(context))?;
    if rows.is_empty() {
        let exists: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)",
                [run_id],
                |row| row.get(0),
            )
            .map_err(sql(context))?;
        if !exists {
            return Err(StoreError::NotFound(format!(
                "no run {run_id}; list runs with `aurad runs`"
            )));
        }
    }
    rows.into_iter()
        .map(|(seq, data)| {
            serde_json::from_str(&data).map_err(|e| StoreError::CorruptEvent {
                run_id: run_id.to_owned(),
                seq,
                message: e.to_string(),
            })
        })
        .collect()
}
