//! The providers' limits shared across nodes through the store: the
//! PostgreSQL store as `llm::limits::SharedLimits`. A store that fails a
//! step is logged and the call goes on under this process's own count
//! (`llm::limits` falls back), never failed: the limits protect the
//! provider's quota, and the run's own retries still handle a 429.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::llm::limits::{Reservation, SharedLimits};
use crate::store::Store;
use crate::store::provider_limits::SlotHolder;

use super::owner::this_process;

/// `store`'s shared limits, when several processes may share it
/// (PostgreSQL); `lease` is how long a node may go silent before its
/// request slots are free (`cluster.lease`).
pub fn for_store(store: &Store, lease: Duration) -> Option<Arc<dyn SharedLimits>> {
    store.is_shared().then(|| {
        Arc::new(StoreLimits {
            store: store.clone(),
            lease,
        }) as Arc<dyn SharedLimits>
    })
}

struct StoreLimits {
    store: Store,
    lease: Duration,
}

impl SharedLimits for StoreLimits {
    fn take_slot<'a>(
        &'a self,
        provider: &'a str,
        cap: u32,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let holder = SlotHolder {
                holder: format!("{} #{holder}", this_process()),
                node: this_process().to_string(),
                lease: self.lease,
            };
            self.store
                .take_provider_slot(provider, cap, &holder)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn release_slot<'a>(&'a self, provider: &'a str, holder: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let holder = format!("{} #{holder}", this_process());
            if let Err(e) = self.store.release_provider_slot(provider, &holder).await {
                // Left held, the slot is freed when this node's lease
                // lapses (or after the orphan time).
                tracing::warn!(provider, "giving back a request slot failed: {e}");
            }
        })
    }

    fn reserve<'a>(
        &'a self,
        provider: &'a str,
        r: Reservation,
    ) -> BoxFuture<'a, Result<Duration, String>> {
        Box::pin(async move {
            self.store
                .reserve_provider_request(provider, r.request_interval, r.tokens)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn settle_tokens<'a>(
        &'a self,
        provider: &'a str,
        tokens: i64,
        per_token: Duration,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Err(e) = self
                .store
                .settle_provider_tokens(provider, tokens, per_token)
                .await
            {
                tracing::warn!(provider, "settling the tokens of a call failed: {e}");
            }
        })
    }

    fn pause<'a>(&'a self, provider: &'a str, wait: Duration) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Err(e) = self.store.pause_provider(provider, wait).await {
                tracing::warn!(provider, "pausing the provider for every node failed: {e}");
            }
        })
    }
}
