//! systemd's service protocol for `aurad serve` (sd_notify(3)): `READY=1`
//! once the daemon serves, `STATUS=` lines,
//! `RELOADING=1` and `READY=1` around a hot reload, `STOPPING=1` at
//! shutdown, and the watchdog's `WATCHDOG=1`, sent by the daemon's main
//! loop only while its parts answer (see [`Notifier::until_shutdown`]).
//! Everything is a no-op unless `NOTIFY_SOCKET` is set (a `Type=notify`
//! unit); a path or an abstract name (`@...`) both work.
//! Written on std's Unix datagram sockets rather than with the `sd-notify`
//! crate: its latest release (0.5.0) connects to `@name` as a file path, so
//! an abstract socket fails with "No such file or directory".
//! Depends on std, tokio and tracing only: what "alive" means is the
//! caller's (`daemon/serve.rs`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// How often the status line is refreshed when no watchdog asks for more.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// The service manager's end of the protocol, if there is one. Cheap to
/// clone; clones share the "a send failed" flag so a broken socket is
/// logged once, not every tick.
#[derive(Clone)]
pub struct Notifier {
    /// `NOTIFY_SOCKET`, when set.
    socket: Option<String>,
    enabled: bool,
    /// Half of `WATCHDOG_USEC` when the watchdog is on for this process.
    watchdog_every: Option<Duration>,
    warned: Arc<AtomicBool>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `env`
    /// (the daemon's injectable environment; the crate itself reads the
    /// process's, which is the same in production). The watchdog is on
    /// when `WATCHDOG_USEC` is a number and `WATCHDOG_PID` is unset or
    /// this process's id.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Notifier {
        let socket = env("NOTIFY_SOCKET").filter(|s| !s.is_empty());
        let enabled = socket.is_some();
        let for_us = env("WATCHDOG_PID")
            .is_none_or(|pid| pid.trim().parse::<u32>() == Ok(std::process::id()));
        let watchdog_every = env("WATCHDOG_USEC")
            .and_then(|usec| usec.trim().parse::<u64>().ok())
            .filter(|usec| *usec > 0 && for_us && enabled)
            .map(|usec| Duration::from_micros(usec) / 2);
        Notifier {
            socket,
            enabled,
            watchdog_every,
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Sends `lines` (each `KEY=value`) in one datagram.
    fn send(&self, lines: &[&str]) {
        let Some(socket) = &self.socket else {
            return;
        };
        let mut message = lines.join("\n");
        message.push('\n');
        match send_to(socket, message.as_bytes()) {
            Ok(()) => self.warned.store(false, Ordering::Relaxed),
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "cannot tell the service manager (NOTIFY_SOCKET) how aurad is: {e}; systemd may consider the service failed"
                    );
                }
            }
        }
    }

    /// Start-up is over: the API listens, the scheduler and channels run.
    pub fn ready(&self, status: &str) {
        self.send(&["READY=1", &format!("STATUS={}", one_line(status))]);
    }

    /// A status line for `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send(&[&format!("STATUS={}", one_line(status))]);
    }

    /// A hot reload begins.
    pub fn reloading(&self) {
        self.send(&["RELOADING=1", "STATUS=reloading the project"]);
    }

    /// The reload is over (whether the new version was taken or not).
    pub fn reloaded(&self, status: &str) {
        self.ready(status);
    }

    /// Shutdown has begun.
    pub fn stopping(&self, status: &str) {
        self.send(&["STOPPING=1", &format!("STATUS={}", one_line(status))]);
    }

    /// Awaits `shutdown`. Meanwhile, when the watchdog is on, every half
    /// `WATCHDOG_USEC` it runs `alive` and sends `WATCHDOG=1` only when it
    /// answers `true` within that half period: not a timer of its own, so
    /// a wedged daemon (a part that no longer answers, a task that ended,
    /// a runtime that no longer polls this loop) stops the pings and
    /// systemd restarts it. Without a watchdog it refreshes the status
    /// line (`status`) every few seconds.
    pub async fn until_shutdown<A, AF, S>(
        &self,
        shutdown: impl Future<Output = ()>,
        mut alive: A,
        mut status: S,
    ) where
        A: FnMut() -> AF,
        AF: Future<Output = Result<(), String>>,
        S: FnMut() -> String,
    {
        tokio::pin!(shutdown);
        if !self.enabled {
            return shutdown.await;
        }
        let every = self.watchdog_every.unwrap_or(STATUS_EVERY);
        let mut last_status = String::new();
        let mut failing = false;
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(every) => {}
            }
            let line = status();
            if line != last_status {
                self.status(&line);
                last_status = line;
            }
            if self.watchdog_every.is_none() {
                continue;
            }
            let verdict = match tokio::time::timeout(every, alive()).await {
                Ok(verdict) => verdict,
                Err(_) => Err(format!("no answer within {}ms", every.as_millis())),
            };
            match verdict {
                Ok(()) => {
                    if failing {
                        tracing::info!("the daemon answers again: watchdog pings resume");
                        failing = false;
                    }
                    self.send(&["WATCHDOG=1"]);
                }
                Err(why) => {
                    if !failing {
                        tracing::error!(
                            "the daemon does not answer ({why}): watchdog pings stop, and systemd restarts aurad if it stays so for WatchdogSec"
                        );
                        failing = true;
                    }
                }
            }
        }
    }
}

/// A status on one line: a newline would start another assignment.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// One datagram to `socket`: a path, or with a leading `@` an abstract
/// name (Linux), as systemd writes `NOTIFY_SOCKET`.
fn send_to(socket: &str, message: &[u8]) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let address = match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let sent = UnixDatagram::unbound()?.send_to_addr(message, &address)?;
    if sent == message.len() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes", message.len()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::Notifier;
    use std::time::Duration;

    fn with(vars: &'static [(&'static str, &'static str)]) -> Notifier {
        Notifier::from_env(&|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_watchdog_is_on_only_for_this_process_under_a_socket() {
        let on = with(&[("NOTIFY_SOCKET", "@x"), ("WATCHDOG_USEC", "400000")]);
        assert!(on.enabled);
        assert_eq!(on.watchdog_every, Some(Duration::from_millis(200)));
        let other_pid = with(&[
            ("NOTIFY_SOCKET", "@x"),
            ("WATCHDOG_USEC", "400000"),
            ("WATCHDOG_PID", "1"),
        ]);
        assert_eq!(other_pid.watchdog_every, None);
        let no_socket = with(&[("WATCHDOG_USEC", "400000")]);
        assert!(!no_socket.enabled);
        assert_eq!(no_socket.watchdog_every, None);
        assert!(!with(&[("NOTIFY_SOCKET", "")]).enabled);
    }
}
