//! The shared run queue on PostgreSQL ([`crate::store::queue`]): taking
//! over queued runs with `FOR UPDATE SKIP LOCKED`, and the nodes' signals
//! over LISTEN/NOTIFY (`aurad_queue` when a run is queued, `aurad_taken`
//! with the id of a queued run taken over, `aurad_cancel` with a run id to
//! cancel, `aurad_events` with the id of a run whose events were stored). One connection per process listens, outside
//! the pool, reconnecting with a growing pause after a failure.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use deadpool_postgres::Transaction;
use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};

use super::retention::NOT_FINAL;
use super::run_rows::{RUN_COLUMNS, run_from_row};
use super::{Postgres, execute, pg};
use crate::store::{ClusterSignal, RunRecord, StoreError, TakenRun};
use crate::types::DatabaseUrl;

/// The channel a queued run is announced on.
const QUEUED: &str = "aurad_queue";
/// The channel a cancel request (payload: the run id) is sent on.
const CANCEL: &str = "aurad_cancel";
/// The channel a queued run taken over (payload: its id) is announced on.
const TAKEN: &str = "aurad_taken";
/// The channel new events of a run (payload: its id) are announced on, at
/// the commit that stores them (`runs::insert_events`).
pub(crate) const EVENTS: &str = "aurad_events";

/// Signals a slow receiver may fall behind by before it is told it lagged
/// (it then looks at the store, which is what every signal asks anyway).
/// Every batch of events of every run is one, hence room for a burst.
const CAPACITY: usize = 1024;

impl Postgres {
    /// [`crate::store::Store::claim_queued`]. Picked and started in one
    /// statement: a row another node holds is skipped, and one it took
    /// meanwhile is no longer `queued` when this one gets its lock.
    pub(crate) async fn claim_queued(
        &self,
        owner: &str,
        limit: usize,
        agents: &[String],
        pinned: &[String],
    ) -> Result<Vec<TakenRun>, StoreError> {
        let owner = owner.to_owned();
        let (agents, pinned) = (agents.to_vec(), pinned.to_vec());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_client(move |client| async move {
            let context = "taking over queued runs";
            let columns = RUN_COLUMNS
                .split(',')
                .map(|c| format!("r.{}", c.trim()))
                .collect::<Vec<_>>()
                .join(", ");
            let stmt = client
                .prepare_cached(&format!(
                    r#"WITH picked AS (
                           SELECT id, template_context FROM runs
                           WHERE state = 'queued' AND owner IS DISTINCT FROM $1
                             AND parent_run_id IS NULL AND agent = ANY($4)
                             AND NOT ("trigger" = 'schedule' AND agent = ANY($3))
                           ORDER BY created_at, row_seq
                           LIMIT $2
                           FOR UPDATE SKIP LOCKED)
                       UPDATE runs r SET owner = $1, state = 'running', started_at = $5,
                                         template_context = NULL
                       FROM picked WHERE r.id = picked.id
                       RETURNING {columns}, picked.template_context"#
                ))
                .await
                .map_err(pg(context))?;
            let now = super::run_rows::millis(chrono::Utc::now());
            let rows = client
                .query(&stmt, &[&owner, &limit, &pinned, &agents, &now])
                .await
                .map_err(pg(context))?;
            let width = rows.first().map_or(0, |r| r.len());
            let mut taken = rows
                .iter()
                .map(|row| {
                    Ok(TakenRun {
                        run: run_from_row(row)?,
                        template_context: row.try_get(width - 1).map_err(pg(context))?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            // RETURNING gives no order; oldest first, as they were picked.
            taken.sort_by_key(|t| t.run.created_at);
            if !taken.is_empty() {
                let ids: Vec<&str> = taken.iter().map(|t| t.run.id.as_str()).collect();
                execute(
                    &client,
                    "SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id",
                    &[&TAKEN, &ids],
                    "announcing queued runs taken over",
                )
                .await?;
            }
            Ok(taken)
        })
        .await
    }

    /// [`crate::store::Store::cancel_queued`].
    pub(crate) async fn cancel_queued(
        &self,
        id: &str,
        owner: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let (id, reason) = (id.to_owned(), reason.to_owned());
        let owner = Some(owner.to_owned()).filter(|o| !o.is_empty());
        self.with_client(move |client| async move {
            let changed = execute(
                &client,
                "UPDATE runs SET state = 'cancelled', finished_at = $3, error = $4,
                                 template_context = NULL
                 WHERE id = $1 AND owner IS NOT DISTINCT FROM $2 AND state = 'queued'",
                &[
                    &id,
                    &owner,
                    &super::run_rows::millis(chrono::Utc::now()),
                    &reason,
                ],
                "cancelling a queued run",
            )
            .await?;
            Ok(changed > 0)
        })
        .await
    }

    /// [`crate::store::Store::in_flight_elsewhere`].
    pub(crate) async fn in_flight_elsewhere(
        &self,
        agent: &str,
        owner: &str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let agent = agent.to_owned();
        let owner = Some(owner.to_owned()).filter(|o| !o.is_empty());
        self.with_client(move |client| async move {
            let context = "listing an agent's runs in flight elsewhere";
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs
                     WHERE agent = $1 AND state IN {NOT_FINAL}
                       AND owner IS DISTINCT FROM $2
                     ORDER BY created_at, row_seq"
                ))
                .await
                .map_err(pg(context))?;
            let rows = client
                .query(&stmt, &[&agent, &owner])
                .await
                .map_err(pg(context))?;
            rows.iter().map(run_from_row).collect()
        })
        .await
    }

    /// [`crate::store::Store::request_cancel`]: the request is stored with
    /// the run and announced in one statement (the notification leaves at
    /// its commit).
    pub(crate) async fn request_cancel(&self, id: String) -> Result<(), StoreError> {
        self.with_client(move |client| async move {
            execute(
                &client,
                &format!(
                    "WITH asked AS (
                         UPDATE runs SET cancel_requested_at = now()
                         WHERE id = $2 AND cancel_requested_at IS NULL
                           AND state IN {NOT_FINAL}
                     )
                     SELECT pg_notify($1, $2)"
                ),
                &[&CANCEL, &id],
                "asking the nodes to cancel a run",
            )
            .await
            .map(drop)
        })
        .await
    }

    /// [`crate::store::Store::cancels_requested`].
    pub(crate) async fn cancels_requested(&self) -> Result<Vec<String>, StoreError> {
        self.with_client(move |client| async move {
            let context = "reading the runs asked to cancel";
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT id FROM runs
                     WHERE cancel_requested_at IS NOT NULL AND state IN {NOT_FINAL}
                     ORDER BY id"
                ))
                .await
                .map_err(pg(context))?;
            let rows = client.query(&stmt, &[]).await.map_err(pg(context))?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
        .await
    }

    /// [`crate::store::Store::signals`]: starts the listening connection on
    /// the first call.
    pub(crate) fn signals(&self) -> broadcast::Receiver<ClusterSignal> {
        self.signals
            .get_or_init(|| {
                let (tx, _) = broadcast::channel(CAPACITY);
                self.runtime.spawn(listen(self.url.clone(), tx.clone()));
                tx
            })
            .subscribe()
    }
}

/// Announces, at the commit of `tx`, that a run was queued.
pub(crate) async fn notify_queued(tx: &Transaction<'_>) -> Result<(), StoreError> {
    execute(
        tx,
        "SELECT pg_notify($1, '')",
        &[&QUEUED],
        "announcing a queued run",
    )
    .await
    .map(drop)
}

/// Listens on the two channels until the backend's runtime ends,
/// reconnecting after a failure (a pause from 100 ms growing to 5 s,
/// reset by a connection that worked).
async fn listen(url: DatabaseUrl, tx: broadcast::Sender<ClusterSignal>) {
    let backoff = || {
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .without_max_times()
            .build()
    };
    let mut pauses = backoff();
    let mut connected_before = false;
    loop {
        match listen_once(&url, &tx, connected_before).await {
            Ok(()) => {
                connected_before = true;
                pauses = backoff();
                tracing::warn!(
                    "the connection listening for other nodes' signals to {url} closed; reconnecting"
                );
            }
            Err(e) => tracing::warn!("cannot listen for other nodes' signals: {e}; retrying"),
        }
        let pause = pauses.next().unwrap_or(Duration::from_secs(5));
        tokio::time::sleep(pause).await;
    }
}

/// One listening connection, until it closes (`Ok`) or fails to open.
async fn listen_once(
    url: &DatabaseUrl,
    tx: &broadcast::Sender<ClusterSignal>,
    reconnected: bool,
) -> Result<(), StoreError> {
    let config: tokio_postgres::Config = url
        .secret()
        .parse()
        .map_err(|e| StoreError::Invalid(format!("database {url}: {e}")))?;
    let (client, mut connection) = config.connect(NoTls).await.map_err(|e| {
        StoreError::Database(format!(
            "cannot connect to PostgreSQL at {url}: {}",
            super::error_text(&e)
        ))
    })?;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let forward = {
        let tx = tx.clone();
        async move {
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        let signal = match n.channel() {
                            QUEUED => ClusterSignal::Queued,
                            CANCEL => ClusterSignal::Cancel(n.payload().to_string()),
                            TAKEN => ClusterSignal::Taken(n.payload().to_string()),
                            EVENTS => ClusterSignal::Events(n.payload().to_string()),
                            _ => continue,
                        };
                        // No receiver is fine.
                        let _ = tx.send(signal);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(
                            "the connection listening for other nodes' signals failed: {}",
                            super::error_text(&e)
                        );
                        return;
                    }
                }
            }
        }
    };
    let forwarding = tokio::spawn(forward);
    client
        .batch_execute(&format!(
            "LISTEN {QUEUED}; LISTEN {CANCEL}; LISTEN {TAKEN}; LISTEN {EVENTS}"
        ))
        .await
        .map_err(pg("listening for other nodes' signals"))?;
    if reconnected {
        // Runs may have been queued while nobody listened here.
        let _ = tx.send(ClusterSignal::Queued);
    }
    let _ = forwarding.await;
    drop(client);
    Ok(())
}
