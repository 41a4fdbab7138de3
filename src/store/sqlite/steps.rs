//! Pipeline runs and their steps: the template context a pipeline run
//! resumes with, one row per step (and per `for_each` item) written with
//! its event when it starts and when it ends, and the take-over of the
//! pipeline runs a dead process left `running`, so they resume instead of
//! being interrupted. All SQL of pipelines lives here.

use chrono::DateTime;
use rusqlite::{Connection, OptionalExtension, params};

use super::run_reads::run_by_id;
use super::runs::insert_events;
use super::{RunRecord, Sqlite, StoreError, now_text, sql};
use crate::store::runs::encode_events;
use crate::store::{StepEnd, StepRecord};
use crate::types::{RunEvent, RunState, StepState, Usage};

/// The stored `item` of a step's own row (not one of its `for_each` items).
const STEP_ROW: i64 = -1;

fn item_sql(item: Option<usize>) -> i64 {
    item.map_or(STEP_ROW, |i| i64::try_from(i).unwrap_or(i64::MAX))
}

fn tokens(t: Option<u64>) -> Option<i64> {
    t.map(|t| i64::try_from(t).unwrap_or(i64::MAX))
}

impl Sqlite {
    pub async fn begin_pipeline(
        &self,
        run_id: &str,
        context: Option<String>,
    ) -> Result<(), StoreError> {
        let run_id = run_id.to_owned();
        self.call_durable(move |conn| {
            conn.execute(
                "INSERT OR IGNORE INTO pipeline_runs (run_id, context) VALUES (?1, ?2)",
                params![run_id, context],
            )
            .map(|_| ())
            .map_err(sql("recording a pipeline run"))
        })
        .await
    }

    pub async fn pipeline_context(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let run_id = run_id.to_owned();
        self.read(move |conn| {
            conn.prepare_cached("SELECT context FROM pipeline_runs WHERE run_id = ?1")
                .and_then(|mut stmt| {
                    stmt.query_row([run_id], |row| row.get::<_, Option<String>>(0))
                        .optional()
                })
                .map(Option::flatten)
                .map_err(sql("reading a pipeline run's context"))
        })
        .await
    }

    pub async fn steps_of(&self, run_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let run_id = run_id.to_owned();
        self.read(move |conn| read_steps(conn, &run_id)).await
    }

    pub fn steps_of_blocking(&self, run_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let run_id = run_id.to_owned();
        self.read_blocking(move |conn| read_steps(conn, &run_id))
    }

    pub async fn step_started(
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
        let (run_id, step) = (run_id.to_owned(), step.to_owned());
        self.call(move |conn| {
            let context = "recording a pipeline step's start";
            let tx = conn.savepoint().map_err(sql(context))?;
            // The event first: it says `NotFound` when there is no such run
            // (the step's row would fail on its foreign key, less clearly).
            let seq = insert_events(&tx, &run_id, &rows)?;
            tx.execute(
                "INSERT INTO pipeline_steps (run_id, step, item, state, attempts, items, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (run_id, step, item) DO UPDATE SET
                     state = excluded.state, attempts = excluded.attempts,
                     items = COALESCE(pipeline_steps.items, excluded.items),
                     started_at = COALESCE(pipeline_steps.started_at, excluded.started_at),
                     error = NULL",
                params![
                    run_id,
                    step,
                    item_sql(item),
                    StepState::Running.as_str(),
                    attempt,
                    items,
                    now_text()
                ],
            )
            .map_err(sql(context))?;
            tx.commit().map_err(sql(context))?;
            Ok(seq)
        })
        .await
    }

    pub async fn step_finished(
        &self,
        run_id: &str,
        step: &str,
        item: Option<usize>,
        end: StepEnd,
        event: RunEvent,
    ) -> Result<i64, StoreError> {
        let rows = encode_events(run_id, &[event])?;
        let (run_id, step) = (run_id.to_owned(), step.to_owned());
        self.call_durable(move |conn| {
            let context = "recording a pipeline step's end";
            let tx = conn.savepoint().map_err(sql(context))?;
            // The event first: `NotFound` when there is no such run.
            let seq = insert_events(&tx, &run_id, &rows)?;
            tx.execute(
                "INSERT INTO pipeline_steps (run_id, step, item, state, output, error, finished_at,
                                             input_tokens, output_tokens, cost_usd, child_run_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (run_id, step, item) DO UPDATE SET
                     state = excluded.state, output = excluded.output, error = excluded.error,
                     finished_at = excluded.finished_at, input_tokens = excluded.input_tokens,
                     output_tokens = excluded.output_tokens, cost_usd = excluded.cost_usd,
                     child_run_id = COALESCE(excluded.child_run_id, pipeline_steps.child_run_id)",
                params![
                    run_id,
                    step,
                    item_sql(item),
                    end.state.as_str(),
                    end.output,
                    end.error,
                    now_text(),
                    tokens(end.usage.input_tokens),
                    tokens(end.usage.output_tokens),
                    end.cost_usd,
                    end.child_run_id,
                ],
            )
            .map_err(sql(context))?;
            tx.commit().map_err(sql(context))?;
            Ok(seq)
        })
        .await
    }

    pub async fn take_over_pipelines(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
        new_owner: &str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let new_owner = new_owner.to_owned();
        self.call_durable(move |conn| {
            let context = "taking over pipeline runs of a stopped process";
            let tx = conn.savepoint().map_err(sql(context))?;
            let open: Vec<(String, Option<String>)> = tx
                .prepare_cached(
                    "SELECT r.id, r.owner FROM runs r JOIN pipeline_runs p ON p.run_id = r.id
                     WHERE r.state IN (?1, ?2) ORDER BY r.created_at, r.id",
                )
                .and_then(|mut stmt| {
                    let states = [
                        RunState::Running.as_str(),
                        RunState::WaitingApproval.as_str(),
                    ];
                    stmt.query_map(states, |row| Ok((row.get(0)?, row.get(1)?)))?
                        .collect()
                })
                .map_err(sql(context))?;
            let mut taken = Vec::new();
            for (id, owner) in open {
                if owner
                    .as_deref()
                    .is_some_and(|o| !o.is_empty() && is_alive(o))
                {
                    continue;
                }
                tx.execute(
                    "UPDATE runs SET owner = ?2 WHERE id = ?1",
                    params![id, new_owner],
                )
                .map_err(sql(context))?;
                if let Some(run) = run_by_id(&tx, &id)? {
                    taken.push(run);
                }
            }
            tx.commit().map_err(sql(context))?;
            Ok(taken)
        })
        .await
    }
}

fn read_steps(conn: &mut Connection, run_id: &str) -> Result<Vec<StepRecord>, StoreError> {
    let context = "reading a pipeline run's steps";
    let mut stmt = conn
        .prepare_cached(
            "SELECT step, item, state, attempts, output, error, items, started_at, finished_at,
                    input_tokens, output_tokens, cost_usd, child_run_id
             FROM pipeline_steps WHERE run_id = ?1
             ORDER BY started_at IS NULL, started_at, step, item",
        )
        .map_err(sql(context))?;
    let rows = stmt
        .query_map([run_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, u32>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, Option<String>>(5)?,
                row.get::<_, Option<String>>(6)?,
                row.get::<_, Option<String>>(7)?,
                row.get::<_, Option<String>>(8)?,
                row.get::<_, Option<i64>>(9)?,
                row.get::<_, Option<i64>>(10)?,
                row.get::<_, Option<f64>>(11)?,
                row.get::<_, Option<String>>(12)?,
            ))
        })
        .map_err(sql(context))?;
    let time = |t: Option<String>| {
        t.and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.to_utc())
    };
    let mut steps = Vec::new();
    for row in rows {
        let (
            step,
            item,
            state,
            attempts,
            output,
            error,
            items,
            started,
            finished,
            i,
            o,
            cost,
            child,
        ) = row.map_err(sql(context))?;
        let corrupt = |message: String| StoreError::CorruptRun {
            run_id: run_id.to_string(),
            message,
        };
        let state = StepState::parse(&state)
            .ok_or_else(|| corrupt(format!("step {step} has an unknown state {state:?}")))?;
        let items = items
            .map(|text| serde_json::from_str::<Vec<String>>(&text))
            .transpose()
            .map_err(|e| corrupt(format!("step {step} has unreadable items: {e}")))?;
        steps.push(StepRecord {
            item: usize::try_from(item).ok(),
            step,
            state,
            attempts,
            output,
            error,
            items,
            started_at: time(started),
            finished_at: time(finished),
            usage: Usage {
                input_tokens: i.and_then(|t| u64::try_from(t).ok()),
                output_tokens: o.and_then(|t| u64::try_from(t).ok()),
                cached_input_tokens: None,
            },
            cost_usd: cost,
            child_run_id: child,
        });
    }
    Ok(steps)
}
