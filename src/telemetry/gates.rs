//! The provider gates of this process as status shows them: each provider
//! with limits in the current settings, with what its gate has seen (all
//! zero until a run first calls it).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::Settings;
use crate::llm::limits::{Gates, gates};
use crate::types::{GateLimits, GateStatus};

/// Each provider of `settings` with limits, by name.
pub fn provider_gates(settings: &Settings) -> Vec<GateStatus> {
    gate_status(settings, gates())
}

pub(crate) fn gate_status(settings: &Settings, gates: &Gates) -> Vec<GateStatus> {
    let open = gates.all();
    let read = |n: &AtomicU64| n.load(Ordering::Relaxed);
    settings
        .providers
        .iter()
        .filter(|(_, p)| !p.limits.is_empty())
        .map(|(name, p)| {
            let mut status = GateStatus {
                provider: name.clone(),
                limits: GateLimits {
                    concurrent: p.limits.concurrent,
                    requests_per_minute: p.limits.requests_per_minute,
                    tokens_per_minute: p.limits.tokens_per_minute,
                },
                ..GateStatus::default()
            };
            if let Some(gate) = open.iter().find(|g| g.provider() == name) {
                let stats = gate.stats();
                status.shared = gate.is_shared();
                status.waiting = read(&stats.waiting);
                status.in_flight = read(&stats.in_flight);
                status.waits = read(&stats.waits);
                status.waited_seconds = read(&stats.waited_us) as f64 / 1e6;
                status.pauses = read(&stats.pauses);
            }
            status
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderLimits;
    use crate::llm::limits::Limits;

    #[tokio::test]
    async fn providers_with_limits_are_listed_with_their_gates_counts() {
        let mut settings = Settings::defaults(std::path::Path::new("/p"));
        let limits = ProviderLimits {
            concurrent: Some(2),
            requests_per_minute: None,
            tokens_per_minute: Some(90_000),
        };
        for name in ["anthropic", "openai"] {
            if let Some(p) = settings.providers.get_mut(name) {
                p.limits = limits;
            }
        }
        let gates = Gates::default();
        let gate = gates.get(
            "openai",
            "openai",
            Limits {
                concurrent: Some(2),
                requests_per_minute: None,
                tokens_per_minute: Some(90_000),
            },
            None,
        );
        let _pass = gate.enter(10).await;
        let listed = gate_status(&settings, &gates);
        let names: Vec<&str> = listed.iter().map(|g| g.provider.as_str()).collect();
        // Gemini has no limits; Anthropic's gate opens with its first call.
        assert_eq!(names, ["anthropic", "openai"]);
        assert_eq!(listed[0].in_flight, 0);
        assert_eq!(listed[1].in_flight, 1);
        assert_eq!(listed[1].limits.concurrent, Some(2));
        let json = serde_json::to_value(&listed[1]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "provider": "openai",
                "limits": { "concurrent": 2, "tokens_per_minute": 90000 },
                "shared": false,
                "waiting": 0,
                "in_flight": 1,
                "waits": 0,
                "waited_seconds": 0.0,
                "pauses": 0,
            })
        );
    }
}
