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
use crate::store::{SessionMessage, SessionRecord, StoreError};

const COLUMNS: &str = "id, agent, title, created_at, updated_at, turns, messages, \
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
        self.with_client(move |client| async move {
            let context = "reading a session's messages";
            let rows = client
                .query(
                    "SELECT seq, message, run_id, created_at FROM session_messages
                     WHERE session_id = $1 ORDER BY seq",
                    &[&id],
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
                    message: message_from(&id, seq, &text)?,
                    run_id: row.try_get(2).map_err(pg(context))?,
                    created_at: row.try_get(3).map_err(pg(context))?,
                });
            }
            Ok(messages)
        })
        .await
    }

    pub(crate) async fn append_turn(
        &self,
        id: String,
        turn: EncodedTurn,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let now = millis(now);
        self.with_client(move |mut client| async move {
            let context = "storing a session's turn";
            let tx = client.transaction().await.map_err(pg(context))?;
            let Some(row) = tx
                .query_opt(
                    "SELECT messages FROM sessions WHERE id = $1 FOR UPDATE",
                    &[&id],
                )
                .await
                .map_err(pg(context))?
            else {
                return Err(StoreError::NotFound(format!(
                    "no session has the id `{id}`"
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
                let params: [&(dyn ToSql + Sync); 5] = [&id, &seq, text, &turn.run_id, &now];
                tx.execute(&insert, &params).await.map_err(pg(context))?;
            }
            let added = turn.added();
            let params: [&(dyn ToSql + Sync); 7] = [
                &id,
                &now,
                &added,
                &turn.input_tokens,
                &turn.output_tokens,
                &turn.cost_usd,
                &turn.title,
            ];
            let row = tx
                .query_one(
                    &format!(
                        "UPDATE sessions SET
                            updated_at = $2, turns = turns + 1, messages = messages + $3,
                            input_tokens = input_tokens + $4, output_tokens = output_tokens + $5,
                            cost_usd = CASE WHEN $6::DOUBLE PRECISION IS NULL THEN cost_usd
                                            ELSE COALESCE(cost_usd, 0) + $6 END,
                            title = COALESCE(title, $7)
                         WHERE id = $1 RETURNING {COLUMNS}"
                    ),
                    &params,
                )
                .await
                .map_err(pg(context))?;
            let record = record(&row)?;
            tx.commit().await.map_err(pg(context))?;
            Ok(record)
        })
        .await
    }

    pub(crate) async fn delete_session(&self, id: String) -> Result<bool, StoreError> {
        self.with_client(move |mut client| async move {
            let context = "deleting a session";
            let tx = client.transaction().await.map_err(pg(context))?;
            tx.execute("DELETE FROM session_messages WHERE session_id = $1", &[&id])
                .await
                .map_err(pg(context))?;
            let deleted = tx
                .execute("DELETE FROM sessions WHERE id = $1", &[&id])
                .await
                .map_err(pg(context))?;
            tx.commit().await.map_err(pg(context))?;
            Ok(deleted == 1)
        })
        .await
    }
}

fn record(row: &Row) -> Result<SessionRecord, StoreError> {
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
