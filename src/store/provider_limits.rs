//! The limits every node shares per provider (`providers.X.limits` on
//! PostgreSQL): request slots, and the reservations of the request and
//! token rates and of a 429's pause. Each call is one statement, so the
//! database's row locks order the nodes' requests; the times come from the
//! database's clock, so the nodes' clocks never disagree about them.
//! SQLite is one machine: its daemon's gates keep these in memory
//! (`llm::limits`), and these calls are refused there.

use std::time::Duration;

use super::{Backend, Store, StoreError};

/// A request slot's holder: the call, the process it runs in, and how
/// long a node may go without a heartbeat before its slots are free.
#[derive(Debug, Clone)]
pub struct SlotHolder {
    pub holder: String,
    pub node: String,
    pub lease: Duration,
}

fn not_shared() -> StoreError {
    StoreError::Invalid("provider limits are kept in the store only on PostgreSQL".into())
}

impl Store {
    /// Takes one of the `cap` request slots of `provider`; `false` when all
    /// are held. A slot held by a node that stopped or whose heartbeat is
    /// older than the lease is free, and so is one held for more than
    /// [`ORPHAN_SLOT`] by a process with no node row (a one-shot `aurad
    /// run` that died).
    pub async fn take_provider_slot(
        &self,
        provider: &str,
        cap: u32,
        holder: &SlotHolder,
    ) -> Result<bool, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Err(not_shared()),
            Backend::Postgres(db) => {
                db.take_provider_slot(provider.to_string(), cap, holder.clone())
                    .await
            }
        }
    }

    /// Gives back the slot `holder` holds.
    pub async fn release_provider_slot(
        &self,
        provider: &str,
        holder: &str,
    ) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Err(not_shared()),
            Backend::Postgres(db) => {
                db.release_provider_slot(provider.to_string(), holder.to_string())
                    .await
            }
        }
    }

    /// Reserves `provider`'s next request: it goes at the latest of now,
    /// the end of a pause, the previous reservation plus
    /// `request_interval`, and the time the tokens charged so far are paid
    /// off; `tokens` (a count and the time each takes) are charged from
    /// then. Returns how long to wait before sending.
    pub async fn reserve_provider_request(
        &self,
        provider: &str,
        request_interval: Option<Duration>,
        tokens: Option<(u64, Duration)>,
    ) -> Result<Duration, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Err(not_shared()),
            Backend::Postgres(db) => {
                db.reserve_provider_request(provider.to_string(), request_interval, tokens)
                    .await
            }
        }
    }

    /// Moves `provider`'s token reservation by `tokens` (negative: fewer
    /// were used than charged) of `per_token` each.
    pub async fn settle_provider_tokens(
        &self,
        provider: &str,
        tokens: i64,
        per_token: Duration,
    ) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Err(not_shared()),
            Backend::Postgres(db) => {
                db.settle_provider_tokens(provider.to_string(), tokens, per_token)
                    .await
            }
        }
    }

    /// Holds every request of `provider` back for `wait` from now.
    pub async fn pause_provider(&self, provider: &str, wait: Duration) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Err(not_shared()),
            Backend::Postgres(db) => db.pause_provider(provider.to_string(), wait).await,
        }
    }
}

/// How long a slot held by a process with no node row stays taken.
pub const ORPHAN_SLOT: Duration = Duration::from_secs(600);
