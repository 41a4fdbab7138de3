//! Pipeline runs and their steps on PostgreSQL: the same operations and
//! outcomes as the SQLite `steps.rs` (the template context a pipeline run
//! resumes with, one row per step and `for_each` item written with its
//! event, the take-over of pipeline runs whose owner is gone), safe when
//! several nodes act at once.
//!
//! Races between nodes: a step's row is an upsert on its primary key, and
//! its event is stored as any run event (`runs::insert_events`: the next
//! seq under the run's row lock, `FOR NO KEY UPDATE`, and the followers on
//! other nodes told), so events of one run never share a seq. Take-over
//! locks the open pipeline runs `FOR UPDATE SKIP LOCKED`: two nodes taking over at
//! once each take a run the other did not lock, and a run taken by one is
//! then owned by a live node, which the other's `is_alive` keeps.
//!
//! Depends on the store's types, `run_rows` and `tokio-postgres`.

use chrono::Utc;
use deadpool_postgres::GenericClient;

use super::run_rows::{RUN_COLUMNS, millis, run_from_row};
use super::runs::insert_events;
use super::{Postgres, pg};
use crate::store::runs::encode_events;
use crate::store::{RunRecord, StepEnd, StepRecord, StoreError};
use crate::types::{RunEvent, RunState, StepState, Usage};

/// The stored `item` of a step's own row (not one of its `for_each`
/// items), as in the SQLite backend.
const STEP_ROW: i32 = -1;

fn item_sql(item: Option<usize>) -> i32 {
    item.map_or(STEP_ROW, |i| i32::try_from(i).unwrap_or(i32::MAX))
}

fn tokens(t: Option<u64>) -> Option<i64> {
    t.map(|t| i64::try_from(t).unwrap_or(i64::MAX))
}

impl Postgres {
    /// Marks run `run_id` as a pipeline run with its template `context`
    /// (JSON). Idempotent: a resumed run keeps its first context.
    pub(crate) async fn begin_pipeline(
        &self,
        run_id: &str,
        context: Option<String>,
    ) -> Result<(), StoreError> {
        let run_id = run_id.to_owned();
        self.with_client(move |client| async move {
            // The primary key settles two nodes beginning it at once.
            client
                .execute(
                    "INSERT INTO pipeline_runs (run_id, context) VALUES ($1, $2)
                     ON CONFLICT (run_id) DO NOTHING",
                    &[&run_id, &context],
                )
                .await
                .map(|_| ())
                .map_err(pg("recording a pipeline run"))
        })
        .await
    }

    /// The template context a pipeline run was begun with; `None` when it
    /// had none or is not a pipeline run.
    pub(crate) async fn pipeline_context(
        &self,
        run_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let run_id = run_id.to_owned();
        self.with_client(move |client| async move {
            let context = "reading a pipeline run's context";
            let statement = client
                .prepare_cached("SELECT context FROM pipeline_runs WHERE run_id = $1")
                .await
                .map_err(pg(context))?;
            client
                .query_opt(&statement, &[&run_id])
                .await
                .map_err(pg(context))?
                .map(|row| row.try_get::<_, Option<String>>(0))
                .transpose()
                .map(Option::flatten)
                .map_err(pg(context))
        })
        .await
    }

    /// The stored steps of run `run_id` (empty for a run that is not a
    /// pipeline), ordered by start, then step, then item.
    pub(crate) async fn steps_of(&self, run_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let run_id = run_id.to_owned();
        self.with_client(move |client| async move { read_steps(&client, &run_id).await })
            .await
    }

    /// Records that `step` (item `item`) of run `run_id` started attempt
    /// `attempt` (`running`), with the items of a `for_each` step, and
    /// appends `event`, in one transaction. Returns the event's seq.
    /// `NotFound` when there is no such run.
    pub(crate) async fn step_started(
        &self,
        run_id: &str,
        step: &str,
        item: Option<usize>,
        attempt: u32,
        items: Option<&[String]>,
        event: RunEvent,
    ) -> Result<i64, StoreError> {
        let rows = encode_events(run_id, &[event])?;
        let items = items
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Invalid(format!("cannot encode for_each items: {e}")))?;
        let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
        let (run_id, step) = (run_id.to_owned(), step.to_owned());
        self.with_client(move |mut client| async move {
            let context = "recording a pipeline step's start";
            let tx = client.transaction().await.map_err(pg(context))?;
            // The event first: it locks the run's row (`NotFound` when there
            // is no such run) before the step row refers to it.
            let seq = insert_events(&tx, &run_id, &rows).await?;
            let upsert = tx
                .prepare_cached(
                    "INSERT INTO pipeline_steps (run_id, step, item, state, attempts, items, started_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (run_id, step, item) DO UPDATE SET
                         state = excluded.state, attempts = excluded.attempts,
                         items = COALESCE(pipeline_steps.items, excluded.items),
                         started_at = COALESCE(pipeline_steps.started_at, excluded.started_at),
                         error = NULL",
                )
                .await
                .map_err(pg(context))?;
            tx.execute(
                &upsert,
                &[
                    &run_id,
                    &step,
                    &item_sql(item),
                    &StepState::Running.as_str(),
                    &attempt,
                    &items,
                    &millis(Utc::now()),
                ],
            )
            .await
            .map_err(pg(context))?;
            tx.commit().await.map_err(pg(context))?;
            Ok(seq)
        })
        .await
    }

    /// Records how `step` (item `item`) of run `run_id` ended (a step never
    /// started gets its row now) and appends `event`, in one transaction:
    /// a step stored `succeeded` is never run again. Returns the event's
    /// seq. `NotFound` when there is no such run.
    pub(crate) async fn step_finished(
        &self,
        run_id: &str,
        step: &str,
        item: Option<usize>,
        end: StepEnd,
        event: RunEvent,
    ) -> Result<i64, StoreError> {
        let rows = encode_events(run_id, &[event])?;
        let (run_id, step) = (run_id.to_owned(), step.to_owned());
        self.with_client(move |mut client| async move {
            let context = "recording a pipeline step's end";
            let tx = client.transaction().await.map_err(pg(context))?;
            // The event first: it locks the run's row (`NotFound` when there
            // is no such run) before the step row refers to it.
            let seq = insert_events(&tx, &run_id, &rows).await?;
            let upsert = tx
                .prepare_cached(
                    "INSERT INTO pipeline_steps (run_id, step, item, state, output, error, finished_at,
                                                 input_tokens, output_tokens, cost_usd, child_run_id)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                     ON CONFLICT (run_id, step, item) DO UPDATE SET
                         state = excluded.state, output = excluded.output, error = excluded.error,
                         finished_at = excluded.finished_at, input_tokens = excluded.input_tokens,
                         output_tokens = excluded.output_tokens, cost_usd = excluded.cost_usd,
                         child_run_id = COALESCE(excluded.child_run_id, pipeline_steps.child_run_id)",
                )
                .await
                .map_err(pg(context))?;
            tx.execute(
                &upsert,
                &[
                    &run_id,
                    &step,
                    &item_sql(item),
                    &end.state.as_str(),
                    &end.output,
                    &end.error,
                    &millis(Utc::now()),
                    &tokens(end.usage.input_tokens),
                    &tokens(end.usage.output_tokens),
                    &end.cost_usd,
                    &end.child_run_id,
                ],
            )
            .await
            .map_err(pg(context))?;
            tx.commit().await.map_err(pg(context))?;
            Ok(seq)
        })
        .await
    }

    /// The pipeline runs left `running` (or `waiting_approval`) by an
    /// owner `is_alive` says is gone become `new_owner`'s, in the same
    /// state, to be resumed by it. Returns them as they are now, oldest
    /// first. One transaction.
    ///
    /// Two nodes at once: each locks the runs it looks at `FOR UPDATE SKIP
    /// LOCKED`, so a run is taken by one of them; one that committed first
    /// is then owned by a live node and the other leaves it.
    pub(crate) async fn take_over_pipelines(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
        new_owner: &str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let new_owner = new_owner.to_owned();
        self.with_client(move |mut client| async move {
            let context = "taking over pipeline runs of a stopped process";
            let tx = client.transaction().await.map_err(pg(context))?;
            let open = tx
                .query(
                    "SELECT r.id, r.owner FROM runs r JOIN pipeline_runs p ON p.run_id = r.id
                     WHERE r.state IN ($1, $2) ORDER BY r.created_at, r.id
                     FOR UPDATE OF r SKIP LOCKED",
                    &[
                        &RunState::Running.as_str(),
                        &RunState::WaitingApproval.as_str(),
                    ],
                )
                .await
                .map_err(pg(context))?;
            let mut taken = Vec::new();
            for row in open {
                let id: String = row.try_get(0).map_err(pg(context))?;
                let owner: Option<String> = row.try_get(1).map_err(pg(context))?;
                if owner
                    .as_deref()
                    .is_some_and(|o| !o.is_empty() && is_alive(o))
                {
                    continue;
                }
                let run = tx
                    .query_one(
                        &format!(
                            "UPDATE runs SET owner = $2 WHERE id = $1 RETURNING {RUN_COLUMNS}"
                        ),
                        &[&id, &new_owner],
                    )
                    .await
                    .map_err(pg(context))?;
                taken.push(run_from_row(&run)?);
            }
            tx.commit().await.map_err(pg(context))?;
            Ok(taken)
        })
        .await
    }
}

async fn read_steps(
    client: &impl GenericClient,
    run_id: &str,
) -> Result<Vec<StepRecord>, StoreError> {
    let context = "reading a pipeline run's steps";
    let statement = client
        .prepare_cached(
            "SELECT step, item, state, attempts, output, error, items, started_at, finished_at,
                    input_tokens, output_tokens, cost_usd, child_run_id
             FROM pipeline_steps WHERE run_id = $1
             ORDER BY started_at IS NULL, started_at, step, item",
        )
        .await
        .map_err(pg(context))?;
    let rows = client
        .query(&statement, &[&run_id])
        .await
        .map_err(pg(context))?;
    let corrupt = |message: String| StoreError::CorruptRun {
        run_id: run_id.to_string(),
        message,
    };
    let mut steps = Vec::with_capacity(rows.len());
    for row in &rows {
        let step: String = row
            .try_get(0)
            .map_err(|e| corrupt(format!("a step's name: {e}")))?;
        let column = |e: tokio_postgres::Error| corrupt(format!("step {step}: {e}"));
        let item: i32 = row.try_get(1).map_err(column)?;
        let state: String = row.try_get(2).map_err(column)?;
        let state = StepState::parse(&state)
            .ok_or_else(|| corrupt(format!("step {step} has an unknown state {state:?}")))?;
        let attempts: i32 = row.try_get(3).map_err(column)?;
        let attempts = u32::try_from(attempts)
            .map_err(|_| corrupt(format!("step {step} has {attempts} attempts")))?;
        let items: Option<String> = row.try_get(6).map_err(column)?;
        let items = items
            .map(|text| serde_json::from_str::<Vec<String>>(&text))
            .transpose()
            .map_err(|e| corrupt(format!("step {step} has unreadable items: {e}")))?;
        let input_tokens: Option<i64> = row.try_get(9).map_err(column)?;
        let output_tokens: Option<i64> = row.try_get(10).map_err(column)?;
        steps.push(StepRecord {
            item: usize::try_from(item).ok(),
            state,
            attempts,
            output: row.try_get(4).map_err(column)?,
            error: row.try_get(5).map_err(column)?,
            items,
            started_at: row.try_get(7).map_err(column)?,
            finished_at: row.try_get(8).map_err(column)?,
            usage: Usage {
                input_tokens: input_tokens.and_then(|t| u64::try_from(t).ok()),
                output_tokens: output_tokens.and_then(|t| u64::try_from(t).ok()),
                cached_input_tokens: None,
            },
            cost_usd: row.try_get(11).map_err(column)?,
            child_run_id: row.try_get(12).map_err(column)?,
            step,
        });
    }
    Ok(steps)
}
