//! Channels' conversations on PostgreSQL: the same contract as the SQLite
//! `store::channels`. The session and its reply target are one
//! transaction; two nodes opening one conversation's session at once both
//! find the one row (`ON CONFLICT`).

use chrono::{DateTime, Utc};

use super::run_rows::millis;
use super::sessions::{COLUMNS, record};
use super::{Postgres, pg};
use crate::store::SessionRecord;
use crate::store::StoreError;
use crate::store::channels::{REPLIES_KEPT, UnansweredTurn};

impl Postgres {
    pub(crate) async fn channel_session(
        &self,
        session_id: String,
        agent: String,
        channel: String,
        conversation: String,
        reply: String,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let now = millis(now);
        self.with_client(move |mut client| async move {
            let context = "opening a channel's session";
            let tx = client.transaction().await.map_err(pg(context))?;
            tx.execute(
                "INSERT INTO sessions (id, agent, created_at, updated_at)
                 VALUES ($1, $2, $3, $3) ON CONFLICT DO NOTHING",
                &[&session_id, &agent, &now],
            )
            .await
            .map_err(pg(context))?;
            tx.execute(
                "INSERT INTO channel_sessions (session_id, channel, conversation, reply, updated_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (session_id) DO UPDATE
                     SET reply = EXCLUDED.reply, updated_at = EXCLUDED.updated_at",
                &[&session_id, &channel, &conversation, &reply, &now],
            )
            .await
            .map_err(pg(context))?;
            let row = tx
                .query_one(
                    &format!("SELECT {COLUMNS} FROM sessions WHERE id = $1"),
                    &[&session_id],
                )
                .await
                .map_err(pg(context))?;
            tx.commit().await.map_err(pg(context))?;
            record(&row)
        })
        .await
    }

    pub(crate) async fn channel_reply(
        &self,
        session_id: String,
    ) -> Result<Option<(String, String)>, StoreError> {
        self.with_client(move |client| async move {
            let row = client
                .query_opt(
                    "SELECT channel, reply FROM channel_sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .await
                .map_err(pg("reading where a session's answers go"))?;
            Ok(row.map(|r| (r.get(0), r.get(1))))
        })
        .await
    }

    pub(crate) async fn claim_channel_reply(
        &self,
        run_id: String,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let now = millis(now);
        let before = now - REPLIES_KEPT;
        self.with_client(move |client| async move {
            let context = "claiming a channel's reply";
            let claimed = client
                .execute(
                    "INSERT INTO channel_replies (run_id, replied_at) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                    &[&run_id, &now],
                )
                .await
                .map_err(pg(context))?;
            client
                .execute(
                    "DELETE FROM channel_replies WHERE replied_at < $1",
                    &[&before],
                )
                .await
                .map_err(pg(context))?;
            Ok(claimed == 1)
        })
        .await
    }

    pub(crate) async fn channel_unanswered(
        &self,
        channel: String,
        since: DateTime<Utc>,
    ) -> Result<Vec<UnansweredTurn>, StoreError> {
        let since = millis(since);
        self.with_client(move |client| async move {
            let rows = client
                .query(
                    "SELECT r.id, r.session_id FROM runs r
                     JOIN channel_sessions c ON c.session_id = r.session_id
                     WHERE c.channel = $1 AND r.created_at >= $2
                       AND NOT EXISTS (SELECT 1 FROM channel_replies p WHERE p.run_id = r.id)
                     ORDER BY r.id",
                    &[&channel, &since],
                )
                .await
                .map_err(pg("listing a channel's unanswered turns"))?;
            Ok(rows
                .iter()
                .map(|r| UnansweredTurn {
                    run_id: r.get(0),
                    session_id: r.get(1),
                })
                .collect())
        })
        .await
    }
}
