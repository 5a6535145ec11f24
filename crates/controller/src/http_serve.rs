//! The one serve path of every HTTP listener verdict opens (the agent's metrics and health
//! addresses, and each Service's health check port).
//!
//! Anyone who can reach these ports is untrusted, and hyper alone bounds nothing: without a
//! timer it never times out a half-sent request, it accepts any number of connections, and an
//! accept loop that retries at once spins a core when file descriptors run out. So here:
//! - a client gets [`Limits::header_read_timeout`] to send its request head, then is closed;
//! - at most [`Limits::max_connections`] connections are served at once; beyond that, a new
//!   connection is closed as soon as it is accepted (the ones being served are untouched);
//! - a request head is at most [`Limits::max_header_bytes`] (431 beyond), so each connection's
//!   memory is bounded too;
//! - after an accept error (EMFILE, ENFILE, ENOBUFS...) the loop pauses, longer each time in a
//!   row, instead of retrying at once.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// What one listener allows its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client has to send a complete request head.
    pub header_read_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
    /// The largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    /// Generous for load balancers and kubelet probes (one small request each, a few per
    /// second), small enough that a flood holds a few MB at most.
    fn default() -> Self {
        Limits { header_read_timeout: Duration::from_secs(10), max_connections: 512, max_header_bytes: 8 * 1024 }
    }
}

/// Answers one request. Every verdict endpoint answers from memory, at once, so a plain
/// function is enough.
pub type Handler = Arc<dyn Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync>;

/// The first pause after an accept error, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// hyper's smallest read buffer (it panics below this).
const MIN_BUF: usize = 8 * 1024;

/// Accepts and serves until the task is aborted; aborting it closes the listener and every
/// connection it accepted.
pub async fn serve(listener: TcpListener, limits: Limits, handler: Handler) {
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    let mut pause = FIRST_PAUSE;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    pause = FIRST_PAUSE;
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) => {
                            connections.spawn(serve_connection(stream, limits, handler.clone(), permit));
                        }
                        // Dropping the stream closes it: the cap holds however fast they come.
                        Err(_) => tracing::debug!(%addr, %peer, "too many HTTP connections: closed a new one"),
                    }
                }
                Err(e) => {
                    if pause == FIRST_PAUSE {
                        tracing::warn!(%addr, "HTTP accept failed (pausing before the next): {e}");
                    } else {
                        tracing::debug!(%addr, "HTTP accept failed again: {e}");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, limits: Limits, handler: Handler, _permit: OwnedSemaphorePermit) {
    let service = service_fn(move |req: Request<Incoming>| {
        let resp = handler(&req);
        async move { Ok::<_, Infallible>(resp) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // The head limit answers 431; the buffer (twice as large, for a pipelined request
        // behind it) bounds what a connection holds whatever it sends.
        .max_header_size(limits.max_header_bytes)
        .max_buf_size((2 * limits.max_header_bytes).max(MIN_BUF))
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
