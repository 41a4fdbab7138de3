//! The `slack:` section of a channel file: a Slack app with a bot user.
//! Events reach it by Socket Mode (`mode: socket`, the default: an
//! outbound WebSocket opened with the app-level token, no public port) or
//! by the Events API (`mode: events`: Slack posts events and button
//! presses to `POST /channels/NAME`, each request signed with the app's
//! signing secret). Answers go out through the Web API with the bot token.
//!
//! ```yaml
//! agent: helper
//! allow: { users: ["U0123ABCD"] }   # Slack member ids, or chats: channel ids
//! slack:
//!   bot_token: ${SLACK_BOT_TOKEN}   # xoxb-...
//!   app_token: ${SLACK_APP_TOKEN}   # xapp-... (mode: socket, the default)
//!   # mode: events
//!   # signing_secret: ${SLACK_SIGNING_SECRET}
//! ```
//!
//! The Slack app this needs (api.slack.com/apps): bot token scopes
//! `app_mentions:read`, `im:history` and `chat:write`; bot events
//! `app_mention` and `message.im`; the App Home's Messages tab allowed, for
//! direct messages; Interactivity on, for the approval buttons. Socket
//! Mode: turned on, and an app-level token with `connections:write`.
//! Events API: the Event Subscriptions and Interactivity Request URLs both
//! `https://HOST/channels/NAME`, and the app's Signing Secret.

use serde::Deserialize;

use super::Section;

/// Slack's Web API; tests point `api_url` at a fake.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSlack {
    bot_token: Option<String>,
    mode: Option<String>,
    app_token: Option<String>,
    signing_secret: Option<String>,
    api_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SlackConfig {
    /// The bot user's OAuth token (`xoxb-...`, `${VAR}`): every Web API call.
    pub bot_token: String,
    pub mode: SlackMode,
    /// The Web API's base URL, without a final `/` (methods are
    /// `{api_url}/chat.postMessage`, ...).
    pub api_url: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SlackMode {
    /// Socket Mode: `apps.connections.open` with the app-level token
    /// (`xapp-...`, scope `connections:write`), then a WebSocket.
    Socket { app_token: String },
    /// The Events API and interactivity posted to the daemon, checked with
    /// the signing secret.
    Events { signing_secret: String },
}

pub(super) fn parse(raw: &RawSlack, section: &mut Section) -> Option<SlackConfig> {
    let bot_token = section.secret("bot_token", raw.bot_token.as_deref(), true);
    if let Some(t) = &bot_token
        && !t.starts_with("xoxb-")
    {
        let hint = if t.starts_with("xapp-") {
            " (this is an app-level token: it belongs in `slack.app_token`)"
        } else {
            ""
        };
        section.error(
            "bot_token",
            format!("`slack.bot_token` must be a bot token, starting with `xoxb-` (OAuth & Permissions, Bot User OAuth Token){hint}"),
        );
    }
    let mode = match raw.mode.as_deref().unwrap_or("socket") {
        "socket" => {
            if raw.signing_secret.is_some() {
                section.error(
                    "signing_secret",
                    "`slack.signing_secret` is for `mode: events`; Socket Mode needs none (remove it, or set `mode: events`)".into(),
                );
            }
            let app_token = section.secret("app_token", raw.app_token.as_deref(), true);
            if let Some(t) = &app_token
                && !t.starts_with("xapp-")
            {
                section.error(
                    "app_token",
                    "`slack.app_token` must be an app-level token, starting with `xapp-` (Basic Information, App-Level Tokens, scope connections:write)".into(),
                );
            }
            app_token.map(|app_token| SlackMode::Socket { app_token })
        }
        "events" => {
            if raw.app_token.is_some() {
                section.error(
                    "app_token",
                    "`slack.app_token` is for `mode: socket`; the Events API needs `signing_secret` instead".into(),
                );
            }
            section
                .secret("signing_secret", raw.signing_secret.as_deref(), true)
                .map(|signing_secret| SlackMode::Events { signing_secret })
        }
        other => {
            section.error(
                "mode",
                format!("`slack.mode` is {other:?}; it is `socket` (the default) or `events`"),
            );
            None
        }
    };
    let api_url = section.base_url("api_url", raw.api_url.as_deref(), DEFAULT_API_URL);
    if !section.diagnostics.is_empty() {
        return None;
    }
    Some(SlackConfig {
        bot_token: bot_token?,
        mode: mode?,
        api_url,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{ChannelConfig, PlatformConfig, parse_channel};
    use super::*;
    use crate::config::diag::Diagnostic;
    use crate::config::interp;

    fn parse(raw: &str, env: &[(&str, &str)]) -> (Option<ChannelConfig>, String) {
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        let text = interp::interpolate_with(raw, &lookup, interp::Escape::Yaml).unwrap();
        let (channel, diags) = parse_channel(
            "team",
            Path::new("channels/team.yaml"),
            raw,
            &text,
            &["helper".to_string()],
        );
        let messages = diags
            .iter()
            .map(|d: &Diagnostic| format!("{}:{}: {}", d.line, d.column, d.message))
            .collect::<Vec<_>>()
            .join("\n");
        (channel, messages)
    }

    const ENV: &[(&str, &str)] = &[
        ("BOT", "xoxb-1-2-abc"),
        ("APP", "xapp-1-A1-3-def"),
        ("SIGN", "8f742231b10e8888abcd99yyyzzz85a5"),
    ];

    #[test]
    fn a_socket_mode_channel_loads() {
        let (channel, m) = parse(
            "agent: helper\nallow: { users: [U123] }\nslack:\n  bot_token: ${BOT}\n  app_token: ${APP}\n  api_url: http://127.0.0.1:9/api/\n",
            ENV,
        );
        let channel = channel.unwrap_or_else(|| panic!("{m}"));
        let PlatformConfig::Slack(s) = channel.platform else {
            panic!("not slack: {:?}", channel.platform)
        };
        assert_eq!(s.bot_token, "xoxb-1-2-abc");
        assert_eq!(
            s.mode,
            SlackMode::Socket {
                app_token: "xapp-1-A1-3-def".into()
            }
        );
        assert_eq!(s.api_url, "http://127.0.0.1:9/api");
    }

    #[test]
    fn events_mode_needs_the_signing_secret() {
        let (channel, m) = parse(
            "agent: helper\nallow: { anyone: true }\nslack:\n  bot_token: ${BOT}\n  mode: events\n",
            ENV,
        );
        assert!(channel.is_none());
        assert!(m.contains("`slack.signing_secret` is required"), "{m}");
        let (channel, m) = parse(
            "agent: helper\nallow: { anyone: true }\nslack:\n  bot_token: ${BOT}\n  mode: events\n  signing_secret: ${SIGN}\n",
            ENV,
        );
        let channel = channel.unwrap_or_else(|| panic!("{m}"));
        let PlatformConfig::Slack(s) = channel.platform else {
            panic!("not slack")
        };
        assert_eq!(s.api_url, DEFAULT_API_URL);
        assert!(matches!(s.mode, SlackMode::Events { .. }));
    }

    #[test]
    fn swapped_or_literal_tokens_are_refused_where_written() {
        let (channel, m) = parse(
            "agent: helper\nallow: { anyone: true }\nslack:\n  bot_token: ${APP}\n  app_token: ${BOT}\n",
            ENV,
        );
        assert!(channel.is_none());
        assert!(
            m.contains("4:14: `slack.bot_token` must be a bot token, starting with `xoxb-`"),
            "{m}"
        );
        assert!(m.contains("belongs in `slack.app_token`"), "{m}");
        assert!(
            m.contains("5:14: `slack.app_token` must be an app-level token"),
            "{m}"
        );
        let (_, m) = parse(
            "agent: helper\nallow: { anyone: true }\nslack:\n  bot_token: xoxb-in-clear\n  app_token: ${APP}\n  mode: sockets\n",
            ENV,
        );
        assert!(m.contains("4:14: `slack.bot_token` is a secret"), "{m}");
        assert!(m.contains("6:9: `slack.mode` is \"sockets\""), "{m}");
    }
}
