//! The `telegram:` section of a channel file: a bot of the Telegram Bot
//! API, reached by long polling (`getUpdates`, no public port) or, with
//! `mode: webhook`, by Telegram's calls to `POST /channels/NAME`, which
//! must carry the `X-Telegram-Bot-Api-Secret-Token` header.

use serde::Deserialize;

use super::Section;

/// Telegram's own API; a local Bot API server is given as `api_url`.
pub const DEFAULT_API_URL: &str = "https://api.telegram.org";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelegram {
    token: Option<String>,
    mode: Option<String>,
    webhook_secret: Option<String>,
    api_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TelegramConfig {
    /// The bot's token (`${VAR}`).
    pub token: String,
    pub mode: TelegramMode,
    /// The Bot API's base URL, without a final `/`.
    pub api_url: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TelegramMode {
    /// `getUpdates` long polling: outbound only.
    Polling,
    /// Updates posted to the daemon, checked against `secret` (the
    /// `secret_token` given to `setWebhook`).
    Webhook { secret: String },
}

pub(super) fn parse(raw: &RawTelegram, section: &mut Section) -> Option<TelegramConfig> {
    let token = section.secret("token", raw.token.as_deref(), true);
    let mode = match raw.mode.as_deref().unwrap_or("polling") {
        "polling" => Some(TelegramMode::Polling),
        "webhook" => section
            .secret("webhook_secret", raw.webhook_secret.as_deref(), true)
            .map(|secret| TelegramMode::Webhook { secret }),
        other => {
            section.error(
                "mode",
                format!("`telegram.mode` is {other:?}; it is `polling` (the default) or `webhook`"),
            );
            None
        }
    };
    match &mode {
        Some(TelegramMode::Webhook { secret })
            if !secret
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
        {
            section.error(
                "webhook_secret",
                "`telegram.webhook_secret` may hold only A-Z, a-z, 0-9, `_` and `-` (Telegram's rule for secret_token)".into(),
            );
        }
        Some(TelegramMode::Polling) if raw.webhook_secret.is_some() => section.error(
            "webhook_secret",
            "`telegram.webhook_secret` is for `mode: webhook`; remove it or set the mode".into(),
        ),
        _ => {}
    }
    let api_url = section.base_url("api_url", raw.api_url.as_deref(), DEFAULT_API_URL);
    Some(TelegramConfig {
        token: token?,
        mode: mode?,
        api_url,
    })
}
