//! The [`Daemon`] as the HTTP API's [`Backend`]: each method forwards to
//! the daemon's own, so the API depends on a trait it defines and never on
//! the daemon. Nothing else here.

use std::net::SocketAddr;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::Daemon;
use crate::api::{
    AgentInfo, Backend, CancelAnswer, ChannelAnswer, RunAsk, SessionError, SessionView,
    TriggerError,
};
use crate::config::WebhookSignature;
use crate::config::settings::AllowedHost;
use crate::store::{
    FirePage, MemoryNamespace, RunPage, RunRecord, SessionRecord, StoreError, WaitingRun,
};
use crate::types::RunEvent;
use crate::types::approval::{ApprovalRecord, DecidedBy};
use crate::types::memory::Memory;

impl Backend for Daemon {
    fn listen(&self) -> SocketAddr {
        Daemon::listen(self)
    }

    fn token(&self) -> &str {
        Daemon::token(self)
    }

    fn allowed_hosts(&self) -> Vec<AllowedHost> {
        self.snapshot().project.settings.allowed_hosts.clone()
    }

    fn metrics_text(&self) -> String {
        self.metrics().set_channels(&self.channels.statuses());
        self.metrics().render()
    }

    fn health(&self) -> serde_json::Value {
        Daemon::health(self)
    }

    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentInfo>, StoreError>> {
        Box::pin(Daemon::agents(self))
    }

    fn agent<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<AgentInfo>, StoreError>> {
        Box::pin(Daemon::agent(self, name))
    }

    fn trigger<'a>(
        &'a self,
        agent: &'a str,
        ask: RunAsk,
    ) -> BoxFuture<'a, Result<RunRecord, TriggerError>> {
        Box::pin(Daemon::trigger(self, agent, ask))
    }

    fn runs<'a>(&'a self, page: &'a RunPage) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.store().list_run_page(page))
    }

    fn fires<'a>(
        &'a self,
        page: &'a FirePage,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.store().list_fires(page))
    }

    fn waiting_approvals(&self) -> BoxFuture<'_, Result<Vec<WaitingRun>, StoreError>> {
        Box::pin(self.store().waiting_runs())
    }

    fn memory_namespaces(&self) -> BoxFuture<'_, Result<Vec<MemoryNamespace>, StoreError>> {
        Box::pin(self.store().memory_namespaces())
    }

    fn memories<'a>(
        &'a self,
        namespace: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Memory>, StoreError>> {
        Box::pin(self.store().memory_list(namespace, limit))
    }

    fn run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunRecord>, StoreError>> {
        Box::pin(Daemon::run(self, id))
    }

    fn events<'a>(
        &'a self,
        run_id: &'a str,
        after: i64,
    ) -> BoxFuture<'a, Result<BoxStream<'static, (i64, RunEvent)>, StoreError>> {
        Box::pin(Daemon::events(self, run_id, after))
    }

    fn decide_approval<'a>(
        &'a self,
        run_id: &'a str,
        call_id: &'a str,
        approve: bool,
        reason: Option<String>,
    ) -> BoxFuture<'a, Result<ApprovalRecord, StoreError>> {
        Box::pin(self.supervisor.approvals().decide(
            run_id,
            call_id,
            approve,
            reason,
            DecidedBy::Api,
        ))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<CancelAnswer, StoreError>> {
        Box::pin(Daemon::cancel(self, id))
    }

    fn webhook_secret(
        &self,
        agent: &str,
    ) -> Result<Option<(Vec<WebhookSignature>, String)>, String> {
        Daemon::webhook_secret(self, agent)
    }

    fn channel_webhook<'a>(
        &'a self,
        name: &'a str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> BoxFuture<'a, ChannelAnswer> {
        Box::pin(async move {
            let request = crate::channels::WebhookRequest {
                headers,
                body,
                now: chrono::Utc::now().timestamp(),
            };
            let answer = Daemon::channel_webhook(self, name, request).await;
            ChannelAnswer {
                status: answer.status,
                content_type: answer.content_type,
                body: answer.body,
            }
        })
    }

    fn agent_tools(&self) -> Vec<crate::api::mcp::AgentTool> {
        crate::api::mcp::agent_tools(&self.snapshot().project)
    }

    fn status(&self) -> serde_json::Value {
        let snapshot = self.snapshot();
        let states = self.mcp_states();
        let channels = self.channels.statuses();
        serde_json::to_value(super::status::status(
            &snapshot,
            &states,
            self.nodes(),
            channels,
        ))
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
    }

    fn new_session<'a>(
        &'a self,
        agent: &'a str,
    ) -> BoxFuture<'a, Result<SessionRecord, SessionError>> {
        Box::pin(Daemon::new_session(self, agent))
    }

    fn sessions<'a>(
        &'a self,
        agent: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<SessionRecord>, StoreError>> {
        Box::pin(self.store().sessions(agent, limit))
    }

    fn session<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SessionView>, StoreError>> {
        Box::pin(Daemon::session(self, id))
    }

    fn send_message<'a>(
        &'a self,
        id: &'a str,
        message: String,
        agent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<RunRecord, SessionError>> {
        Box::pin(Daemon::send_message(self, id, message, agent))
    }

    fn delete_session<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), SessionError>> {
        Box::pin(Daemon::delete_session(self, id))
    }
}
