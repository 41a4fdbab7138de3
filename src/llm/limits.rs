//! The limits every run of a provider shares: requests in flight at once,
//! requests per minute, tokens per minute, and the pause a 429 with
//! `Retry-After` puts on the whole provider. A model call passes its
//! provider's [`ProviderGate`] before each attempt and leaves it after.
//!
//! Rates are kept as reservations (the generic cell rate algorithm): the
//! gate remembers when the next request may go, each caller reserves the
//! next free time and waits for it, so waiting calls go in the order they
//! came, nothing wakes to find its place taken, and requests are spaced
//! evenly. There are no bursts: 300 requests per minute is one request
//! every 200 ms, spaced 1% wider still, so the jitter between aurad's clock
//! and the provider's never adds up to one request too many in any minute
//! the provider counts. Tokens are charged by an estimate of the input
//! before the call and settled with the usage the answer reports; a call
//! that used more leaves a debt the next callers wait out.
//!
//! One process has one gate per provider ([`gate`], by its name and
//! endpoint): runs, sub-runs, pipeline steps and sessions share it. Several processes on one
//! PostgreSQL database share the store's instead ([`SharedLimits`],
//! implemented by `store`): the database keeps the reservations and the
//! request slots, so all nodes together stay within the limits. May depend
//! on `types` only.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{ModelTurn, ProviderError};

/// A provider's limits; `None`: none of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub concurrent: Option<u32>,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// The spacing between two requests.
    pub fn request_interval(&self) -> Option<Duration> {
        self.requests_per_minute
            .filter(|n| *n > 0)
            .map(|n| SAFETY.mul_f64(60.0 / f64::from(n)))
    }

    /// The time one token takes out of the minute's allowance.
    pub fn token_interval(&self) -> Option<Duration> {
        self.tokens_per_minute
            .filter(|n| *n > 0)
            .map(|n| SAFETY.mul_f64(60.0 / n as f64))
    }
}

/// Requests are spaced 1% wider than the limit: see the module doc.
const SAFETY: Duration = Duration::from_nanos(1_010_000_000);

/// What a reservation asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reservation {
    /// The spacing after this request; `None`: no request rate.
    pub request_interval: Option<Duration>,
    /// The tokens charged now and the time each takes; `None`: no token
    /// rate.
    pub tokens: Option<(u64, Duration)>,
}

/// Limits kept where several processes see them (the PostgreSQL store).
/// Each method is one atomic step in the store.
pub trait SharedLimits: Send + Sync {
    /// Takes one of the `cap` request slots of `provider` for `holder`;
    /// `Ok(false)` when all are held.
    fn take_slot<'a>(
        &'a self,
        provider: &'a str,
        cap: u32,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<bool, String>>;
    /// Gives back the slot `holder` took.
    fn release_slot<'a>(&'a self, provider: &'a str, holder: &'a str) -> BoxFuture<'a, ()>;
    /// Reserves the next request of `provider`; returns how long to wait
    /// before sending it (the store's clock decides).
    fn reserve<'a>(
        &'a self,
        provider: &'a str,
        reservation: Reservation,
    ) -> BoxFuture<'a, Result<Duration, String>>;
    /// Moves the token reservation by `tokens` (more or fewer than
    /// charged) of `per_token` each.
    fn settle_tokens<'a>(
        &'a self,
        provider: &'a str,
        tokens: i64,
        per_token: Duration,
    ) -> BoxFuture<'a, ()>;
    /// Holds every request of `provider` back for `wait`.
    fn pause<'a>(&'a self, provider: &'a str, wait: Duration) -> BoxFuture<'a, ()>;
}

/// The reservations of one process.
#[derive(Debug)]
struct LocalRates {
    /// When the next request may go.
    next_request: Instant,
    /// When the tokens charged so far are paid off.
    tokens_paid: Instant,
    /// Until when a `Retry-After` holds every request back.
    paused_until: Instant,
}

/// One provider's limits, shared by every call to it.
pub struct ProviderGate {
    provider: String,
    limits: Limits,
    slots: Option<Arc<Semaphore>>,
    rates: Mutex<LocalRates>,
    shared: Option<Arc<dyn SharedLimits>>,
    /// Woken when a slot of this process is given back, so a caller
    /// polling for a shared slot tries again at once.
    released: Notify,
    stats: GateStats,
}

/// What a gate has seen, for status and metrics.
#[derive(Debug, Default)]
pub struct GateStats {
    /// Calls waiting to pass now.
    pub waiting: AtomicU64,
    /// Calls passed and not yet left.
    pub in_flight: AtomicU64,
    /// Calls that had to wait, and the microseconds they waited in all.
    pub waits: AtomicU64,
    pub waited_us: AtomicU64,
    /// 429 answers that paused the provider.
    pub pauses: AtomicU64,
}

/// A call's place at the gate: hold it while the request is out.
pub struct Pass {
    gate: Arc<ProviderGate>,
    _permit: Option<OwnedSemaphorePermit>,
    /// The shared slot's holder name, while one is held.
    shared_slot: Option<String>,
    /// The tokens charged before the call.
    charged: u64,
    /// Counted in flight (it passed; a caller dropped while waiting was
    /// not).
    in_flight: bool,
    /// How long the call waited to pass.
    pub waited: Duration,
}

/// A unique name for each shared slot holder of this process.
static HOLDERS: AtomicU64 = AtomicU64::new(0);

/// The longest wait between two tries for a shared slot.
const SLOT_POLL: Duration = Duration::from_millis(100);

impl ProviderGate {
    pub fn new(
        provider: &str,
        limits: Limits,
        shared: Option<Arc<dyn SharedLimits>>,
    ) -> ProviderGate {
        let now = Instant::now();
        ProviderGate {
            provider: provider.to_string(),
            limits,
            slots: limits
                .concurrent
                .map(|n| Arc::new(Semaphore::new(n.max(1) as usize))),
            rates: Mutex::new(LocalRates {
                next_request: now,
                tokens_paid: now,
                paused_until: now,
            }),
            shared,
            released: Notify::new(),
            stats: GateStats::default(),
        }
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn stats(&self) -> &GateStats {
        &self.stats
    }

    /// Whether the gate is kept in the store for several processes.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Waits for the call's turn: a request slot, then the next request
    /// time and enough of the token allowance for `estimated_tokens`.
    /// Cancel-safe: a caller dropped while waiting holds nothing.
    pub async fn enter(self: &Arc<Self>, estimated_tokens: u64) -> Pass {
        let started = Instant::now();
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        let waiting = WaitingGuard(&self.stats.waiting);
        let permit = match &self.slots {
            Some(slots) => slots.clone().acquire_owned().await.ok(),
            None => None,
        };
        let mut pass = Pass {
            gate: self.clone(),
            _permit: permit,
            shared_slot: None,
            charged: 0,
            in_flight: false,
            waited: Duration::ZERO,
        };
        if let (Some(shared), Some(cap)) = (&self.shared, self.limits.concurrent) {
            let holder = format!(
                "{}:{}",
                std::process::id(),
                HOLDERS.fetch_add(1, Ordering::Relaxed)
            );
            self.take_shared_slot(shared.as_ref(), cap, &holder).await;
            pass.shared_slot = Some(holder);
        }
        let tokens = self
            .limits
            .token_interval()
            .map(|per| (estimated_tokens, per));
        pass.charged = tokens.map_or(0, |(n, _)| n);
        let reservation = Reservation {
            request_interval: self.limits.request_interval(),
            tokens,
        };
        let wait = match &self.shared {
            Some(shared) => shared
                .reserve(&self.provider, reservation)
                .await
                .unwrap_or_else(|e| {
                    // The store is away: fall back to this process's own
                    // reservations rather than stop every call.
                    tracing::warn!(provider = %self.provider, "provider limits: {e}; using this node's own count");
                    self.reserve_local(reservation)
                }),
            None => self.reserve_local(reservation),
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        // A 429 that came back while this call waited for its reserved
        // time pauses it too: otherwise the calls already reserved would
        // still go out during the pause.
        loop {
            let paused_until = self
                .rates
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .paused_until;
            if paused_until <= Instant::now() {
                break;
            }
            tokio::time::sleep_until(paused_until).await;
        }
        drop(waiting);
        // Under a millisecond is the gate's own bookkeeping, not a wait.
        pass.waited = Some(started.elapsed())
            .filter(|w| *w >= Duration::from_millis(1))
            .unwrap_or_default();
        if !pass.waited.is_zero() {
            self.stats.waits.fetch_add(1, Ordering::Relaxed);
            self.stats.waited_us.fetch_add(
                u64::try_from(pass.waited.as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        self.stats.in_flight.fetch_add(1, Ordering::Relaxed);
        pass.in_flight = true;
        pass
    }

    async fn take_shared_slot(&self, shared: &dyn SharedLimits, cap: u32, holder: &str) {
        loop {
            // Registered before the try, so a release between the try and
            // the wait is not missed.
            let released = self.released.notified();
            match shared.take_slot(&self.provider, cap, holder).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(provider = %self.provider, "provider limits: {e}; using this node's own slots");
                    return;
                }
            }
            // Another node's release is seen by polling, with jitter so
            // the waiting nodes do not ask in step.
            let jitter = rand::random_range(0..=SLOT_POLL.as_millis() as u64 / 2);
            let poll = SLOT_POLL / 2 + Duration::from_millis(jitter);
            let _ = tokio::time::timeout(poll, released).await;
        }
    }

    /// Reserves the next request time in this process; the wait before it.
    fn reserve_local(&self, r: Reservation) -> Duration {
        let now = Instant::now();
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let mut start = now.max(rates.paused_until);
        if let Some(interval) = r.request_interval {
            start = start.max(rates.next_request);
            rates.next_request = start + interval;
        }
        if let Some((tokens, per_token)) = r.tokens {
            start = start.max(rates.tokens_paid);
            rates.tokens_paid = start + per_token.saturating_mul(clamp_u32(tokens));
        }
        start.saturating_duration_since(now)
    }

    /// Holds every call back for `wait` (a 429's `Retry-After`).
    async fn pause(&self, wait: Duration) {
        self.stats.pauses.fetch_add(1, Ordering::Relaxed);
        // Kept here on PostgreSQL too, so this node's calls already
        // reserved and waiting see the pause without asking the store.
        {
            let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
            rates.paused_until = rates.paused_until.max(Instant::now() + wait);
        }
        if let Some(shared) = &self.shared {
            shared.pause(&self.provider, wait).await;
        }
    }

    async fn settle_tokens(&self, difference: i64) {
        let Some(per_token) = self.limits.token_interval() else {
            return;
        };
        if difference == 0 {
            return;
        }
        match &self.shared {
            Some(shared) => {
                shared
                    .settle_tokens(&self.provider, difference, per_token)
                    .await;
            }
            None => {
                let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
                let by = per_token.saturating_mul(clamp_u32(difference.unsigned_abs()));
                rates.tokens_paid = if difference > 0 {
                    rates.tokens_paid + by
                } else {
                    rates
                        .tokens_paid
                        .checked_sub(by)
                        .unwrap_or(rates.tokens_paid)
                };
            }
        }
    }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Counts a caller as waiting until it passes or is dropped.
struct WaitingGuard<'a>(&'a AtomicU64);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pass {
    /// Leaves the gate after the attempt: the tokens are settled with the
    /// usage the answer reported, and a 429 with `Retry-After` pauses the
    /// provider for every caller.
    pub async fn leave(mut self, result: &Result<ModelTurn, ProviderError>) {
        let gate = self.gate.clone();
        match result {
            Ok(turn) => {
                let used =
                    turn.usage.input_tokens.unwrap_or(0) + turn.usage.output_tokens.unwrap_or(0);
                if used > 0 {
                    let difference = i64::try_from(used).unwrap_or(i64::MAX)
                        - i64::try_from(self.charged).unwrap_or(i64::MAX);
                    gate.settle_tokens(difference).await;
                }
            }
            Err(ProviderError::Status {
                status: 429,
                retry_after: Some(wait),
                ..
            }) => gate.pause(*wait).await,
            Err(_) => {}
        }
        if let (Some(shared), Some(holder)) = (&gate.shared, self.shared_slot.take()) {
            shared.release_slot(&gate.provider, &holder).await;
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if self.in_flight {
            self.gate.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        // A call cancelled mid-request gives its shared slot back too.
        if let (Some(shared), Some(holder)) = (self.gate.shared.clone(), self.shared_slot.take()) {
            let provider = self.gate.provider.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { shared.release_slot(&provider, &holder).await });
            }
        }
        self.gate.released.notify_waiters();
    }
}

/// The gates of this process, by provider name.
#[derive(Default)]
pub struct Gates {
    gates: Mutex<BTreeMap<String, Arc<ProviderGate>>>,
}

static GATES: OnceLock<Gates> = OnceLock::new();

/// Every gate of this process (for status and metrics).
pub fn gates() -> &'static Gates {
    GATES.get_or_init(Gates::default)
}

/// The gate of `provider` with `limits`, shared through `shared` when it
/// has limits. A provider without limits has a gate too: a 429 with
/// `Retry-After` pauses all its calls in this process all the same. A gate
/// whose limits changed (a reload) is replaced: calls already past the old
/// one finish under it.
/// `key` tells providers apart in the process (their name and endpoint:
/// a reload that points a name elsewhere gets a fresh gate); `provider` is
/// the name the store and status know it by.
pub fn gate(
    key: &str,
    provider: &str,
    limits: Limits,
    shared: Option<Arc<dyn SharedLimits>>,
) -> Arc<ProviderGate> {
    gates().get(key, provider, limits, shared)
}

impl Gates {
    /// The gate of `provider` in this set: see [`gate`].
    pub fn get(
        &self,
        key: &str,
        provider: &str,
        limits: Limits,
        shared: Option<Arc<dyn SharedLimits>>,
    ) -> Arc<ProviderGate> {
        // Nothing to share without limits: the pause stays in the process,
        // and no call pays the store's round trips.
        let shared = shared.filter(|_| !limits.is_empty());
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = gates.get(key)
            && gate.limits == limits
            && gate.shared.is_some() == shared.is_some()
        {
            return gate.clone();
        }
        let gate = Arc::new(ProviderGate::new(provider, limits, shared));
        // One gate per provider name: one at another endpoint (before a
        // reload) goes, with its counts.
        gates.retain(|k, g| g.provider() != provider || k == key);
        gates.insert(key.to_string(), gate.clone());
        gate
    }

    /// Each provider's gate, by name.
    pub fn all(&self) -> Vec<Arc<ProviderGate>> {
        let gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        gates.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Usage;

    fn limits(concurrent: Option<u32>, rpm: Option<u32>, tpm: Option<u64>) -> Limits {
        Limits {
            concurrent,
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_are_spaced_evenly_in_arrival_order() {
        let gate = Arc::new(ProviderGate::new("p", limits(None, Some(600), None), None));
        let start = Instant::now();
        let mut sent = Vec::new();
        for _ in 0..4 {
            let pass = gate.enter(0).await;
            sent.push(start.elapsed());
            pass.leave(&Ok(ModelTurn::default())).await;
        }
        // 600 rpm: 100 ms apart, 1% wider.
        assert_eq!(sent, [0, 101, 202, 303].map(Duration::from_millis).to_vec());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_is_capped_and_a_dropped_pass_frees_its_slot() {
        let gate = Arc::new(ProviderGate::new("p", limits(Some(2), None, None), None));
        let a = gate.enter(0).await;
        let b = gate.enter(0).await;
        assert_eq!(gate.stats().in_flight.load(Ordering::Relaxed), 2);
        let third = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter(0).await.waited }
        });
        tokio::task::yield_now().await;
        assert_eq!(gate.stats().waiting.load(Ordering::Relaxed), 1);
        // A caller given up while it waits leaves no count behind.
        let given_up = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter(0).await }
        });
        tokio::task::yield_now().await;
        given_up.abort();
        assert!(given_up.await.is_err());
        assert_eq!(gate.stats().in_flight.load(Ordering::Relaxed), 2);
        tokio::time::advance(Duration::from_secs(3)).await;
        drop(a);
        let waited = third.await.unwrap();
        assert!(waited >= Duration::from_secs(3), "{waited:?}");
        b.leave(&Ok(ModelTurn::default())).await;
        assert_eq!(gate.stats().waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_with_retry_after_pauses_every_caller() {
        // With limits or without: a provider without any still pauses.
        for limits in [limits(Some(8), None, None), Limits::default()] {
            let gate = Arc::new(ProviderGate::new("p", limits, None));
            let pass = gate.enter(0).await;
            pass.leave(&Err(ProviderError::Status {
                status: 429,
                message: "slow down".into(),
                retry_after: Some(Duration::from_secs(7)),
            }))
            .await;
            let start = Instant::now();
            let other = gate.enter(0).await;
            assert_eq!(start.elapsed(), Duration::from_secs(7));
            assert_eq!(other.waited, Duration::from_secs(7));
            assert_eq!(gate.stats().pauses.load(Ordering::Relaxed), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_holds_a_call_already_reserved_and_waiting() {
        // 60 rpm: the second call is reserved for 1.01 s and waits.
        let gate = Arc::new(ProviderGate::new(
            "p",
            limits(Some(2), Some(60), None),
            None,
        ));
        let start = Instant::now();
        let first = gate.enter(0).await;
        let second = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter(0).await.waited }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        first
            .leave(&Err(ProviderError::Status {
                status: 429,
                message: "slow down".into(),
                retry_after: Some(Duration::from_secs(3)),
            }))
            .await;
        let waited = second.await.unwrap();
        assert_eq!(waited, Duration::from_millis(3_500));
        assert_eq!(start.elapsed(), Duration::from_millis(3_500));
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_charged_then_settled_with_the_usage() {
        // 6,000 tokens a minute: 10 ms a token (and 1%).
        let gate = Arc::new(ProviderGate::new(
            "p",
            limits(None, None, Some(6_000)),
            None,
        ));
        let pass = gate.enter(100).await;
        assert_eq!(pass.waited, Duration::ZERO);
        let turn = ModelTurn {
            usage: Usage {
                input_tokens: Some(150),
                output_tokens: Some(50),
                cached_input_tokens: None,
            },
            ..ModelTurn::default()
        };
        pass.leave(&Ok(turn)).await;
        // 200 tokens used: the next call waits 2 s (and 1%).
        let start = Instant::now();
        let _next = gate.enter(10).await;
        assert_eq!(start.elapsed(), Duration::from_millis(2_020));
    }

    #[test]
    fn gates_are_one_per_provider_and_replaced_when_limits_change() {
        let gates = Gates::default();
        let unlimited = gates.get("p", "p", Limits::default(), None);
        assert!(unlimited.limits().is_empty());
        let a = gates.get("p", "p", limits(Some(1), None, None), None);
        assert!(!Arc::ptr_eq(&unlimited, &a));
        let b = gates.get("p", "p", limits(Some(1), None, None), None);
        assert!(Arc::ptr_eq(&a, &b));
        let c = gates.get("p", "p", limits(Some(2), None, None), None);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(gates.all().len(), 1);
    }
}
