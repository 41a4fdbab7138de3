//! Sessions on SQLite ([`crate::store::sessions`]): `sessions` rows and
//! their `session_messages`, a turn appended in one savepoint on the
//! writer thread (so two turns of one session never interleave their
//! messages). Reads on the reader thread.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Sqlite, StoreError, sql, time_text};
use crate::store::sessions::{EncodedTurn, message_from};
use crate::store::{
    SessionDeletion, SessionHistory, SessionMessage, SessionRecord, SessionSummary, SessionsPruned,
};

/// The condition under which run `?2` may take session `?1`'s turn: the
/// turn is free (no holder, or one whose run has ended or is gone) and no
/// older run of the session that has not ended waits before it.
const TURN_FREE: &str = "id = ?1
    AND (turn_run IS NULL OR turn_run = ?2 OR NOT EXISTS (
        SELECT 1 FROM runs WHERE runs.id = sessions.turn_run
                             AND runs.state IN ('queued', 'running', 'waiting_approval')))
    AND NOT EXISTS (
        SELECT 1 FROM runs WHERE runs.session_id = ?1 AND runs.id < ?2
                             AND runs.state IN ('queued', 'running', 'waiting_approval'))";

/// The states of a run that has not ended.
const OPEN: &str = "('queued', 'running', 'waiting_approval')";

const COLUMNS: &str = "id, agent, title, created_at, updated_at, turns, messages, \
                       input_tokens, output_tokens, cost_usd";

impl Sqlite {
    pub async fn create_session(
        &self,
        id: String,
        agent: String,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        self.call_durable(move |conn| {
            let context = "creating a session";
            let inserted = conn
                .execute(
                    "INSERT OR IGNORE INTO sessions (id, agent, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?3)",
                    params![id, agent, time_text(now)],
                )
                .map_err(sql(context))?;
            if inserted == 0 {
                return Err(StoreError::Conflict(format!(
                    "a session with the id `{id}` exists already; choose another id"
                )));
            }
            read(conn, &id)?.ok_or_else(|| StoreError::Database(format!("session {id} vanished")))
        })
        .await
    }

    pub async fn session(&self, id: String) -> Result<Option<SessionRecord>, StoreError> {
        self.read(move |conn| read(conn, &id)).await
    }

    pub async fn sessions(
        &self,
        agent: Option<String>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.read(move |conn| {
            let context = "listing sessions";
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM sessions WHERE ?1 IS NULL OR agent = ?1
                     ORDER BY updated_at DESC, id DESC LIMIT ?2"
                ))
                .map_err(sql(context))?;
            let rows = stmt
                .query_map(params![agent, limit], record)
                .map_err(sql(context))?;
            rows.map(|r| r.map_err(sql(context))).collect()
        })
        .await
    }

    pub async fn session_messages(&self, id: String) -> Result<Vec<SessionMessage>, StoreError> {
        self.read(move |conn| messages_after(conn, &id, 0)).await
    }

    pub async fn append_turn(
        &self,
        turn: EncodedTurn,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        self.call_durable(move |conn| {
            let tx = conn.savepoint().map_err(sql("storing a session's turn"))?;
            let record = append(&tx, &turn, &time_text(now))?;
            tx.commit().map_err(sql("storing a session's turn"))?;
            Ok(record)
        })
        .await
    }

    pub async fn take_session_turn(
        &self,
        session_id: String,
        run_id: String,
    ) -> Result<bool, StoreError> {
        self.call(move |conn| {
            let context = "taking a session's turn";
            let taken = conn
                .execute(
                    &format!("UPDATE sessions SET turn_run = ?2 WHERE {TURN_FREE}"),
                    params![session_id, run_id],
                )
                .map_err(sql(context))?;
            if taken == 1 {
                return Ok(true);
            }
            if read(conn, &session_id)?.is_none() {
                return Err(StoreError::NotFound(format!(
                    "no session has the id `{session_id}` (it was deleted)"
                )));
            }
            Ok(false)
        })
        .await
    }

    pub async fn session_history(&self, id: String) -> Result<SessionHistory, StoreError> {
        self.read(move |conn| {
            let context = "reading a session's history";
            let summary: Option<(Option<String>, i64)> = conn
                .query_row(
                    "SELECT summary, summary_through FROM sessions WHERE id = ?1",
                    params![id],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(sql(context))?;
            let Some((summary, through)) = summary else {
                return Err(StoreError::NotFound(format!(
                    "no session has the id `{id}`"
                )));
            };
            let summary = summary.map(|text| SessionSummary {
                text,
                through: u64::try_from(through).unwrap_or_default(),
            });
            let after = if summary.is_some() { through } else { 0 };
            Ok(SessionHistory {
                summary,
                messages: messages_after(conn, &id, after)?,
            })
        })
        .await
    }

    pub async fn delete_session(&self, id: String) -> Result<SessionDeletion, StoreError> {
        self.call(move |conn| {
            let context = "deleting a session";
            let tx = conn.savepoint().map_err(sql(context))?;
            let open = {
                let mut stmt = tx
                    .prepare_cached(&format!(
                        "SELECT id FROM runs WHERE session_id = ?1 AND state IN {OPEN} ORDER BY id"
                    ))
                    .map_err(sql(context))?;
                let rows = stmt
                    .query_map(params![id], |row| row.get::<_, String>(0))
                    .map_err(sql(context))?;
                rows.collect::<Result<Vec<_>, _>>().map_err(sql(context))?
            };
            if !open.is_empty() {
                return Ok(SessionDeletion::TurnsOpen(open));
            }
            tx.execute(
                "DELETE FROM session_messages WHERE session_id = ?1",
                params![id],
            )
            .map_err(sql(context))?;
            let deleted = tx
                .execute("DELETE FROM sessions WHERE id = ?1", params![id])
                .map_err(sql(context))?;
            tx.commit().map_err(sql(context))?;
            Ok(if deleted == 1 {
                SessionDeletion::Deleted
            } else {
                SessionDeletion::NotFound
            })
        })
        .await
    }

    pub async fn prune_sessions(
        &self,
        idle_before: DateTime<Utc>,
        max_per_agent: i64,
        limit: i64,
        dry_run: bool,
    ) -> Result<SessionsPruned, StoreError> {
        self.call(move |conn| {
            let context = "pruning sessions";
            let tx = conn.savepoint().map_err(sql(context))?;
            let ids: Vec<String> = {
                let mut stmt = tx
                    .prepare_cached(&format!(
                        "SELECT id FROM (
                             SELECT id, updated_at,
                                    ROW_NUMBER() OVER (PARTITION BY agent
                                                       ORDER BY updated_at DESC, id DESC) AS place
                             FROM sessions) AS ranked
                         WHERE (updated_at < ?1 OR place > ?2)
                           AND NOT EXISTS (SELECT 1 FROM runs
                                           WHERE runs.session_id = ranked.id AND runs.state IN {OPEN})
                         ORDER BY updated_at LIMIT ?3"
                    ))
                    .map_err(sql(context))?;
                let rows = stmt
                    .query_map(params![time_text(idle_before), max_per_agent, limit], |row| {
                        row.get::<_, String>(0)
                    })
                    .map_err(sql(context))?;
                rows.collect::<Result<_, _>>().map_err(sql(context))?
            };
            let mut pruned = SessionsPruned::default();
            for id in &ids {
                let messages: i64 = tx
                    .query_row(
                        "SELECT messages FROM sessions WHERE id = ?1",
                        params![id],
                        |row| row.get(0),
                    )
                    .map_err(sql(context))?;
                pruned.sessions += 1;
                pruned.messages += u64::try_from(messages).unwrap_or_default();
                if !dry_run {
                    tx.execute("DELETE FROM session_messages WHERE session_id = ?1", params![id])
                        .map_err(sql(context))?;
                    tx.execute("DELETE FROM sessions WHERE id = ?1", params![id])
                        .map_err(sql(context))?;
                }
            }
            tx.commit().map_err(sql(context))?;
            Ok(pruned)
        })
        .await
    }
}

/// The messages of session `id` after seq `after`, in order.
fn messages_after(
    conn: &Connection,
    id: &str,
    after: i64,
) -> Result<Vec<SessionMessage>, StoreError> {
    let context = "reading a session's messages";
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, message, run_id, created_at FROM session_messages
             WHERE session_id = ?1 AND seq > ?2 ORDER BY seq",
        )
        .map_err(sql(context))?;
    let rows = stmt
        .query_map(params![id, after], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<String>>(2)?,
                row.get::<_, String>(3)?,
            ))
        })
        .map_err(sql(context))?;
    let mut messages = Vec::new();
    for row in rows {
        let (seq, text, run_id, at) = row.map_err(sql(context))?;
        let seq = u64::try_from(seq).unwrap_or_default();
        messages.push(SessionMessage {
            seq,
            message: message_from(id, seq, &text)?,
            run_id,
            created_at: parse_time(&at),
        });
    }
    Ok(messages)
}

/// Appends `turn` to its session inside the caller's transaction: its
/// messages after the session's last, its usage to the totals, a title if
/// it has none, its summary if it wrote one. The session as it now is.
pub(super) fn append(
    tx: &Connection,
    turn: &EncodedTurn,
    at: &str,
) -> Result<SessionRecord, StoreError> {
    let context = "storing a session's turn";
    let id = &turn.session_id;
    let last: Option<i64> = tx
        .query_row(
            "SELECT messages FROM sessions WHERE id = ?1",
            params![id],
            |row| row.get(0),
        )
        .optional()
        .map_err(sql(context))?;
    let Some(last) = last else {
        return Err(StoreError::NotFound(format!(
            "no session has the id `{id}` (it was deleted while its turn ran)"
        )));
    };
    for (i, text) in turn.texts.iter().enumerate() {
        let seq = last + 1 + i64::try_from(i).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO session_messages (session_id, seq, message, run_id, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, seq, text, turn.run_id, at],
        )
        .map_err(sql(context))?;
    }
    let (summary, through) = turn.summary.clone().unzip();
    tx.execute(
        "UPDATE sessions SET
            updated_at = ?2, turns = turns + 1, messages = messages + ?3,
            input_tokens = input_tokens + ?4, output_tokens = output_tokens + ?5,
            cost_usd = CASE WHEN ?6 IS NULL THEN cost_usd ELSE COALESCE(cost_usd, 0) + ?6 END,
            title = COALESCE(title, ?7),
            summary = COALESCE(?8, summary),
            summary_through = COALESCE(?9, summary_through),
            turn_run = CASE WHEN turn_run = ?10 THEN NULL ELSE turn_run END
         WHERE id = ?1",
        params![
            id,
            at,
            turn.added(),
            turn.input_tokens,
            turn.output_tokens,
            turn.cost_usd,
            turn.title,
            summary,
            through,
            turn.run_id,
        ],
    )
    .map_err(sql(context))?;
    read(tx, id)?.ok_or_else(|| StoreError::Database(format!("session {id} vanished")))
}

pub(super) fn read(conn: &Connection, id: &str) -> Result<Option<SessionRecord>, StoreError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
        params![id],
        record,
    )
    .optional()
    .map_err(sql("reading a session"))
}

fn record(row: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    let count = |i: usize| -> rusqlite::Result<u64> {
        Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or_default())
    };
    Ok(SessionRecord {
        id: row.get(0)?,
        agent: row.get(1)?,
        title: row.get(2)?,
        created_at: parse_time(&row.get::<_, String>(3)?),
        updated_at: parse_time(&row.get::<_, String>(4)?),
        turns: count(5)?,
        messages: count(6)?,
        input_tokens: count(7)?,
        output_tokens: count(8)?,
        cost_usd: row.get(9)?,
    })
}

/// A stored time; the epoch for one that does not parse (aurad writes
/// every one of them).
fn parse_time(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.to_utc())
        .unwrap_or_default()
}
