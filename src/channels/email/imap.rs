//! The IMAP side: a connection (TCP, then TLS from the start or after
//! STARTTLS, or plain to this machine), the login and the selected
//! mailbox, and the few commands the channel needs: the UIDs of unseen
//! mail, one message fetched without marking it seen (`BODY.PEEK[]`), the
//! `\Seen` flag set once the daemon has taken it, and IDLE.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_imap::extensions::idle::IdleResponse;
use futures::TryStreamExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::config::channels::email::{ImapConfig, Tls};

/// How long connecting, TLS and logging in may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one command (a search, a fetch, a store) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A TCP connection, with TLS or without.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

pub type Session = async_imap::Session<Stream>;

/// A logged-in session with the mailbox selected.
pub struct Mailbox {
    session: Session,
    /// The server has IDLE (RFC 2177).
    pub idle: bool,
    /// The mailbox's UIDVALIDITY: with a UID, names a message for good.
    pub uid_validity: u32,
}

/// What went wrong, for the channel's status.
pub type Error = String;

async fn timed<T, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, Error> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {}s", limit.as_secs())),
    }
}

/// A TLS client over the platform's certificate verifier (the system's
/// trusted roots), with aws-lc-rs as the rest of the program has it.
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| format!("TLS could not be set up: {e}"))?
        .with_no_client_auth();
    Ok(Arc::new(config))
}

async fn tls(tcp: TcpStream, host: &str) -> Result<Stream, Error> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host:?} is not a name TLS can check: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(tls_config()?);
    let stream = timed(
        &format!("TLS with {host}"),
        CONNECT_TIMEOUT,
        connector.connect(name, tcp),
    )
    .await?;
    Ok(Stream::Tls(Box::new(stream)))
}

/// Connects to `config`'s server, logs in and selects its mailbox.
pub async fn open(config: &ImapConfig) -> Result<Mailbox, Error> {
    let server = &config.server;
    let place = format!("IMAP {}:{}", server.host, server.port);
    let tcp = timed(
        &format!("connecting to {place}"),
        CONNECT_TIMEOUT,
        TcpStream::connect((server.host.as_str(), server.port)),
    )
    .await?;
    let _ = tcp.set_nodelay(true);
    let stream = match server.tls {
        Tls::Tls => tls(tcp, &server.host).await?,
        Tls::None | Tls::StartTls => Stream::Plain(tcp),
    };
    let mut client = async_imap::Client::new(stream);
    let greeting = timed(
        &format!("{place}: the greeting"),
        CONNECT_TIMEOUT,
        client.read_response(),
    )
    .await?;
    if greeting.is_none() {
        return Err(format!("{place} closed the connection before its greeting"));
    }
    if server.tls == Tls::StartTls {
        timed(
            &format!("{place}: STARTTLS"),
            CONNECT_TIMEOUT,
            client.run_command_and_check_ok("STARTTLS", None),
        )
        .await?;
        let Stream::Plain(tcp) = client.into_inner() else {
            return Err(format!(
                "{place}: STARTTLS on a connection already under TLS"
            ));
        };
        client = async_imap::Client::new(tls(tcp, &server.host).await?);
    }
    let mut session = match tokio::time::timeout(
        CONNECT_TIMEOUT,
        client.login(&server.username, &server.password),
    )
    .await
    {
        Ok(Ok(session)) => session,
        Ok(Err((e, _))) => {
            return Err(format!(
                "{place}: logging in as {} failed: {e}; check `email.imap.username` and the password's variable",
                server.username
            ));
        }
        Err(_) => return Err(format!("{place}: logging in: no answer")),
    };
    let capabilities = timed(
        &format!("{place}: CAPABILITY"),
        COMMAND_TIMEOUT,
        session.capabilities(),
    )
    .await?;
    let idle = capabilities.has_str("IDLE");
    let selected = timed(
        &format!("{place}: selecting {}", config.mailbox),
        COMMAND_TIMEOUT,
        session.select(&config.mailbox),
    )
    .await
    .map_err(|e| format!("{e}; check `email.imap.mailbox`"))?;
    Ok(Mailbox {
        session,
        idle,
        uid_validity: selected.uid_validity.unwrap_or(0),
    })
}

impl Mailbox {
    /// The UIDs of the messages not yet seen, oldest first.
    pub async fn unseen(&mut self) -> Result<Vec<u32>, Error> {
        // Updates the server announced on their own are not needed: the
        // search below asks for the state as it is.
        while self.session.unsolicited_responses.try_recv().is_ok() {}
        let uids = timed(
            "IMAP UID SEARCH UNSEEN",
            COMMAND_TIMEOUT,
            self.session.uid_search("UNSEEN"),
        )
        .await?;
        let mut uids: Vec<u32> = uids.into_iter().collect();
        uids.sort_unstable();
        Ok(uids)
    }

    /// Message `uid`, whole, without setting `\Seen`; `None` when it is
    /// gone (expunged meanwhile).
    pub async fn fetch(&mut self, uid: u32) -> Result<Option<Vec<u8>>, Error> {
        let what = format!("IMAP UID FETCH {uid}");
        let fetch = async {
            let stream = self
                .session
                .uid_fetch(uid.to_string(), "(UID BODY.PEEK[])")
                .await?;
            let all: Vec<_> = stream.try_collect().await?;
            Ok::<_, async_imap::error::Error>(
                all.iter()
                    .find(|f| f.uid == Some(uid))
                    .and_then(|f| f.body().map(<[u8]>::to_vec)),
            )
        };
        timed(&what, COMMAND_TIMEOUT, fetch).await
    }

    /// Marks message `uid` `\Seen`: the daemon has it.
    pub async fn mark_seen(&mut self, uid: u32) -> Result<(), Error> {
        let what = format!("IMAP UID STORE {uid} +FLAGS (\\Seen)");
        let store = async {
            let stream = self
                .session
                .uid_store(uid.to_string(), "+FLAGS.SILENT (\\Seen)")
                .await?;
            let _: Vec<_> = stream.try_collect().await?;
            Ok::<_, async_imap::error::Error>(())
        };
        timed(&what, COMMAND_TIMEOUT, store).await
    }

    /// Waits in IDLE until the server reports a change, `renew` passes
    /// (the caller issues it again: RFC 2177 lets a server end an IDLE
    /// after 29 minutes), the server says nothing for `silence` (not even
    /// its keepalive: the connection may be dead without a word), or
    /// `cancel` ends. Gives the mailbox back.
    pub async fn idle(
        self,
        renew: Duration,
        silence: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Option<Mailbox>, Error> {
        let Mailbox {
            session,
            idle,
            uid_validity,
        } = self;
        // Mail that arrives after the last search but before the server
        // confirms IDLE is announced (`* N EXISTS`) while `init` waits for
        // the confirmation, and the crate passes that to the unsolicited
        // responses, not to the wait: looked at here, or that mail would
        // wait for the next renewal.
        let announced = session.unsolicited_responses.clone();
        let mut handle = session.idle();
        timed("IMAP IDLE", COMMAND_TIMEOUT, handle.init()).await?;
        let mut news = false;
        while let Ok(response) = announced.try_recv() {
            news |= matches!(
                response,
                async_imap::types::UnsolicitedResponse::Exists(_)
                    | async_imap::types::UnsolicitedResponse::Recent(_)
            );
        }
        let outcome = if news {
            Some(Ok(IdleResponse::ManualInterrupt))
        } else {
            let (wait, stop) = handle.wait_with_timeout(silence);
            tokio::pin!(wait);
            // Dropping the stop source interrupts the wait (a server's
            // keepalives reset only the silence timer, not this one).
            let mut stop = Some(stop);
            let renewal = tokio::time::sleep(renew);
            tokio::pin!(renewal);
            loop {
                tokio::select! {
                    r = &mut wait => break Some(r),
                    () = &mut renewal, if stop.is_some() => drop(stop.take()),
                    () = cancel.cancelled() => break None,
                }
            }
        };
        match outcome {
            None => return Ok(None),
            Some(Err(e)) => return Err(format!("IMAP IDLE: {e}")),
            // A change, silence, the renewal, or the stream ended (which
            // the crate reports as an interrupt too): DONE tells which, by
            // failing on a closed connection.
            Some(Ok(IdleResponse::NewData(_) | IdleResponse::Timeout))
            | Some(Ok(IdleResponse::ManualInterrupt)) => {}
        }
        let session = timed(
            "IMAP DONE (the end of IDLE)",
            COMMAND_TIMEOUT,
            handle.done(),
        )
        .await?;
        Ok(Some(Mailbox {
            session,
            idle,
            uid_validity,
        }))
    }

    /// Asks the server for news (polling, without IDLE); fails on a closed
    /// connection.
    pub async fn noop(&mut self) -> Result<(), Error> {
        timed("IMAP NOOP", COMMAND_TIMEOUT, self.session.noop()).await
    }

    /// Logs out, best effort.
    pub async fn logout(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.session.logout()).await;
    }
}
