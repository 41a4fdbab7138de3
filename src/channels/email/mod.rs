//! Email: a mailbox read over IMAP and answered over SMTP. New mail is
//! fetched without being marked (`BODY.PEEK[]`), handed to the daemon, and
//! only once the daemon has taken it marked `\Seen`, so a crash in between
//! gives it again (and the daemon's claim, by Message-ID, drops the
//! repeat). Then the connector waits in IDLE where the server has it
//! (re-issued every 25 minutes, under RFC 2177's 29, and after 5 minutes
//! without a word from the server, which may mean a dead connection), else
//! polls every `imap.poll`. A dropped connection is reconnected with backoff.
//!
//! A thread is one conversation, named by its root's Message-ID (the first
//! of `References`, else `In-Reply-To`, else the message's own). Answers
//! go out with lettre's SMTP client as replies in the thread (`Re:`,
//! `In-Reply-To`, `References`), plain text (Markdown reads well as it is),
//! with a Message-ID derived from the piece's key so a retried send is one
//! message. There are no buttons: an approval is a mail asking for a reply
//! of one word, which comes back as an ordinary message.

pub mod imap;
pub mod mail;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use lettre::message::Mailbox as Address;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls as SmtpTls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::{ChannelError, ChannelState, Connector, Conversation, Inbox, Outgoing};
use crate::config::channels::email::{EmailConfig, Tls};

/// Mail has no practical limit on a message's length (servers take
/// megabytes); this only keeps one answer piece to a readable mail.
const MAX_MESSAGE: usize = 100_000;
/// IDLE is re-issued this often: RFC 2177 lets a server end it after 29
/// minutes.
const IDLE_RENEW: Duration = Duration::from_secs(25 * 60);
/// An IDLE during which the server said nothing this long (servers send a
/// keepalive every few minutes) is ended, and its DONE shows whether the
/// connection still lives.
const IDLE_SILENCE: Duration = Duration::from_secs(5 * 60);
/// How long one SMTP exchange may take.
const SMTP_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Email {
    config: EmailConfig,
    state: Arc<ChannelState>,
    /// The first wait of the reconnect backoff (tests make it short).
    first_backoff: Duration,
    /// How often IDLE is re-issued (tests make it short).
    idle_renew: Duration,
}

/// How one connection ended.
enum Ended {
    /// Shutdown, or the daemon stopped taking updates.
    Stop,
    /// The connection failed: reconnect.
    Dropped(String),
}

impl Email {
    pub fn new(config: EmailConfig, state: Arc<ChannelState>) -> Self {
        Email {
            config,
            state,
            first_backoff: Duration::from_secs(1),
            idle_renew: IDLE_RENEW,
        }
    }

    /// Reconnects after `first` at first instead of a second (for tests).
    pub fn with_first_backoff(mut self, first: Duration) -> Self {
        self.first_backoff = first;
        self
    }

    /// Re-issues IDLE every `renew` instead of 25 minutes (for tests).
    pub fn with_idle_renew(mut self, renew: Duration) -> Self {
        self.idle_renew = renew;
        self
    }

    /// One connection: deliver what is unseen, wait for more, until it
    /// fails or the channel stops.
    async fn session(
        &self,
        inbox: &Inbox,
        shutdown: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Ended {
        let opened = tokio::select! {
            r = imap::open(&self.config.imap) => r,
            () = shutdown.cancelled() => return Ended::Stop,
        };
        let mut mailbox = match opened {
            Ok(m) => m,
            Err(e) => return Ended::Dropped(e),
        };
        self.state.connected();
        backoff.connected();
        loop {
            match self.deliver_unseen(&mut mailbox, inbox, shutdown).await {
                Ok(true) => {}
                Ok(false) => {
                    mailbox.logout().await;
                    return Ended::Stop;
                }
                Err(e) => return Ended::Dropped(e),
            }
            if mailbox.idle {
                match mailbox.idle(self.idle_renew, IDLE_SILENCE, shutdown).await {
                    Ok(Some(m)) => mailbox = m,
                    Ok(None) => return Ended::Stop,
                    Err(e) => return Ended::Dropped(e),
                }
            } else {
                tokio::select! {
                    () = tokio::time::sleep(self.config.imap.poll) => {}
                    () = shutdown.cancelled() => {
                        mailbox.logout().await;
                        return Ended::Stop;
                    }
                }
                if let Err(e) = mailbox.noop().await {
                    return Ended::Dropped(e);
                }
            }
        }
    }

    /// Hands each unseen message to the daemon, then marks it seen.
    /// `Ok(false)`: stop (shutdown, or the daemon takes no more).
    async fn deliver_unseen(
        &self,
        mailbox: &mut imap::Mailbox,
        inbox: &Inbox,
        shutdown: &CancellationToken,
    ) -> Result<bool, imap::Error> {
        for uid in mailbox.unseen().await? {
            if shutdown.is_cancelled() {
                return Ok(false);
            }
            let Some(raw) = mailbox.fetch(uid).await? else {
                continue;
            };
            let fallback = format!("uid:{}:{uid}", mailbox.uid_validity);
            match mail::incoming(&raw, &self.config.address, &fallback) {
                Ok(incoming) => {
                    let delivered = tokio::select! {
                        r = inbox.deliver(incoming) => r,
                        () = shutdown.cancelled() => return Ok(false),
                    };
                    if delivered.is_err() {
                        return Ok(false);
                    }
                }
                Err(skip) => {
                    tracing::debug!(channel = %self.state.name, uid, "mail left out: {skip}");
                }
            }
            // Taken by the daemon (or not for it): not fetched again.
            mailbox.mark_seen(uid).await?;
        }
        Ok(true)
    }

    fn transport(&self) -> Result<AsyncSmtpTransport<Tokio1Executor>, ChannelError> {
        let smtp = &self.config.smtp;
        let tls = |host: &str| {
            TlsParameters::new(host.to_string()).map_err(|e| {
                ChannelError::Permanent(format!("SMTP {host}: TLS could not be set up: {e}"))
            })
        };
        let tls = match smtp.tls {
            Tls::Tls => SmtpTls::Wrapper(tls(&smtp.host)?),
            Tls::StartTls => SmtpTls::Required(tls(&smtp.host)?),
            Tls::None => SmtpTls::None,
        };
        let domain = self
            .config
            .address
            .rsplit_once('@')
            .map_or("localhost", |(_, d)| d);
        Ok(
            AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host.as_str())
                .port(smtp.port)
                .tls(tls)
                .credentials(Credentials::new(
                    smtp.username.clone(),
                    smtp.password.clone(),
                ))
                .hello_name(ClientId::Domain(domain.to_string()))
                .timeout(Some(SMTP_TIMEOUT))
                .build(),
        )
    }

    /// Sends `body` in reply to `to`'s thread, as Message-ID `id`.
    async fn send_mail(
        &self,
        to: &Conversation,
        body: String,
        id: String,
    ) -> Result<(), ChannelError> {
        let reply = mail::ReplyTo::from_json(&to.reply).ok_or_else(|| {
            ChannelError::Permanent(format!(
                "conversation {}: its reply data has no `to` address: {}",
                to.key, to.reply
            ))
        })?;
        let from: Address = self.config.address.parse().map_err(|e| {
            ChannelError::Permanent(format!(
                "`email.address` {:?} cannot be a From: {e}",
                self.config.address
            ))
        })?;
        let recipient: Address = reply.to.parse().map_err(|e| {
            ChannelError::Permanent(format!("{:?} cannot be a To address: {e}", reply.to))
        })?;
        let mut builder = Message::builder()
            .from(from)
            .to(recipient)
            .subject(reply.subject.clone())
            .message_id(Some(id));
        if let Some(parent) = &reply.in_reply_to {
            builder = builder.in_reply_to(parent.clone());
        }
        if !reply.references.is_empty() {
            builder = builder.references(reply.references.join(" "));
        }
        let message = builder
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| {
                ChannelError::Permanent(format!("the answer mail could not be built: {e}"))
            })?;
        // A connection per mail: answers are few and far between, and a
        // pooled connection would be found dead after an idle hour.
        let transport = self.transport()?;
        match transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(ChannelError::Permanent(format!(
                "SMTP {}:{} refused the answer to {}: {e}",
                self.config.smtp.host, self.config.smtp.port, reply.to
            ))),
            Err(e) => Err(ChannelError::retryable(format!(
                "SMTP {}:{}: sending the answer to {} failed: {e}",
                self.config.smtp.host, self.config.smtp.port, reply.to
            ))),
        }
    }
}

/// The mail asking for a decision on `p`: reply words instead of buttons.
fn approval_text(p: &super::ApprovalPrompt) -> String {
    format!(
        "The agent wants to run a tool and needs your approval.\n\n\
         Tool: {}\nArguments:\n{}\n\n\
         Reply with the single word {} to run it, or {} to refuse.\n",
        p.tool,
        indent(&p.arguments),
        p.approve_word.to_uppercase(),
        p.deny_word.to_uppercase(),
    )
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Connector for Email {
    fn run(self: Arc<Self>, inbox: Inbox, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut backoff = Backoff::starting_at(self.first_backoff);
            loop {
                match self.session(&inbox, &shutdown, &mut backoff).await {
                    Ended::Stop => break,
                    Ended::Dropped(reason) => {
                        self.state.reconnecting(reason);
                        tokio::select! {
                            () = tokio::time::sleep(backoff.next_wait()) => {}
                            () = shutdown.cancelled() => break,
                        }
                    }
                }
            }
            self.state.stopped();
        })
    }

    fn send<'a>(
        &'a self,
        to: &'a Conversation,
        message: &'a Outgoing,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            match message {
                Outgoing::Text { markdown, key } => {
                    let id = mail::message_id(key, &self.config.address);
                    self.send_mail(to, markdown.clone(), id).await
                }
                Outgoing::Approval(p) => {
                    let id =
                        mail::message_id(&format!("approval:{}", p.token), &self.config.address);
                    self.send_mail(to, approval_text(p), id).await
                }
                // A decision came as a reply mail (there are no buttons to
                // answer): say what became of it in the thread. Two
                // decisions may say the same words, so the Message-ID is
                // fresh.
                Outgoing::Decided { text, .. } => {
                    let id = mail::message_id(
                        &format!("decided:{}", uuid::Uuid::now_v7()),
                        &self.config.address,
                    );
                    self.send_mail(to, text.clone(), id).await
                }
            }
        })
    }

    fn typing<'a>(&'a self, _to: &'a Conversation) -> BoxFuture<'a, Result<(), ChannelError>> {
        // Mail has no typing indicator.
        Box::pin(async { Ok(()) })
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE
    }
}
