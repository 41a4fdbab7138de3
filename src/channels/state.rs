//! A channel's live state: its connection (set by its connector) and its
//! counters (set by the daemon as it handles updates), read for `GET
//! /v1/status`, `aurad status`, the dashboard and the metrics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::types::{ChannelStatus, Connection};

/// The shared state of one running channel.
#[derive(Debug)]
pub struct ChannelState {
    pub name: String,
    pub platform: &'static str,
    pub agent: String,
    inner: Mutex<Inner>,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
    ignored: AtomicU64,
    duplicates: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    connection: Connection,
    last_error: Option<(chrono::DateTime<chrono::Utc>, String)>,
}

/// Which counter to add one to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    In,
    Out,
    Ignored,
    Duplicate,
}

impl ChannelState {
    pub fn new(name: &str, platform: &'static str, agent: &str) -> Self {
        ChannelState {
            name: name.to_string(),
            platform,
            agent: agent.to_string(),
            inner: Mutex::new(Inner {
                connection: Connection::Connecting,
                last_error: None,
            }),
            messages_in: AtomicU64::new(0),
            messages_out: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain data behind: keep it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection is up.
    pub fn connected(&self) {
        self.lock().connection = Connection::Connected;
    }

    /// The connection was lost or refused because of `reason`, which is
    /// also the last error.
    pub fn reconnecting(&self, reason: impl Into<String>) {
        let reason = reason.into();
        tracing::warn!(channel = %self.name, "channel reconnecting: {reason}");
        let mut inner = self.lock();
        inner.last_error = Some((chrono::Utc::now(), reason.clone()));
        inner.connection = Connection::Reconnecting { reason };
    }

    pub fn stopped(&self) {
        self.lock().connection = Connection::Stopped;
    }

    /// An error that did not drop the connection (a send that failed).
    pub fn error(&self, message: impl Into<String>) {
        let message = message.into();
        tracing::warn!(channel = %self.name, "channel error: {message}");
        self.lock().last_error = Some((chrono::Utc::now(), message));
    }

    pub fn count(&self, what: Count) {
        let counter = match what {
            Count::In => &self.messages_in,
            Count::Out => &self.messages_out,
            Count::Ignored => &self.ignored,
            Count::Duplicate => &self.duplicates,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection(&self) -> Connection {
        self.lock().connection.clone()
    }

    pub fn status(&self) -> ChannelStatus {
        let inner = self.lock();
        let (last_error_at, last_error) = match &inner.last_error {
            Some((at, e)) => (Some(*at), Some(e.clone())),
            None => (None, None),
        };
        ChannelStatus {
            name: self.name.clone(),
            platform: self.platform.to_string(),
            agent: self.agent.clone(),
            connection: inner.connection.clone(),
            messages_in: self.messages_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            ignored: self.ignored.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            last_error,
            last_error_at,
        }
    }
}
