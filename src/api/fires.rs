//! `GET /v1/fires`: what became of the schedules' fires, newest first, a
//! page at a time (`?agent=&limit=&offset=`). Each fire is the run stored
//! for its instant (`schedule_id`, `scheduled_for`), the ones that never ran
//! included: `skipped` (overlap, failure backoff) and `missed` (the daemon
//! was down), with the reason as the run's `error`. The next fires are in
//! each agent's `schedules` (`GET /v1/agents`).
//!
//! Depends on the `Backend` (`fires`), `store` (`FirePage`) and the limit
//! and offset parsing of `runs`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::runs::{DEFAULT_LIMIT, parse_limit, parse_offset};
use super::{Api, ApiError};
use crate::store::FirePage;

pub(super) async fn list(
    State(api): State<Api>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let page = fire_page(&pairs)?;
    let fires = api.daemon.fires(&page).await?;
    Ok(axum::Json(json!({ "fires": fires })).into_response())
}

/// The page of `?agent=&limit=&offset=`; empty values mean the default.
fn fire_page(pairs: &[(String, String)]) -> Result<FirePage, ApiError> {
    let mut page = FirePage {
        limit: DEFAULT_LIMIT,
        ..FirePage::default()
    };
    for (key, value) in pairs {
        let value = value.trim();
        match key.as_str() {
            "agent" => page.agent = Some(value.to_string()).filter(|v| !v.is_empty()),
            "limit" => page.limit = parse_limit(value)?,
            "offset" => page.offset = parse_offset(value)?,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`: GET /v1/fires takes agent, limit and offset"
                )));
            }
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pages_read_agent_limit_and_offset() {
        assert_eq!(
            fire_page(&[]).unwrap(),
            FirePage {
                agent: None,
                limit: 50,
                offset: 0
            }
        );
        assert_eq!(
            fire_page(&pairs(&[
                ("agent", "nightly"),
                ("limit", "5"),
                ("offset", "10")
            ]))
            .unwrap(),
            FirePage {
                agent: Some("nightly".into()),
                limit: 5,
                offset: 10
            }
        );
        let error = fire_page(&pairs(&[("state", "missed")])).unwrap_err();
        assert!(error.message.contains("`state`"), "{}", error.message);
        let error = fire_page(&pairs(&[("limit", "0")])).unwrap_err();
        assert!(error.message.contains("from 1 to"), "{}", error.message);
    }
}
