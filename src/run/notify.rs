//! `notify:` of an agent: POSTs a JSON message to its webhook when a run
//! waits for approval, fails or exceeds its budget. A few tries with
//! backoff, 10 s each; a notification that cannot be delivered is logged
//! (without its URL, a secret) and never fails the run.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use serde::Serialize;

use crate::config::approval::NotifyConfig;
use crate::types::RunState;
use crate::types::approval::ApprovalRecord;

/// How long one try may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a notification says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    /// `approval_requested`, `failed` or `budget_exceeded`.
    pub event: &'static str,
    pub agent: String,
    pub run_id: String,
    pub state: RunState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `approval_requested`: the call that waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_at: Option<chrono::DateTime<chrono::Utc>>,
    /// For `approval_requested`: how to decide.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decide: Option<HowToDecide>,
}

/// The commands and the API call that decide an approval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HowToDecide {
    pub approve: String,
    pub deny: String,
    /// `POST /v1/runs/{id}/approval` with `{"call_id": ..., "approve":
    /// true}` or `{"call_id": ..., "approve": false, "reason": "..."}`.
    pub api: String,
    /// The call decided, which the API's body names.
    pub call_id: String,
}

impl Notice {
    /// A run waits for a person to decide on `approval`.
    pub fn approval(agent: &str, run_id: &str, approval: &ApprovalRecord) -> Notice {
        let call = &approval.request.call_id;
        Notice {
            event: "approval_requested",
            agent: agent.to_string(),
            run_id: run_id.to_string(),
            state: RunState::WaitingApproval,
            reason: Some(format!(
                "the call to `{}` waits for a person's approval",
                approval.request.tool
            )),
            tool: Some(approval.request.tool.clone()),
            arguments: Some(approval.request.arguments.clone()),
            timeout_at: Some(approval.timeout_at),
            decide: Some(HowToDecide {
                approve: format!("aurad approve {run_id} --call {call}"),
                deny: format!("aurad approve {run_id} --call {call} --deny \"reason\""),
                api: format!("POST /v1/runs/{run_id}/approval"),
                call_id: call.to_string(),
            }),
        }
    }

    /// A run ended `state` (failed, timed out, over budget) for `reason`.
    pub fn ended(
        event: &'static str,
        agent: &str,
        run_id: &str,
        state: RunState,
        reason: Option<String>,
    ) -> Notice {
        Notice {
            event,
            agent: agent.to_string(),
            run_id: run_id.to_string(),
            state,
            reason,
            tool: None,
            arguments: None,
            timeout_at: None,
            decide: None,
        }
    }
}

/// Sends notifications in the background.
#[derive(Clone, Default)]
pub struct Notifier {
    /// Built on the first notice: building a client loads the system's root
    /// certificates (milliseconds), which a run that notifies nobody (most
    /// of them) must not pay.
    client: Arc<OnceLock<reqwest::Client>>,
}

impl Notifier {
    /// Sends `notice` to `config.url` in the background.
    pub fn send(&self, config: &NotifyConfig, notice: Notice) {
        let client = self.client.get_or_init(reqwest::Client::new).clone();
        let url = config.url.clone();
        tokio::spawn(async move {
            let post = || async {
                client
                    .post(&url)
                    .timeout(TIMEOUT)
                    .json(&notice)
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .map(|_| ())
            };
            let sent = post
                .retry(
                    ExponentialBuilder::default()
                        .with_min_delay(Duration::from_millis(200))
                        .with_max_delay(Duration::from_secs(5))
                        .with_max_times(3)
                        .with_jitter(),
                )
                .sleep(tokio::time::sleep)
                .await;
            if let Err(e) = sent {
                // The URL is a secret: the error is logged without it.
                tracing::warn!(
                    agent = %notice.agent,
                    run = %notice.run_id,
                    event = notice.event,
                    "notify: the webhook could not be told: {}",
                    e.without_url()
                );
            }
        });
    }
}
