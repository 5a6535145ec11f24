//! The one serve path of every HTTP listener verdict opens (the agent's metrics and health
//! addresses, and each Service's health check port).
//!
//! Anyone who can reach these ports is untrusted, and hyper alone bounds nothing: without a
//! timer it never times out a half-sent request, it accepts any number of connections, and an
//! accept loop that retries at once spins a core when file descriptors run out. So here:
//! - a client gets [`Limits::header_read_timeout`] to send each request head (also the next
//!   one on a kept-alive connection), then is closed;
//! - the listeners of the process share one table of [`Connections`], sized from the open-file
//!   limit: a new connection is always served, and when the table is full it takes the place
//!   of a held one (the least recently active of the source holding the most); one source
//!   holds a bounded share; the node's own clients (loopback, or the address they reach) have
//!   places no one else takes (see [`places`]). A client holding many connections closes its
//!   own, not the probes';
//! - a request head is at most [`Limits::max_header_bytes`] (431 beyond), so each connection's
//!   memory is bounded too;
//! - after an accept error (EMFILE, ENFILE, ENOBUFS...) the loop pauses, longer each time in a
//!   row, instead of retrying at once.

pub mod places;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use places::{Admission, Place};
pub use places::{Caps, Connections};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// What one listener allows each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client has to send a complete request head.
    pub header_read_timeout: Duration,
    /// The largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    /// Load balancers and kubelet send their one small request at once; 5 s is ample for them
    /// and bounds how long a client that sends nothing keeps a place.
    fn default() -> Self {
        Limits { header_read_timeout: Duration::from_secs(5), max_header_bytes: 8 * 1024 }
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
/// connection it accepted. `connections` is the table shared by every listener of the process.
pub async fn serve(listener: TcpListener, limits: Limits, connections: Arc<Connections>, handler: Handler) {
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let _listening = connections.listening();
    let mut tasks = JoinSet::new();
    let mut pause = FIRST_PAUSE;
    loop {
        tokio::select! {
            // Accepting only when there is room keeps the sockets within the file budget.
            accepted = async { connections.room().await; listener.accept().await } => match accepted {
                Ok((stream, peer)) => {
                    pause = FIRST_PAUSE;
                    let own = places::is_own(peer, stream.local_addr().ok());
                    match connections.admit(peer.ip(), own) {
                        Admission::Admitted(place) => {
                            let id = place.id();
                            let task = tasks.spawn(serve_connection(stream, limits, handler.clone(), place));
                            connections.started(id, task);
                        }
                        // Dropping the stream closes it.
                        Admission::Refused => {
                            tracing::debug!(%addr, %peer, "every HTTP connection place is the node's own: closed a new one");
                        }
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
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, limits: Limits, handler: Handler, place: Place) {
    let place = Arc::new(place);
    let service = service_fn(move |req: Request<Incoming>| {
        let resp = handler(&req);
        place.touch();
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
