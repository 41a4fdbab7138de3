//! The `email:` section of a channel file: a mailbox read over IMAP (new
//! mail fetched, then IDLE where the server has it, else polled) and
//! answered over SMTP from the mailbox's own address. Passwords are
//! secrets (`${VAR}`); a connection without TLS is allowed only to this
//! machine (127.0.0.1, ::1, localhost), where nothing crosses a network.
//!
//! ```yaml
//! agent: helper
//! allow: { users: ["alice@example.com"] }
//! email:
//!   address: agent@example.com      # From of the answers; IMAP/SMTP login by default
//!   imap: { host: imap.example.com, password: ${IMAP_PASSWORD} }   # tls, 993
//!   smtp: { host: smtp.example.com, password: ${SMTP_PASSWORD} }   # tls, 465
//! ```
//!
//! Give the agent a mailbox of its own: every unseen mail in it is read
//! (and marked seen) as a message. The allow-list checks the From
//! address, which a sender can forge: for an agent with tools that act,
//! have the mail server refuse forged mail (SPF, DKIM, DMARC).

use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::Section;
use crate::config::duration::duration_value;

/// How often the mailbox is checked when the server lacks IDLE.
pub const DEFAULT_POLL: Duration = Duration::from_secs(60);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEmail {
    address: Option<String>,
    imap: Option<RawImap>,
    smtp: Option<RawServer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawImap {
    host: Option<String>,
    port: Option<u16>,
    tls: Option<String>,
    username: Option<String>,
    password: Option<String>,
    mailbox: Option<String>,
    poll: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    host: Option<String>,
    port: Option<u16>,
    tls: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmailConfig {
    /// The mailbox's own address: the From of every answer. Mail from it
    /// is never taken as a message (a loop).
    pub address: String,
    pub imap: ImapConfig,
    pub smtp: ServerConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImapConfig {
    pub server: ServerConfig,
    /// The mailbox (folder) read, `INBOX` unless given.
    pub mailbox: String,
    /// How often to look for new mail when the server has no IDLE.
    pub poll: Duration,
}

/// Where a server is and how to log in.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    pub tls: Tls,
    pub username: String,
    /// A secret (`${VAR}`).
    pub password: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// TLS from the first byte (IMAPS 993, SMTPS 465).
    Tls,
    /// A plain connection upgraded with STARTTLS before logging in.
    StartTls,
    /// No TLS: only to this machine.
    None,
}

/// Is `host` this machine (where `tls: none` is allowed)?
fn is_local(host: &str) -> bool {
    matches!(
        host.trim_matches(|c| c == '[' || c == ']'),
        "127.0.0.1" | "::1" | "localhost"
    )
}

pub(super) fn parse(raw: &RawEmail, section: &mut Section) -> Option<EmailConfig> {
    let address = match raw.address.as_deref().map(str::trim) {
        Some(a) if valid_address(a) => Some(a.to_string()),
        Some(a) => {
            section.error(
                "address",
                format!("`email.address`: {a:?} is not an email address; give the mailbox's own address, e.g. agent@example.com (answers are sent from it)"),
            );
            None
        }
        None => {
            section.error(
                "",
                "`email.address` is required: the mailbox's own address, e.g. agent@example.com (answers are sent from it)".into(),
            );
            None
        }
    };
    let default_user = address.clone().unwrap_or_default();
    let imap = match &raw.imap {
        Some(imap) => {
            let server = server(
                section,
                "imap",
                &Fields {
                    host: &imap.host,
                    port: imap.port,
                    tls: &imap.tls,
                    username: &imap.username,
                    password: &imap.password,
                },
                (993, 143),
                &default_user,
            );
            let poll = match &imap.poll {
                None => Some(DEFAULT_POLL),
                Some(v) => match duration_value(v) {
                    Ok(d) if d >= Duration::from_secs(1) => Some(d),
                    Ok(_) => {
                        section.error("imap.poll", "`email.imap.poll` must be at least 1s; mail servers do not like to be asked more often".into());
                        None
                    }
                    Err(e) => {
                        section.error("imap.poll", format!("`email.imap.poll`: {e}"));
                        None
                    }
                },
            };
            let mailbox = match imap.mailbox.as_deref().map(str::trim) {
                None => Some("INBOX".to_string()),
                Some(m) if !m.is_empty() && !m.contains(['"', '\\', '\r', '\n']) => {
                    Some(m.to_string())
                }
                Some(m) => {
                    section.error(
                        "imap.mailbox",
                        format!("`email.imap.mailbox`: {m:?} is not a folder name (no quotes, backslashes or line breaks); the default is INBOX"),
                    );
                    None
                }
            };
            match (server, poll, mailbox) {
                (Some(server), Some(poll), Some(mailbox)) => Some(ImapConfig {
                    server,
                    mailbox,
                    poll,
                }),
                _ => None,
            }
        }
        None => {
            section.error(
                "",
                "`email.imap` is required: the server the mailbox is read from, e.g. `imap: { host: imap.example.com, password: ${IMAP_PASSWORD} }`".into(),
            );
            None
        }
    };
    let smtp = match &raw.smtp {
        Some(smtp) => server(
            section,
            "smtp",
            &Fields {
                host: &smtp.host,
                port: smtp.port,
                tls: &smtp.tls,
                username: &smtp.username,
                password: &smtp.password,
            },
            (465, 587),
            &default_user,
        ),
        None => {
            section.error(
                "",
                "`email.smtp` is required: the server answers are sent through, e.g. `smtp: { host: smtp.example.com, password: ${SMTP_PASSWORD} }`".into(),
            );
            None
        }
    };
    Some(EmailConfig {
        address: address?,
        imap: imap?,
        smtp: smtp?,
    })
}

struct Fields<'a> {
    host: &'a Option<String>,
    port: Option<u16>,
    tls: &'a Option<String>,
    username: &'a Option<String>,
    password: &'a Option<String>,
}

/// The server of subsection `sub` (`imap` or `smtp`); `ports` are the
/// defaults with TLS and without (STARTTLS or none).
fn server(
    section: &mut Section,
    sub: &str,
    raw: &Fields,
    ports: (u16, u16),
    default_user: &str,
) -> Option<ServerConfig> {
    let host = match raw.host.as_deref().map(str::trim) {
        Some(h) if !h.is_empty() && !h.contains(char::is_whitespace) => Some(h.to_string()),
        Some(_) => {
            section.error(
                &format!("{sub}.host"),
                format!("`email.{sub}.host` must be a host name or address"),
            );
            None
        }
        None => {
            section.error(
                sub,
                format!("`email.{sub}.host` is required: the {sub} server's name, e.g. {sub}.example.com"),
            );
            None
        }
    };
    let tls = match raw.tls.as_deref().unwrap_or("tls") {
        "tls" => Some(Tls::Tls),
        "starttls" => Some(Tls::StartTls),
        "none" => Some(Tls::None),
        other => {
            section.error(
                &format!("{sub}.tls"),
                format!("`email.{sub}.tls` is {other:?}; it is `tls` (the default), `starttls` or `none` (only to 127.0.0.1 or localhost)"),
            );
            None
        }
    };
    if let (Some(Tls::None), Some(host)) = (tls, &host)
        && !is_local(host)
    {
        section.error(
            &format!("{sub}.tls"),
            format!("`email.{sub}.tls: none` is allowed only to 127.0.0.1 or localhost: to {host} the password and the mail would cross the network in clear; use `tls` or `starttls`"),
        );
    }
    let port = match raw.port {
        Some(0) => {
            section.error(
                &format!("{sub}.port"),
                format!("`email.{sub}.port` cannot be 0"),
            );
            None
        }
        Some(p) => Some(p),
        None => Some(if tls == Some(Tls::Tls) {
            ports.0
        } else {
            ports.1
        }),
    };
    let username = match raw.username.as_deref().map(str::trim) {
        Some(u) if !u.is_empty() => u.to_string(),
        Some(_) => {
            section.error(
                &format!("{sub}.username"),
                format!(
                    "`email.{sub}.username` is empty; leave it out to log in as `email.address`"
                ),
            );
            String::new()
        }
        None => default_user.to_string(),
    };
    let password = section.secret(&format!("{sub}.password"), raw.password.as_deref(), true);
    Some(ServerConfig {
        host: host?,
        port: port?,
        tls: tls?,
        username,
        password: password?,
    })
}

/// A plain `local@domain` address (no display name, no spaces).
fn valid_address(a: &str) -> bool {
    match a.rsplit_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && (domain.contains('.') || domain == "localhost")
                && !a.contains(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | ',' | '"'))
        }
        None => false,
    }
}
