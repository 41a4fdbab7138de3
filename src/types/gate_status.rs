//! A provider's shared limits and what its gate has seen, as `GET
//! /v1/status` reports them (`providers`) and `aurad status` reads them
//! back from the daemon.

use serde::{Deserialize, Serialize};

/// One provider with limits (`providers.X.limits` of aurad.yaml).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateStatus {
    /// Its name in aurad.yaml.
    pub provider: String,
    pub limits: GateLimits,
    /// Kept in the PostgreSQL store for every node (else this process's).
    pub shared: bool,
    /// Model calls waiting for their turn now.
    pub waiting: u64,
    /// Model calls sent and not yet answered.
    pub in_flight: u64,
    /// Calls that had to wait since the daemon started (or since the
    /// limits last changed), and the seconds they waited in all.
    pub waits: u64,
    pub waited_seconds: f64,
    /// 429 answers with `Retry-After` that held every call back.
    pub pauses: u64,
}

/// The limits as configured; a limit not set is left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
}
