//! [`McpState`]: an MCP server's state as listings, `/v1/status` and the
//! metrics show it, without the details (`mcp::ServerState` has them).

use serde::Serialize;

/// What an MCP server of the project is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpState {
    /// Not started: no agent's allow-list reaches its tools.
    Unused,
    Connecting,
    Connected,
    /// Given up for good.
    Failed,
    /// Down, to be tried again.
    Restarting,
}

impl McpState {
    pub fn as_str(self) -> &'static str {
        match self {
            McpState::Unused => "unused",
            McpState::Connecting => "connecting",
            McpState::Connected => "connected",
            McpState::Failed => "failed",
            McpState::Restarting => "restarting",
        }
    }
}

impl std::fmt::Display for McpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::McpState;

    #[test]
    fn serialised_as_its_word() {
        for state in [
            McpState::Unused,
            McpState::Connecting,
            McpState::Connected,
            McpState::Failed,
            McpState::Restarting,
        ] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
    }
}
