//! What goes back to a channel: each turn's answer, split to the
//! platform's size, when the turn ends; a prompt with Approve and Deny when
//! it waits for a decision; the typing indicator while it works. A turn is
//! followed through the daemon's events (live, or from the store for a run
//! on another node), and each answer and prompt is claimed in the store
//! before it is sent, so none goes out twice across restarts and nodes.
//! When a channel starts, the turns of its sessions whose answers were not
//! sent (running, waiting for approval, or ended while the daemon was
//! down) are followed again.
//!
//! Sends are retried with backoff while the platform is unreachable or
//! rate-limits, a platform's `retry_after` honoured.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::{Daemon, Running};
use crate::channels::split::split_message;
use crate::channels::state::Count;
use crate::channels::{ApprovalPrompt, ChannelError, Conversation, Outgoing};
use crate::store::RunRecord;
use crate::types::{RunEvent, RunState};

/// How often the typing indicator is renewed (Telegram's lasts 5 s).
const TYPING_EVERY: Duration = Duration::from_secs(4);
/// How many times a send is tried.
const SEND_ATTEMPTS: u32 = 8;
/// The turns looked at again when a channel starts: those started within.
const RECOVER_WITHIN: chrono::TimeDelta = chrono::TimeDelta::days(1);

/// Sends `message` to `to` through `channel`, retrying what may pass
/// later; a failure is logged and kept as the channel's last error.
pub(super) async fn send(channel: &Running, to: &Conversation, message: &Outgoing) -> bool {
    let mut wait = Duration::from_millis(500);
    for attempt in 1..=SEND_ATTEMPTS {
        match channel.connector.send(to, message).await {
            Ok(()) => {
                channel.count(Count::Out);
                return true;
            }
            Err(ChannelError::Retryable {
                message,
                retry_after,
            }) if attempt < SEND_ATTEMPTS => {
                tracing::info!(channel = %channel.config.name, attempt, "a send failed and is tried again: {message}");
                tokio::time::sleep(retry_after.unwrap_or(wait)).await;
                wait = (wait * 2).min(Duration::from_secs(60));
            }
            Err(e) => {
                channel
                    .state
                    .error(format!("a message could not be sent: {e}"));
                return false;
            }
        }
    }
    false
}

/// Follows run `run_id`, a turn of a session of channel `channel_name`,
/// from its event `after` on, on a task of its own: its prompts and its
/// answer go to the conversation. Nothing when this process follows it
/// already.
pub(super) fn follow(daemon: Arc<Daemon>, channel_name: String, run_id: String, after: i64) {
    if !daemon.channels.follow(&run_id) {
        return;
    }
    tokio::spawn(async move {
        follow_run(&daemon, &channel_name, &run_id, after).await;
        daemon.channels.followed(&run_id);
    });
}

async fn follow_run(daemon: &Arc<Daemon>, channel_name: &str, run_id: &str, after: i64) {
    let Ok(Some(run)) = daemon.run(run_id).await else {
        return;
    };
    let Some(session) = run.session_id.clone() else {
        return;
    };
    let mut events = match daemon.events(run_id, after).await {
        Ok(events) => events,
        Err(e) => {
            tracing::warn!(run = %run_id, "cannot follow a channel's turn: {e}");
            return;
        }
    };
    // Typing is shown once now, while the turn runs (so it is on screen
    // before the answer, however fast the answer comes), then renewed on a
    // task of its own, so a slow platform never holds the answer back.
    if let Some((channel, to)) = target(daemon, channel_name, &session).await {
        let _ = channel.connector.typing(&to).await;
    }
    let mut typing = Some(show_typing(
        daemon.clone(),
        channel_name,
        &session,
        TYPING_EVERY,
    ));
    while let Some((_, event)) = events.next().await {
        match event {
            RunEvent::ApprovalRequested {
                id,
                name,
                arguments,
                ..
            } => {
                if let Some(t) = typing.take() {
                    t.abort();
                }
                prompt(
                    daemon,
                    channel_name,
                    &session,
                    run_id,
                    &id,
                    &name,
                    &arguments,
                )
                .await;
            }
            RunEvent::ApprovalDecided { .. } if typing.is_none() => {
                typing = Some(show_typing(
                    daemon.clone(),
                    channel_name,
                    &session,
                    Duration::ZERO,
                ));
            }
            RunEvent::Finished {
                state,
                reason,
                output,
                result,
                ..
            } => {
                if let Some(t) = typing.take() {
                    t.abort();
                }
                let text =
                    answer_text(state, reason.as_deref(), output.as_deref(), result.as_ref());
                answer(daemon, channel_name, &session, run_id, &text).await;
                return;
            }
            _ => {}
        }
    }
    if let Some(t) = typing.take() {
        t.abort();
    }
    // The stream ended without the run's end: it ended elsewhere (read
    // it), or the daemon stops (the next start follows it again).
    if let Ok(Some(run)) = daemon.run(run_id).await
        && run.state.is_final()
    {
        answer_ended(daemon, channel_name, &run).await;
    }
}

/// Shows the typing indicator in session `session`'s conversation after
/// `first`, then every [`TYPING_EVERY`], until aborted.
fn show_typing(
    daemon: Arc<Daemon>,
    channel_name: &str,
    session: &str,
    first: Duration,
) -> tokio::task::AbortHandle {
    let (channel_name, session) = (channel_name.to_string(), session.to_string());
    tokio::spawn(async move {
        let mut every = tokio::time::interval_at(tokio::time::Instant::now() + first, TYPING_EVERY);
        loop {
            every.tick().await;
            if let Some((channel, to)) = target(&daemon, &channel_name, &session).await {
                let _ = channel.connector.typing(&to).await;
            }
        }
    })
    .abort_handle()
}

/// The running channel `channel_name` and where session `session`'s
/// answers go now.
async fn target(
    daemon: &Daemon,
    channel_name: &str,
    session: &str,
) -> Option<(Running, Conversation)> {
    let channel = daemon.channels.get(channel_name)?;
    let (_, reply) = daemon.store.channel_reply(session).await.ok()??;
    let reply = serde_json::from_str(&reply).ok()?;
    Some((
        channel,
        Conversation {
            key: String::new(),
            reply,
        },
    ))
}

async fn prompt(
    daemon: &Daemon,
    channel_name: &str,
    session: &str,
    run_id: &str,
    call_id: &str,
    tool: &str,
    arguments: &str,
) {
    let token = super::inbound::approval_token(run_id, call_id);
    if !matches!(
        daemon
            .store
            .claim_channel_reply(&token, daemon.clock.now())
            .await,
        Ok(true)
    ) {
        return;
    }
    let Some((channel, to)) = target(daemon, channel_name, session).await else {
        return;
    };
    let prompt = ApprovalPrompt {
        run_id: run_id.to_string(),
        tool: tool.to_string(),
        arguments: arguments.to_string(),
        token,
        approve_word: channel.config.approve_word.clone(),
        deny_word: channel.config.deny_word.clone(),
    };
    send(&channel, &to, &Outgoing::Approval(prompt)).await;
}

/// What a turn that ended says: its answer, or why there is none.
fn answer_text(
    state: RunState,
    reason: Option<&str>,
    output: Option<&str>,
    result: Option<&serde_json::Value>,
) -> String {
    match (state, output, result) {
        (RunState::Succeeded, Some(output), _) if !output.trim().is_empty() => output.to_string(),
        (RunState::Succeeded, _, Some(result)) => {
            format!(
                "```json\n{}\n```",
                serde_json::to_string_pretty(result).unwrap_or_default()
            )
        }
        (RunState::Succeeded, _, _) => "(the agent gave no answer)".to_string(),
        (state, _, _) => format!(
            "The turn ended `{state}`: {}",
            reason.unwrap_or("no reason was recorded")
        ),
    }
}

async fn answer_ended(daemon: &Daemon, channel_name: &str, run: &RunRecord) {
    let Some(session) = &run.session_id else {
        return;
    };
    let text = answer_text(
        run.state,
        run.error.as_deref(),
        run.output.as_deref(),
        run.result.as_ref(),
    );
    answer(daemon, channel_name, session, &run.id, &text).await;
}

/// Sends turn `run_id`'s answer `text` in pieces, once.
async fn answer(daemon: &Daemon, channel_name: &str, session: &str, run_id: &str, text: &str) {
    if !matches!(
        daemon
            .store
            .claim_channel_reply(run_id, daemon.clock.now())
            .await,
        Ok(true)
    ) {
        return;
    }
    let Some((channel, to)) = target(daemon, channel_name, session).await else {
        tracing::warn!(channel = %channel_name, run = %run_id, "a turn's answer has nowhere to go (the channel stopped)");
        return;
    };
    let pieces = split_message(text, channel.connector.max_message_len());
    for (index, markdown) in pieces.into_iter().enumerate() {
        let piece = Outgoing::Text {
            markdown,
            key: format!("{run_id}.{index}"),
        };
        if !send(&channel, &to, &piece).await {
            return;
        }
    }
}

/// Follows again the turns of `channel`'s sessions whose answers were not
/// sent: a turn that ended gets its answer now; one that runs or waits is
/// followed from its last stored event (its prompt was sent before).
pub(super) async fn recover(daemon: Arc<Daemon>, channel: Running) {
    let since = daemon.clock.now() - RECOVER_WITHIN;
    let turns = match daemon
        .store
        .channel_unanswered(&channel.config.name, since)
        .await
    {
        Ok(turns) => turns,
        Err(e) => {
            channel
                .state
                .error(format!("cannot read the turns left unanswered: {e}"));
            return;
        }
    };
    for turn in turns {
        let Ok(Some(run)) = daemon.run(&turn.run_id).await else {
            continue;
        };
        if run.state.is_final() {
            answer_ended(&daemon, &channel.config.name, &run).await;
            continue;
        }
        let last = daemon
            .store
            .run_events_after(&run.id, 0)
            .await
            .ok()
            .and_then(|events| events.last().map(|(seq, _)| *seq))
            .unwrap_or(0);
        follow(daemon.clone(), channel.config.name.clone(), run.id, last);
    }
}
