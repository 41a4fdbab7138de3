//! [`Trigger`]: what started a run. Stored with the run (as its word), shown
//! by `aurad runs`, filtered on by `GET /v1/runs?trigger=`, and what tells a
//! scheduled fire (which `on_overlap` weighs) from a run a person or
//! another program asked for.

use serde::{Deserialize, Serialize};

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// `aurad run`.
    Cli,
    /// A fire of one of the agent's schedules.
    Schedule,
    /// `POST /v1/agents/{name}/runs`, `aurad trigger`, the dashboard.
    Api,
    /// A signed delivery to `/hooks/{name}`.
    Webhook,
    /// A run cut off by a crash, run again (`on_interrupt: retry`).
    Retry,
    /// Another agent's run ended (`after:`).
    After,
    /// A file its `watch:` globs match was created or changed.
    Watch,
    /// A calling agent (`agents:`).
    Agent,
    /// A pipeline's agent step.
    Pipeline,
    /// A `tools/call` of an MCP client (`aurad mcp serve`, `/mcp` under
    /// `aurad serve`).
    Mcp,
    /// A message in a channel (`channels/`): Telegram, Slack, Discord,
    /// email.
    Channel,
    /// `aurad replay` (offline, never stored).
    Replay,
    /// `aurad test` (offline, never stored).
    Test,
}

impl Trigger {
    /// Every kind, in the order above.
    pub const ALL: [Trigger; 13] = [
        Trigger::Cli,
        Trigger::Schedule,
        Trigger::Api,
        Trigger::Webhook,
        Trigger::Retry,
        Trigger::After,
        Trigger::Watch,
        Trigger::Agent,
        Trigger::Pipeline,
        Trigger::Mcp,
        Trigger::Channel,
        Trigger::Replay,
        Trigger::Test,
    ];

    /// Its word, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Cli => "cli",
            Trigger::Schedule => "schedule",
            Trigger::Api => "api",
            Trigger::Webhook => "webhook",
            Trigger::Retry => "retry",
            Trigger::After => "after",
            Trigger::Watch => "watch",
            Trigger::Agent => "agent",
            Trigger::Pipeline => "pipeline",
            Trigger::Mcp => "mcp",
            Trigger::Channel => "channel",
            Trigger::Replay => "replay",
            Trigger::Test => "test",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Trigger {
    type Err = String;

    /// A kind from its word; an unknown word says which there are.
    fn from_str(word: &str) -> Result<Trigger, String> {
        Trigger::ALL
            .into_iter()
            .find(|t| t.as_str() == word)
            .ok_or_else(|| {
                let words: Vec<&str> = Trigger::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown trigger {word:?} (one of: {})", words.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Trigger;

    #[test]
    fn each_kind_round_trips_through_its_word_and_serde() {
        for kind in Trigger::ALL {
            assert_eq!(kind.as_str().parse::<Trigger>(), Ok(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
        let err = "cron".parse::<Trigger>().unwrap_err();
        assert!(
            err.contains("unknown trigger \"cron\" (one of: cli, schedule"),
            "{err}"
        );
    }
}
