//! What a channel's updates become, one at a time in the order they came:
//! - a sender not on the allow-list is ignored and counted;
//! - a message is a turn of the conversation's session (made on first
//!   use), claimed with its run as the update's delivery, so an update is
//!   handled once across restarts and nodes; a refused turn is answered
//!   with why;
//! - a button press, or a message that is only the approve or deny word
//!   while the session's turn waits, decides the waiting call: the same
//!   durable decision as `aurad approve` and the API's.
//!
//! The connector is told the update was taken only after its claim is
//! durable (or it was refused).

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::outbound;
use super::{Daemon, Running};
use crate::channels::state::Count;
use crate::channels::{Conversation, InboxReceiver, Incoming, Outgoing, What};
use crate::run::{TurnRefused, turn_request};
use crate::store::WaitingRun;
use crate::types::Trigger;
use crate::types::approval::DecidedBy;

/// Takes `channel`'s updates until its connector stops.
pub(super) async fn take(daemon: Arc<Daemon>, channel: Running, mut updates: InboxReceiver) {
    while let Some((incoming, taken)) = updates.recv().await {
        handle(&daemon, &channel, incoming).await;
        let _ = taken.send(());
    }
}

/// The session of `conversation` in `channel`: one per channel, agent and
/// conversation, so a channel moved to another agent starts afresh.
pub(super) fn session_id(channel: &Running, conversation: &str) -> String {
    let mut hash = Sha256::new();
    for part in [
        channel.config.name.as_str(),
        channel.config.agent.as_str(),
        conversation,
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    format!("ch-{}", &hex::encode(hash.finalize())[..29])
}

/// The token a prompt's buttons carry for call `call_id` of run `run_id`:
/// the run and a digest of the call (a button's data is short: Telegram
/// takes 64 bytes).
pub(super) fn approval_token(run_id: &str, call_id: &str) -> String {
    format!("{run_id}.{}", call_digest(call_id))
}

fn call_digest(call_id: &str) -> String {
    hex::encode(&Sha256::digest(call_id.as_bytes())[..5])
}

async fn handle(daemon: &Arc<Daemon>, channel: &Running, incoming: Incoming) {
    let allow = &channel.config.allow;
    if !allow.admits(&incoming.sender.user, incoming.sender.chat.as_deref()) {
        channel.count(Count::Ignored);
        tracing::info!(
            channel = %channel.config.name,
            user = %incoming.sender.user,
            chat = incoming.sender.chat.as_deref().unwrap_or("-"),
            "ignored an update from a sender not on the allow-list"
        );
        return;
    }
    match &incoming.what {
        What::Message { text } => message(daemon, channel, &incoming, text).await,
        What::Decision {
            token,
            approve,
            ack,
        } => {
            if !claimed(daemon, channel, &incoming.id).await {
                return;
            }
            channel.count(Count::In);
            let text = decide_token(daemon, channel, token, *approve, &incoming).await;
            let reply = Outgoing::Decided {
                ack: ack.clone(),
                text,
            };
            outbound::send(channel, &incoming.conversation, &reply).await;
        }
    }
}

/// The claim of update `id` of `channel`, as a webhook delivery of its
/// agent.
fn delivery_id(channel: &Running, id: &str) -> String {
    format!("channel:{}:{id}", channel.config.name)
}

async fn message(daemon: &Arc<Daemon>, channel: &Running, incoming: &Incoming, text: &str) {
    let config = &channel.config;
    let conversation = &incoming.conversation;
    let session = session_id(channel, &conversation.key);
    let reply = conversation.reply.to_string();
    if let Err(e) = daemon
        .store
        .channel_session(
            &session,
            &config.agent,
            &config.name,
            &conversation.key,
            &reply,
            daemon.clock.now(),
        )
        .await
    {
        channel
            .state
            .error(format!("cannot open the conversation's session: {e}"));
        return;
    }
    let word = text.trim().to_lowercase();
    if (word == config.approve_word || word == config.deny_word)
        && let Some(waiting) = waiting_in(daemon, &session).await
    {
        if !claimed(daemon, channel, &incoming.id).await {
            return;
        }
        channel.count(Count::In);
        let approve = word == config.approve_word;
        let text = decide(daemon, &waiting, approve, incoming).await;
        let reply = Outgoing::Decided { ack: None, text };
        outbound::send(channel, conversation, &reply).await;
        return;
    }
    let snapshot = daemon.snapshot();
    let request = match turn_request(
        &daemon.store,
        &snapshot,
        &session,
        text.to_string(),
        Trigger::Channel,
    )
    .await
    {
        Ok(request) => crate::run::RunRequest {
            delivery: Some(delivery_id(channel, &incoming.id)),
            ..request
        },
        Err(refused) => {
            if matches!(refused, TurnRefused::Store(_)) {
                channel.state.error(refused.to_string());
                return;
            }
            // Said once per update: a redelivery is not answered again.
            if claimed(daemon, channel, &incoming.id).await {
                refuse(channel, conversation, &refused.to_string()).await;
            }
            return;
        }
    };
    match daemon.supervisor.submit(snapshot, request, None).await {
        Ok(run) => {
            channel.count(Count::In);
            tracing::info!(channel = %config.name, run = %run.id, session = %session, "a message became a turn");
            outbound::follow(daemon.clone(), channel.config.name.clone(), run.id, 0);
        }
        Err(crate::api::SubmitError::DuplicateDelivery) => channel.count(Count::Duplicate),
        Err(e) => {
            channel.state.error(format!("cannot start the turn: {e}"));
            if claimed(daemon, channel, &incoming.id).await {
                refuse(channel, conversation, &e.to_string()).await;
            }
        }
    }
}

/// Claims update `id` for an answer that starts no run: false (and
/// counted) when it was handled before.
async fn claimed(daemon: &Daemon, channel: &Running, id: &str) -> bool {
    let delivery = delivery_id(channel, id);
    match daemon
        .store
        .claim_delivery(&channel.config.agent, &delivery, daemon.clock.now())
        .await
    {
        Ok(true) => true,
        Ok(false) => {
            channel.count(Count::Duplicate);
            false
        }
        Err(e) => {
            channel.state.error(format!("cannot claim an update: {e}"));
            false
        }
    }
}

async fn refuse(channel: &Running, conversation: &Conversation, why: &str) {
    let reply = Outgoing::Decided {
        ack: None,
        text: format!("Not sent to the agent: {why}"),
    };
    outbound::send(channel, conversation, &reply).await;
}

/// The run of session `session` waiting for a decision, if one is.
async fn waiting_in(daemon: &Daemon, session: &str) -> Option<WaitingRun> {
    let waiting = daemon.store.waiting_runs().await.ok()?;
    waiting
        .into_iter()
        .find(|w| w.run.session_id.as_deref() == Some(session) && w.approval.decision.is_none())
}

/// Decides the call a button's `token` names, if it is still waiting and a
/// turn of this channel: what to tell the person who pressed it.
async fn decide_token(
    daemon: &Daemon,
    channel: &Running,
    token: &str,
    approve: bool,
    incoming: &Incoming,
) -> String {
    let Some((run_id, digest)) = token.split_once('.') else {
        return "This button is not one of aurad's approval buttons.".into();
    };
    let waiting = match daemon.store.waiting_runs().await {
        Ok(waiting) => waiting.into_iter().find(|w| w.run.id == run_id),
        Err(e) => return format!("The decision could not be read: {e}"),
    };
    let Some(waiting) = waiting else {
        return "This call is no longer waiting for a decision (it was decided, timed out, or its run ended).".into();
    };
    if call_digest(&waiting.approval.request.call_id) != digest
        || waiting.approval.decision.is_some()
    {
        return "This call was decided already; the run waits on another call now (its prompt is below).".into();
    }
    // The button names a turn of this very conversation's session: a
    // token copied into another chat, or another channel, decides nothing
    // (the session id is made of the channel, its agent and the
    // conversation).
    let here = session_id(channel, &incoming.conversation.key);
    if waiting.run.session_id.as_deref() != Some(here.as_str()) {
        return "This approval belongs to another conversation.".into();
    }
    decide(daemon, &waiting, approve, incoming).await
}

/// Decides `waiting`'s call as `incoming`'s sender: what to say about it.
async fn decide(
    daemon: &Daemon,
    waiting: &WaitingRun,
    approve: bool,
    incoming: &Incoming,
) -> String {
    let who = incoming
        .sender
        .name
        .clone()
        .unwrap_or_else(|| incoming.sender.user.clone());
    let request = &waiting.approval.request;
    let reason = format!("decided in a channel by {who}");
    match daemon
        .supervisor
        .approvals()
        .decide(
            &waiting.run.id,
            &request.call_id,
            approve,
            Some(reason),
            DecidedBy::Channel,
        )
        .await
    {
        Ok(_) if approve => format!("Approved by {who}: `{}` runs now.", request.tool),
        Ok(_) => format!("Denied by {who}: `{}` does not run.", request.tool),
        Err(e) => format!("The decision was not taken: {e}"),
    }
}
