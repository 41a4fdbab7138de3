//! The `discord:` section of a channel file: a Discord bot, reached over
//! the Gateway (a WebSocket the bot opens: no public port) with its REST
//! API for answers. With `public_key` set, component interactions (the
//! approval buttons) may also come as Discord's signed `POST`s to `POST
//! /channels/NAME` (the application's Interactions Endpoint URL).
//!
//! The allow-list's `users` are Discord user ids; its `chats` are server
//! (guild) ids, everyone in that server, or a DM channel's id.

use serde::Deserialize;

use super::Section;

/// Discord's REST API, version 10; the Gateway URL is asked of it.
pub const DEFAULT_API_URL: &str = "https://discord.com/api/v10";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscord {
    token: Option<String>,
    api_url: Option<String>,
    public_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DiscordConfig {
    /// The bot's token (`${VAR}`), sent as `Authorization: Bot TOKEN`.
    pub token: String,
    /// The REST API's base URL, without a final `/`.
    pub api_url: String,
    /// The application's Ed25519 public key (32 bytes), which signs the
    /// interactions Discord posts to the channel's webhook; `None`: the
    /// webhook is off and interactions come over the Gateway.
    pub public_key: Option<[u8; 32]>,
}

pub(super) fn parse(raw: &RawDiscord, section: &mut Section) -> Option<DiscordConfig> {
    let token = section.secret("token", raw.token.as_deref(), true);
    let api_url = section.base_url("api_url", raw.api_url.as_deref(), DEFAULT_API_URL);
    let mut public_key = None;
    if let Some(hex_key) = raw.public_key.as_deref() {
        let decoded = hex::decode(hex_key.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok());
        match decoded {
            Some(key) => public_key = Some(key),
            None => section.error(
                "public_key",
                format!(
                    "`discord.public_key` {hex_key:?} is not 64 hex digits; copy the application's Public Key from the Developer Portal (General Information)"
                ),
            ),
        }
    }
    if raw.public_key.is_some() && public_key.is_none() {
        return None;
    }
    Some(DiscordConfig {
        token: token?,
        api_url,
        public_key,
    })
}
