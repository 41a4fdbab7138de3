//! Channels' conversations on SQLite ([`crate::store::channels`]): the
//! session and its reply target written in one savepoint on the writer
//! thread; reads on the reader thread.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};

use super::{Sqlite, StoreError, sql, time_text};
use crate::store::SessionRecord;
use crate::store::channels::{REPLIES_KEPT, UnansweredTurn};

impl Sqlite {
    pub async fn channel_session(
        &self,
        session_id: String,
        agent: String,
        channel: String,
        conversation: String,
        reply: String,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        self.call_durable(move |conn| {
            let context = "opening a channel's session";
            let tx = conn.savepoint().map_err(sql(context))?;
            let now = time_text(now);
            tx.execute(
                "INSERT OR IGNORE INTO sessions (id, agent, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?3)",
                params![session_id, agent, now],
            )
            .map_err(sql(context))?;
            tx.execute(
                "INSERT INTO channel_sessions (session_id, channel, conversation, reply, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session_id) DO UPDATE
                     SET reply = excluded.reply, updated_at = excluded.updated_at",
                params![session_id, channel, conversation, reply, now],
            )
            .map_err(sql(context))?;
            let session = super::sessions::read(&tx, &session_id)?
                .ok_or_else(|| StoreError::Database(format!("session {session_id} vanished")))?;
            tx.commit().map_err(sql(context))?;
            Ok(session)
        })
        .await
    }

    pub async fn channel_reply(
        &self,
        session_id: String,
    ) -> Result<Option<(String, String)>, StoreError> {
        self.read(move |conn| {
            conn.query_row(
                "SELECT channel, reply FROM channel_sessions WHERE session_id = ?1",
                params![session_id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(sql("reading where a session's answers go"))
        })
        .await
    }

    pub async fn claim_channel_reply(
        &self,
        run_id: String,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.call_durable(move |conn| {
            let context = "claiming a channel's reply";
            let claimed = conn
                .execute(
                    "INSERT OR IGNORE INTO channel_replies (run_id, replied_at) VALUES (?1, ?2)",
                    params![run_id, time_text(now)],
                )
                .map_err(sql(context))?;
            conn.execute(
                "DELETE FROM channel_replies WHERE replied_at < ?1",
                params![time_text(now - REPLIES_KEPT)],
            )
            .map_err(sql(context))?;
            Ok(claimed == 1)
        })
        .await
    }

    pub async fn channel_unanswered(
        &self,
        channel: String,
        since: DateTime<Utc>,
    ) -> Result<Vec<UnansweredTurn>, StoreError> {
        self.read(move |conn| {
            let context = "listing a channel's unanswered turns";
            let mut stmt = conn
                .prepare_cached(
                    "SELECT r.id, r.session_id FROM runs r
                     JOIN channel_sessions c ON c.session_id = r.session_id
                     WHERE c.channel = ?1 AND r.created_at >= ?2
                       AND NOT EXISTS (SELECT 1 FROM channel_replies p WHERE p.run_id = r.id)
                     ORDER BY r.id",
                )
                .map_err(sql(context))?;
            let rows = stmt
                .query_map(params![channel, time_text(since)], |row| {
                    Ok(UnansweredTurn {
                        run_id: row.get(0)?,
                        session_id: row.get(1)?,
                    })
                })
                .map_err(sql(context))?;
            rows.map(|r| r.map_err(sql(context))).collect()
        })
        .await
    }
}
