//! `/mcp` under `aurad serve`: the agents as MCP tools over streamable
//! HTTP (rmcp's `StreamableHttpService`, mounted in the API's router behind
//! its bearer token and its guard against web pages, which check `Host` and
//! `Origin` before rmcp sees the request). Runs go through the daemon's
//! supervisor by way of the [`Backend`]: claimed, queued and recorded like
//! the API's, with trigger `mcp`; a cancelled call cancels its run there.
//! Depends on `types` and the parent modules.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

use super::{AgentRuns, AgentServer, AgentTool, StartedRun};
use crate::api::{Backend, CancelAnswer, MAX_BODY, RunAsk};
use crate::types::Trigger;

/// The `/mcp` service on `daemon`; its sessions end when `stop` fires.
pub(in crate::api) fn service(
    daemon: Arc<dyn Backend>,
    stop: CancellationToken,
) -> StreamableHttpService<AgentServer, LocalSessionManager> {
    let runs: Arc<dyn AgentRuns> = Arc::new(DaemonRuns(daemon));
    // The API's guard has checked `Host` and `Origin` by the API's rules
    // (`allowed_hosts` included) before a request gets here.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_cancellation_token(stop)
        .with_max_request_body_bytes(MAX_BODY);
    StreamableHttpService::new(
        move || Ok(AgentServer::new(runs.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The daemon's runs, as the MCP server needs them.
struct DaemonRuns(Arc<dyn Backend>);

impl AgentRuns for DaemonRuns {
    fn tools(&self) -> Vec<AgentTool> {
        self.0.agent_tools()
    }

    fn start<'a>(
        &'a self,
        agent: &'a str,
        input: Option<String>,
    ) -> BoxFuture<'a, Result<StartedRun, String>> {
        Box::pin(async move {
            let ask = RunAsk {
                input,
                ..RunAsk::new(Trigger::Mcp)
            };
            let run = self
                .0
                .trigger(agent, ask)
                .await
                .map_err(|e| e.to_string())?;
            match self.0.events(&run.id, 0).await {
                Ok(events) => Ok(StartedRun {
                    run_id: run.id,
                    events: events.map(|(_, event)| event).boxed(),
                }),
                Err(e) => {
                    // A run nobody can follow is not left running.
                    self.cancel(&run.id).await;
                    Err(format!(
                        "run {} started, but its events cannot be read ({e}); it was cancelled",
                        run.id
                    ))
                }
            }
        })
    }

    fn cancel<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match self.0.cancel(run_id).await {
                Ok(CancelAnswer::Cancelling(_) | CancelAnswer::NotRunning(_)) => {}
                Ok(CancelAnswer::NotFound) => {
                    tracing::warn!(run = %run_id, "an MCP call's run to cancel was not found");
                }
                Err(e) => {
                    tracing::error!(run = %run_id, "cancelling an MCP call's run failed: {e}")
                }
            }
        })
    }
}
