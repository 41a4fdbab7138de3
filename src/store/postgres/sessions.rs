//! Sessions on PostgreSQL, the same contract as SQLite's
//! ([`crate::store::sessions`]). A turn is appended in one transaction
//! that first locks the session's row (`FOR UPDATE`), so two nodes
//! appending to one session take turns and never interleave or reuse a
//! message's place.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::run_rows::millis;
use super::{Postgres, pg};
use crate::store::sessions::{EncodedTurn, message_from};
use crate::store::{
    SessionDeletion, SessionHistory, SessionMessage, SessionRecord, SessionSummary, SessionsPruned,
    StoreError,
};

pub(super) const COLUMNS: &str = "id, agent, title, created_at, updated_at, turns, messages, \
                       input_tokens, output_tokens, cost_usd";

impl Postgres {
    pub(crate) async fn create_session(
        &self,
        id: String,
        agent: String,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let now = millis(now);
        self.with_client(move |client| async move {
            let context = "creating a session";
            let row = client
                .query_opt(
                    &format!(
                        "INSERT INTO sessions (id, agent, created_at, updated_at)
                         VALUES ($1, $2, $3, $3) ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
                    ),
                    &[&id, &agent, &now],
                )
                .await
                .map_err(pg(context))?;
            match row {
                Some(row) => record(&row),
                None => Err(StoreError::Conflict(format!(
                    "a session with the id `{id}` exists already; choose another id"
                ))),
            }
        })
        .await
    }

    pub(crate) async fn session(&self, id: String) -> Result<Option<SessionRecord>, StoreError> {
        self.with_client(move |client| async move {
            let row = client
                .query_opt(
                    &format!("SELECT {COLUMNS} FROM sessions WHERE id = $1"),
                    &[&id],
                )
                .await
                .map_err(pg("reading a session"))?;
            row.as_ref().map(record).transpose()
        })
        .await
    }

    pub(crate) async fn sessions(
        &self,
        agent: Option<String>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_client(move |client| async move {
            let rows = client
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM sessions
                         WHERE $1::TEXT IS NULL OR agent = $1
                         ORDER BY updated_at DESC, id DESC LIMIT $2"
                    ),
                    &[&agent, &limit],
                )
                .await
                .map_err(pg("listing sessions"))?;
            rows.iter().map(record).collect()
        })
        .await
    }

    pub(crate) async fn session_messages(
        &self,
        id: String,
    ) -> Result<Vec<SessionMessage>, StoreError> {
        self.with_client(move |client| async move { messages_after(&client, &id, 0).await })
            .await
    }

    pub(crate) async fn append_turn(
        &self,
        turn: EncodedTurn,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let now = millis(now);
        self.with_client(move |mut client| async move {
            let context = "storing a session's turn";
            let tx = client.transaction().await.map_err(pg(context))?;
            let record = append(&tx, &turn, now).await?;
            tx.commit().await.map_err(pg(context))?;
            Ok(record)
        })
        .await
    }

    pub(crate) async fn take_session_turn(
        &self,
        session_id: String,
        run_id: String,
    ) -> Result<bool, StoreError> {
        self.with_client(move |client| async move {
            let context = "taking a session's turn";
            let taken = client
                .execute(
                    "UPDATE sessions SET turn_run = $2
                     WHERE id = $1
                       AND (turn_run IS NULL OR turn_run = $2 OR NOT EXISTS (
                           SELECT 1 FROM runs WHERE runs.id = sessions.turn_run
                                                AND runs.state IN ('queued', 'running', 'waiting_approval')))
                       AND NOT EXISTS (
                           SELECT 1 FROM runs WHERE runs.session_id = $1 AND runs.id < $2
                                                AND runs.state IN ('queued', 'running', 'waiting_approval'))",
                    &[&session_id, &run_id],
                )
                .await
                .map_err(pg(context))?;
            if taken == 1 {
                return Ok(true);
            }
            let exists = client
                .query_opt("SELECT 1 FROM sessions WHERE id = $1", &[&session_id])
                .await
                .map_err(pg(context))?;
            if exists.is_none() {
                return Err(StoreError::NotFound(format!(
                    "no session has the id `{session_id}` (it was deleted)"
                )));
            }
            Ok(false)
        })
        .await
    }

    pub(crate) async fn session_history(&self, id: String) -> Result<SessionHistory, StoreError> {
        self.with_client(move |client| async move {
            let context = "reading a session's history";
            let Some(row) = client
                .query_opt(
                    "SELECT summary, summary_through FROM sessions WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(pg(context))?
            else {
                return Err(StoreError::NotFound(format!(
                    "no session has the id `{id}`"
                )));
            };
            let summary: Option<String> = row.try_get(0).map_err(pg(context))?;
            let through: i64 = row.try_get(1).map_err(pg(context))?;
            let summary = summary.map(|text| SessionSummary {
                text,
                through: u64::try_from(through).unwrap_or_default(),
            });
            let after = if summary.is_some() { through } else { 0 };
            Ok(SessionHistory {
                summary,
                messages: messages_after(&client, &id, after).await?,
            })
        })
        .await
    }

    pub(crate) async fn delete_session(&self, id: String) -> Result<SessionDeletion, StoreError> {
        self.with_client(move |mut client| async move {
            let context = "deleting a session";
            let tx = client.transaction().await.map_err(pg(context))?;
            // The row locked first: a turn taken meanwhile (which updates
            // it) waits for this transaction, or this one for it.
            let found = tx
                .query_opt("SELECT id FROM sessions WHERE id = $1 FOR UPDATE", &[&id])
                .await
                .map_err(pg(context))?;
            if found.is_none() {
                return Ok(SessionDeletion::NotFound);
            }
            let open: Vec<String> = tx
                .query(
                    "SELECT id FROM runs WHERE session_id = $1
                     AND state IN ('queued', 'running', 'waiting_approval') ORDER BY id",
                    &[&id],
                )
                .await
                .map_err(pg(context))?
                .iter()
                .map(|row| row.get(0))
                .collect();
            if !open.is_empty() {
                return Ok(SessionDeletion::TurnsOpen(open));
            }
            tx.execute("DELETE FROM session_messages WHERE session_id = $1", &[&id])
                .await
                .map_err(pg(context))?;
            let deleted = tx
                .execute("DELETE FROM sessions WHERE id = $1", &[&id])
                .await
                .map_err(pg(context))?;
            tx.commit().await.map_err(pg(context))?;
            Ok(if deleted == 1 {
                SessionDeletion::Deleted
            } else {
                SessionDeletion::NotFound
            })
        })
        .await
    }

    pub(crate) async fn prune_sessions(
        &self,
        idle_before: DateTime<Utc>,
        max_per_agent: i64,
        limit: i64,
        dry_run: bool,
    ) -> Result<SessionsPruned, StoreError> {
        self.with_client(move |mut client| async move {
            let context = "pruning sessions";
            let tx = client.transaction().await.map_err(pg(context))?;
            // Locked and skipped when another node holds them: nodes
            // pruning at once take disjoint sessions.
            let rows = tx
                .query(
                    "SELECT s.id, s.messages FROM sessions s
                     JOIN (SELECT id, ROW_NUMBER() OVER (PARTITION BY agent
                                                         ORDER BY updated_at DESC, id DESC) AS place
                           FROM sessions) ranked ON ranked.id = s.id
                     WHERE (s.updated_at < $1 OR ranked.place > $2)
                       AND NOT EXISTS (SELECT 1 FROM runs
                                       WHERE runs.session_id = s.id
                                         AND runs.state IN ('queued', 'running', 'waiting_approval'))
                     ORDER BY s.updated_at LIMIT $3
                     FOR UPDATE OF s SKIP LOCKED",
                    &[&idle_before, &max_per_agent, &limit],
                )
                .await
                .map_err(pg(context))?;
            let mut pruned = SessionsPruned::default();
            let mut ids = Vec::with_capacity(rows.len());
            for row in &rows {
                let id: String = row.try_get(0).map_err(pg(context))?;
                let messages: i64 = row.try_get(1).map_err(pg(context))?;
                pruned.sessions += 1;
                pruned.messages += u64::try_from(messages).unwrap_or_default();
                ids.push(id);
            }
            if !dry_run && !ids.is_empty() {
                tx.execute("DELETE FROM session_messages WHERE session_id = ANY($1)", &[&ids])
                    .await
                    .map_err(pg(context))?;
                tx.execute("DELETE FROM sessions WHERE id = ANY($1)", &[&ids])
                    .await
                    .map_err(pg(context))?;
            }
            tx.commit().await.map_err(pg(context))?;
            Ok(pruned)
        })
        .await
    }
}

/// The messages of session `id` after seq `after`, in order.
async fn messages_after(
    client: &tokio_postgres::Client,
    id: &str,
    after: i64,
) -> Result<Vec<SessionMessage>, StoreError> {
    let context = "reading a session's messages";
    let rows = client
        .query(
            "SELECT seq, message, run_id, created_at FROM session_messages
             WHERE session_id = $1 AND seq > $2 ORDER BY seq",
            &[&id, &after],
        )
        .await
        .map_err(pg(context))?;
    let mut messages = Vec::with_capacity(rows.len());
    for row in &rows {
        let seq: i64 = row.try_get(0).map_err(pg(context))?;
        let text: String = row.try_get(1).map_err(pg(context))?;
        let seq = u64::try_from(seq).unwrap_or_default();
        messages.push(SessionMessage {
            seq,
            message: message_from(id, seq, &text)?,
            run_id: row.try_get(2).map_err(pg(context))?,
            created_at: row.try_get(3).map_err(pg(context))?,
        });
    }
    Ok(messages)
}

/// Appends `turn` to its session inside the caller's transaction, the
/// session's row locked first (`FOR UPDATE`): its messages after the
/// session's last, its usage to the totals, a title if it has none, its
/// summary if it wrote one. The session as it now is.
pub(super) async fn append(
    tx: &deadpool_postgres::Transaction<'_>,
    turn: &EncodedTurn,
    now: DateTime<Utc>,
) -> Result<SessionRecord, StoreError> {
    let context = "storing a session's turn";
    let id = &turn.session_id;
    let Some(row) = tx
        .query_opt(
            "SELECT messages FROM sessions WHERE id = $1 FOR UPDATE",
            &[id],
        )
        .await
        .map_err(pg(context))?
    else {
        return Err(StoreError::NotFound(format!(
            "no session has the id `{id}` (it was deleted while its turn ran)"
        )));
    };
    let last: i64 = row.try_get(0).map_err(pg(context))?;
    let insert = tx
        .prepare_cached(
            "INSERT INTO session_messages (session_id, seq, message, run_id, created_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await
        .map_err(pg(context))?;
    for (i, text) in turn.texts.iter().enumerate() {
        let seq = last + 1 + i64::try_from(i).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 5] = [id, &seq, text, &turn.run_id, &now];
        tx.execute(&insert, &params).await.map_err(pg(context))?;
    }
    let added = turn.added();
    let (summary, through) = turn.summary.clone().unzip();
    let params: [&(dyn ToSql + Sync); 10] = [
        id,
        &now,
        &added,
        &turn.input_tokens,
        &turn.output_tokens,
        &turn.cost_usd,
        &turn.title,
        &summary,
        &through,
        &turn.run_id,
    ];
    let row = tx
        .query_one(
            &format!(
                "UPDATE sessions SET
                    updated_at = $2, turns = turns + 1, messages = messages + $3,
                    input_tokens = input_tokens + $4, output_tokens = output_tokens + $5,
                    cost_usd = CASE WHEN $6::DOUBLE PRECISION IS NULL THEN cost_usd
                                    ELSE COALESCE(cost_usd, 0) + $6 END,
                    title = COALESCE(title, $7),
                    summary = COALESCE($8, summary),
                    summary_through = COALESCE($9, summary_through),
                    turn_run = CASE WHEN turn_run = $10 THEN NULL ELSE turn_run END
                 WHERE id = $1 RETURNING {COLUMNS}"
            ),
            &params,
        )
        .await
        .map_err(pg(context))?;
    record(&row)
}

pub(super) fn record(row: &Row) -> Result<SessionRecord, StoreError> {
    let context = "reading a session";
    let count = |i: usize| -> Result<u64, StoreError> {
        let n: i64 = row.try_get(i).map_err(pg(context))?;
        Ok(u64::try_from(n).unwrap_or_default())
    };
    Ok(SessionRecord {
        id: row.try_get(0).map_err(pg(context))?,
        agent: row.try_get(1).map_err(pg(context))?,
        title: row.try_get(2).map_err(pg(context))?,
        created_at: row.try_get(3).map_err(pg(context))?,
        updated_at: row.try_get(4).map_err(pg(context))?,
        turns: count(5)?,
        messages: count(6)?,
        input_tokens: count(7)?,
        output_tokens: count(8)?,
        cost_usd: row.try_get(9).map_err(pg(context))?,
    })
}
