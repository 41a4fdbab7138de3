//! Reading `runs` rows into [`RunRecord`]s, shared by every file of the
//! backend that returns runs. Values are checked as the SQLite backend
//! checks them: a row another program wrote wrong is a `CorruptRun`, never
//! a panic.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::pg;
use crate::store::{RunRecord, StoreError};
use crate::types::{RunState, ScheduleId, Usage};

/// The columns [`run_from_row`] reads, in its order.
pub(crate) const RUN_COLUMNS: &str = r#"id, agent, state, "trigger", input, model, definition_hash, owner,
    created_at, started_at, finished_at, error, output, input_tokens, output_tokens,
    schedule_id, scheduled_for, cached_input_tokens, cost_usd, result, parent_run_id, depth,
    session_id"#;

/// A row of `SELECT {RUN_COLUMNS}` as a checked record.
pub(crate) fn run_from_row(row: &Row) -> Result<RunRecord, StoreError> {
    let id: String = column(row, 0, "")?;
    let corrupt = |message: String| StoreError::CorruptRun {
        run_id: id.clone(),
        message,
    };
    let state: String = column(row, 2, &id)?;
    let trigger: String = column(row, 3, &id)?;
    let state =
        RunState::parse(&state).ok_or_else(|| corrupt(format!("unknown state `{state}`")))?;
    let tokens = |index: usize, name: &str| -> Result<Option<u64>, StoreError> {
        let value: Option<i64> = column(row, index, &id)?;
        value
            .map(|v| u64::try_from(v).map_err(|_| corrupt(format!("negative {name} {v}"))))
            .transpose()
    };
    let usage = Usage {
        input_tokens: tokens(13, "input_tokens")?,
        output_tokens: tokens(14, "output_tokens")?,
        cached_input_tokens: tokens(17, "cached_input_tokens")?,
    };
    let result: Option<String> = column(row, 19, &id)?;
    let result = result
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| corrupt(format!("result is not JSON: {e}")))
        })
        .transpose()?;
    let schedule_id: Option<String> = column(row, 15, &id)?;
    let schedule_id = schedule_id
        .map(|s| ScheduleId::parse(&s).map_err(|e| corrupt(format!("schedule_id: {e}"))))
        .transpose()?;
    let depth: i32 = column(row, 21, &id)?;
    Ok(RunRecord {
        agent: column(row, 1, &id)?,
        state,
        trigger: trigger.parse().map_err(&corrupt)?,
        input: column(row, 4, &id)?,
        model: column(row, 5, &id)?,
        definition_hash: column(row, 6, &id)?,
        owner: column(row, 7, &id)?,
        created_at: column::<DateTime<Utc>>(row, 8, &id)?,
        started_at: column(row, 9, &id)?,
        finished_at: column(row, 10, &id)?,
        error: column(row, 11, &id)?,
        output: column(row, 12, &id)?,
        usage,
        cost_usd: column(row, 18, &id)?,
        result,
        schedule_id,
        scheduled_for: column(row, 16, &id)?,
        parent_run_id: column(row, 20, &id)?,
        depth: u32::try_from(depth).map_err(|_| corrupt(format!("negative depth {depth}")))?,
        session_id: column(row, 22, &id)?,
        id,
    })
}

/// One column, or a `CorruptRun` naming it.
fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
    run_id: &str,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| StoreError::CorruptRun {
        run_id: run_id.to_string(),
        message: format!("column {}: {e}", row.columns()[index].name()),
    })
}

/// The run with exactly this id, read through `client` (a pooled
/// connection or an open transaction).
pub(crate) async fn run_by_id(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
) -> Result<Option<RunRecord>, StoreError> {
    let params: [&(dyn ToSql + Sync); 1] = [&id];
    let row = client
        .query_opt(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
            &params,
        )
        .await
        .map_err(pg("looking up a run"))?;
    row.as_ref().map(run_from_row).transpose()
}

/// A time as stored: truncated to the millisecond, as SQLite keeps it, so
/// both backends compare and return the same instants (a fire's
/// `scheduled_for` is part of its unique key).
pub(crate) fn millis(t: DateTime<Utc>) -> DateTime<Utc> {
    let ms = t.timestamp_millis();
    DateTime::from_timestamp_millis(ms).unwrap_or(t)
}
