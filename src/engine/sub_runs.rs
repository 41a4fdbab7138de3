//! What a run has spent so far, shared between the engine and the tools
//! that start sub-runs (agents called as tools): such a tool reads the
//! caller's tokens before starting a sub-run (a caller at its budget starts
//! none) and reports what the sub-run spent when it ends; the engine adds
//! that to the run's usage and cost, with a `usage` event, after the turn's
//! tool calls. Plain data behind a lock: no I/O. May depend on `types`.

use std::sync::{Arc, Mutex, PoisonError};

use crate::types::Usage;

/// What one finished sub-run spent.
#[derive(Debug, Clone, PartialEq)]
pub struct SubRunSpend {
    pub run_id: String,
    pub usage: Usage,
    /// US dollars; `None`: unknown.
    pub cost_usd: Option<f64>,
}

/// A run's spending as its sub-run tools see it. Clones share one account.
#[derive(Debug, Clone, Default)]
pub struct SharedSpend(Arc<Mutex<Account>>);

#[derive(Debug, Default)]
struct Account {
    /// The tokens the engine has counted (its own and the sub-runs it took).
    counted: u64,
    /// Sub-runs reported and not yet taken by the engine.
    pending: Vec<SubRunSpend>,
}

impl SharedSpend {
    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run's tokens so far, sub-runs reported but not yet taken included.
    pub fn tokens(&self) -> u64 {
        let account = self.account();
        account.counted
            + account
                .pending
                .iter()
                .map(|s| s.usage.total_tokens())
                .sum::<u64>()
    }

    /// Records what a finished sub-run spent, for the engine to take.
    pub fn report(&self, spend: SubRunSpend) {
        self.account().pending.push(spend);
    }

    /// Sets the tokens the engine has counted.
    pub(super) fn set_counted(&self, tokens: u64) {
        self.account().counted = tokens;
    }

    /// The sub-runs reported since the last call.
    pub(super) fn take(&self) -> Vec<SubRunSpend> {
        std::mem::take(&mut self.account().pending)
    }
}
