#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! The Discord connector's Gateway against a fake Discord
//! (`support/fake_discord.rs`): Identify with its intents, a drop resumed
//! with what was missed replayed, a zombie connection (heartbeats not
//! acknowledged) closed and resumed, Invalid Session answered with a new
//! Identify, and what no retry mends (a refused token, no sessions left)
//! reported with a long wait instead of a tight loop.

mod support;

use aurad::channels::Connection;
use serde_json::{Value, json};
use support::fake_discord::FakeDiscord;
use support::fake_discord::connector::{
    ALICE, TOKEN, next, reconnecting, start, start_with, text_of, until_connection,
};

const DM: &str = "400000000000000001";

fn message(id: &str, channel: &str, author: &str, content: &str) -> Value {
    support::fake_discord::message_create(id, channel, None, author, content)
}

#[tokio::test]
async fn identify_asks_for_messages_and_their_content() {
    let fake = FakeDiscord::start(TOKEN).await;
    let _running = start(&fake).await;
    let state = fake.state();
    assert_eq!(state.identifies.len(), 1);
    let identify = &state.identifies[0];
    assert_eq!(identify["token"], TOKEN);
    // GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT.
    assert_eq!(identify["intents"], 512 + 4096 + 32768);
    assert_eq!(state.connections[0], "/?v=10&encoding=json");
    assert!(state.requests.contains(&"GET /gateway/bot".to_string()));
}

#[tokio::test]
async fn a_dropped_connection_resumes_and_what_was_missed_is_replayed() {
    let fake = FakeDiscord::start(TOKEN).await;
    let mut running = start(&fake).await;
    fake.dispatch(
        "MESSAGE_CREATE",
        message("600000000000000020", DM, ALICE, "one"),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(text_of(&incoming), "one");
    done.send(()).unwrap();

    fake.drop_connection();
    let reason = reconnecting(&running).await;
    assert!(reason.contains("Gateway"), "{reason}");
    // Sent while the bot is away (it waits about a second to come back).
    let missed = fake.dispatch(
        "MESSAGE_CREATE",
        message("600000000000000021", DM, ALICE, "two"),
    );
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let (incoming, done) = next(&mut running).await;
    assert_eq!(text_of(&incoming), "two");
    done.send(()).unwrap();

    let state = fake.state();
    assert_eq!(state.identifies.len(), 1, "one session");
    assert_eq!(state.resumes.len(), 1);
    assert_eq!(state.resumes[0]["session_id"], "session-1");
    assert_eq!(state.resumes[0]["token"], TOKEN);
    assert_eq!(state.connections[1], "/resume/?v=10&encoding=json");
    assert_eq!(state.replayed, vec![missed]);
}

#[tokio::test]
async fn a_zombie_connection_is_closed_and_resumed() {
    let fake = FakeDiscord::start(TOKEN).await;
    fake.state().heartbeat_interval_ms = 150;
    let running = start(&fake).await;
    fake.until("a heartbeat acknowledged", |s| {
        (!s.heartbeats.is_empty()).then_some(())
    })
    .await;
    // The READY's seq goes with the heartbeats.
    assert_eq!(fake.state().heartbeats[0], json!(1));
    fake.state().ack_heartbeats = false;
    let reason = reconnecting(&running).await;
    assert!(reason.contains("zombie"), "{reason}");
    fake.state().ack_heartbeats = true;
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let state = fake.state();
    assert_eq!(state.identifies.len(), 1);
    assert_eq!(state.resumes.len(), 1);
}

#[tokio::test]
async fn an_invalid_session_identifies_anew() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    fake.invalidate_sessions();
    until_connection(
        &running,
        "reconnecting",
        |c| matches!(c, Connection::Reconnecting { reason } if reason.contains("op 9")),
    )
    .await;
    fake.until("a second identify", |s| {
        (s.identifies.len() == 2).then_some(())
    })
    .await;
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    assert!(fake.state().resumes.is_empty());
}

#[tokio::test]
async fn a_refused_token_is_reported_and_not_retried_at_once() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    fake.close_with(4004);
    let reason = reconnecting(&running).await;
    assert!(
        reason.contains("4004") && reason.contains("discord.token") && reason.contains("600.0 s"),
        "{reason}"
    );
    assert_eq!(fake.state().connections.len(), 1);
}

#[tokio::test]
async fn a_token_refused_over_rest_waits_long() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start_with(&fake, "not-the-token", "");
    let reason = reconnecting(&running).await;
    assert!(
        reason.contains("refused the bot token") && reason.contains("600.0 s"),
        "{reason}"
    );
    assert!(fake.state().connections.is_empty());
}

#[tokio::test]
async fn no_sessions_left_today_waits_for_discords_reset() {
    let fake = FakeDiscord::start(TOKEN).await;
    fake.state().sessions_remaining = Some(0);
    let running = start_with(&fake, TOKEN, "");
    let reason = reconnecting(&running).await;
    assert!(
        reason.contains("session_start_limit") && reason.contains("3600.0 s"),
        "{reason}"
    );
    assert!(fake.state().connections.is_empty());
}
