//! The API's accept loop, with the limits of a server that anything on the
//! network (or any local process) can open connections to:
//!
//! - at most [`MAX_CONNECTIONS`] open at once (and fewer when the process
//!   may open fewer files): a connection beyond is closed at once, so the
//!   daemon keeps the descriptors its runs, store and tools need;
//! - a request's headers must arrive within [`HEADER_TIMEOUT`], and a
//!   connection that waits that long for its next request is closed: an
//!   idle or trickling client holds a connection for seconds, not forever.
//!   A response in progress (an event stream) is not limited;
//! - request bodies are capped by the router (`MAX_BODY`, 413);
//! - `TCP_NODELAY`, so the end of a stream is not held back 40 ms;
//! - on `stop`, no new connection; each open one finishes the request in
//!   progress and closes (event streams end with the router's `stop`).
//!
//! HTTP/1.1 only: the clients of this API (the CLI, the dashboard, curl,
//! the OpenAI and MCP SDKs) speak it, and an idle HTTP/2 connection has no
//! header timeout to close it. Depends on axum, hyper and tokio.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The most connections open at once.
pub const MAX_CONNECTIONS: usize = 4096;
/// Descriptors kept for everything but connections when the open-file
/// limit is what bounds them.
pub const RESERVED_FILES: u64 = 256;
/// How long a request's headers, or the next request on an open
/// connection, may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `stop`, then waits for the open
/// connections to finish their request.
pub async fn serve(listener: TcpListener, app: Router, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(connection_cap()));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, a connection reset before accept:
                // wait a little rather than spin, then go on.
                tracing::debug!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "connection refused: {} connections are open already", connection_cap());
            drop(tcp);
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on an accepted connection: {e}");
        }
        let service = TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(tcp), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::trace!(%peer, "connection ended: {e}");
                    }
                }
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(slot);
        });
    }
    connections.close();
    connections.wait().await;
}

/// [`MAX_CONNECTIONS`], or fewer when the soft open-file limit leaves
/// less than that beyond [`RESERVED_FILES`].
fn connection_cap() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return MAX_CONNECTIONS;
    }
    let room = limit.rlim_cur.saturating_sub(RESERVED_FILES).max(16);
    usize::try_from(room).map_or(MAX_CONNECTIONS, |room| room.min(MAX_CONNECTIONS))
}
