//! The shared run queue's operations ([`crate::store::queue`]) on the one
//! SQLite file: a single writer, so taking runs over needs no row locks.

use rusqlite::{Connection, params};

use super::run_reads::{RUN_COLUMNS, RawRun, raw_run, run_by_id};
use super::{Sqlite, StoreError, now_text, sql};
use crate::store::{RunRecord, TakenRun};
use crate::types::RunState;

impl Sqlite {
    pub async fn claim_queued(
        &self,
        owner: &str,
        limit: usize,
        agents: &[String],
        pinned: &[String],
    ) -> Result<Vec<TakenRun>, StoreError> {
        let owner = owner.to_owned();
        let json = |names: &[String]| {
            serde_json::to_string(names)
                .map_err(|e| StoreError::Internal(format!("encoding agent names: {e}")))
        };
        let (agents, pinned) = (json(agents)?, json(pinned)?);
        self.call_durable(move |conn| claim_queued(conn, &owner, limit, &agents, &pinned))
            .await
    }

    pub async fn cancel_queued(
        &self,
        id: &str,
        owner: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let (id, owner, reason) = (id.to_owned(), owner.to_owned(), reason.to_owned());
        self.call_durable(move |conn| {
            conn.prepare_cached(
                "UPDATE runs SET state = ?3, finished_at = ?4, error = ?5, template_context = NULL
                 WHERE id = ?1 AND owner IS ?2 AND state = ?6",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    id,
                    Some(owner.as_str()).filter(|o| !o.is_empty()),
                    RunState::Cancelled.as_str(),
                    now_text(),
                    reason,
                    RunState::Queued.as_str()
                ])
            })
            .map(|changed| changed > 0)
            .map_err(sql("cancelling a queued run"))
        })
        .await
    }

    pub async fn in_flight_elsewhere(
        &self,
        agent: &str,
        owner: &str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let (agent, owner) = (agent.to_owned(), owner.to_owned());
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs
                 WHERE agent = ?1 AND state IN ('queued', 'running', 'waiting_approval')
                   AND owner IS NOT ?2
                 ORDER BY created_at, rowid"
            ))
            .and_then(|mut stmt| {
                stmt.query_map(params![agent, owner], raw_run)?
                    .collect::<rusqlite::Result<Vec<RawRun>>>()
            })
            .map_err(sql("listing an agent's runs in flight elsewhere"))?
            .into_iter()
            .map(RawRun::check)
            .collect()
        })
        .await
    }
}

/// Starts the oldest `limit` queued runs of other owners (of the `agents`,
/// not child runs, not scheduled fires of the `pinned` agents: both JSON
/// arrays) under `owner`.
fn claim_queued(
    conn: &mut Connection,
    owner: &str,
    limit: usize,
    agents: &str,
    pinned: &str,
) -> Result<Vec<TakenRun>, StoreError> {
    let context = "taking over queued runs";
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let tx = conn.savepoint().map_err(sql(context))?;
    let picked: Vec<(String, Option<String>)> = tx
        .prepare_cached(
            "SELECT id, template_context FROM runs
             WHERE state = 'queued' AND owner IS NOT ?1 AND parent_run_id IS NULL
               AND agent IN (SELECT value FROM json_each(?4))
               AND NOT (\"trigger\" = 'schedule' AND agent IN (SELECT value FROM json_each(?3)))
             ORDER BY created_at, rowid
             LIMIT ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![owner, limit, pinned, agents], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect()
        })
        .map_err(sql(context))?;
    let now = now_text();
    let mut taken = Vec::with_capacity(picked.len());
    for (id, template_context) in picked {
        tx.prepare_cached(
            "UPDATE runs SET owner = ?2, state = 'running', started_at = ?3,
                             template_context = NULL
             WHERE id = ?1",
        )
        .and_then(|mut stmt| stmt.execute(params![id, owner, now]))
        .map_err(sql(context))?;
        let run = run_by_id(&tx, &id)?.ok_or_else(|| {
            StoreError::Internal(format!("run {id} vanished while being taken over"))
        })?;
        taken.push(TakenRun {
            run,
            template_context,
        });
    }
    tx.commit().map_err(sql(context))?;
    Ok(taken)
}
