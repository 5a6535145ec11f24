//! Bounds on what the API server can make the agent wait for or hold, as a layer of the API
//! client (kube's own client has no timeout on a response and no limit on a watch line):
//! - every request gets its response head within `--api-timeout` (a watch that does not
//!   start, a list that does not answer);
//! - a response that is not a watch (a list page, an Event write) arrives whole within
//!   `--api-timeout` of the request, or is abandoned: the watcher retries with backoff;
//! - a watch line (one event) is at most [`MAX_LINE`], client-go's frame limit: beyond it the
//!   watch is broken off before the line is held, and the watcher watches (or lists) again
//!   (a protobuf watch's frames are bounded by the watcher, which reads their lengths).
//!
//! What each list and watch of a kind did is recorded: `verdict_api_progress_timestamp_seconds`
//! when a watch line or a whole list arrived, `verdict_api_stalls_total` when one was
//! abandoned. A watch that stays silent is the watcher's to end: it gives up after its
//! timeout (290 s) and 5 s more, and API servers send a bookmark every minute.

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};
use hyper::{Request, Response, Uri};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, SystemTime};
use tokio::time::{Instant, Sleep};
use verdict_controller::metrics as m;

/// The longest watch line (one event), as client-go's streaming decoder: 16 MiB.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a response was abandoned.
#[derive(Debug)]
enum Abandoned {
    NoAnswer(Duration),
    Incomplete(Duration),
    LineTooLong,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Abandoned::NoAnswer(t) => write!(f, "the API server did not answer within {t:?} (--api-timeout)"),
            Abandoned::Incomplete(t) => {
                write!(f, "the API server did not send the whole response within {t:?} (--api-timeout)")
            }
            Abandoned::LineTooLong => {
                write!(f, "a watch event longer than {MAX_LINE} bytes (client-go's limit): the watch is broken off")
            }
        }
    }
}

impl std::error::Error for Abandoned {}

/// The kind a request lists or watches (the `kind` label), for the metrics.
fn kind_of(uri: &Uri) -> Option<&'static str> {
    let resource = uri.path().rsplit('/').next()?;
    Some(match resource {
        "services" => "Service",
        "endpointslices" => "EndpointSlice",
        "nodes" => "Node",
        "servicecidrs" => "ServiceCIDR",
        _ => return None,
    })
}

fn is_watch(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

fn stalled(kind: Option<&'static str>, reason: &'static str) {
    if let Some(kind) = kind {
        metrics::counter!(m::API_STALLS, "kind" => kind, "reason" => reason).increment(1);
    }
}

fn progressed(kind: Option<&'static str>) {
    if let Some(kind) = kind {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        metrics::gauge!(m::API_PROGRESS, "kind" => kind).set(now.as_secs_f64());
    }
}

/// The layer.
#[derive(Clone, Copy, Debug)]
pub struct BoundsLayer {
    timeout: Duration,
}

impl BoundsLayer {
    /// Bounds with `timeout` for response heads and whole non-watch responses.
    pub fn new(timeout: Duration) -> BoundsLayer {
        BoundsLayer { timeout }
    }
}

impl<S> tower::Layer<S> for BoundsLayer {
    type Service = Bounded<S>;
    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded { inner, timeout: self.timeout }
    }
}

/// The service.
#[derive(Clone)]
pub struct Bounded<S> {
    inner: S,
    timeout: Duration,
}

impl<S, Req, B> tower::Service<Request<Req>> for Bounded<S>
where
    S: tower::Service<Request<Req>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Unpin,
{
    type Response = Response<BoundedBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let (timeout, kind, watch) = (self.timeout, kind_of(request.uri()), is_watch(request.uri()));
        let deadline = Instant::now() + timeout;
        let response = self.inner.call(request);
        Box::pin(async move {
            let Ok(response) = tokio::time::timeout_at(deadline, response).await else {
                stalled(kind, "timeout");
                return Err(Abandoned::NoAnswer(timeout).into());
            };
            let response = response.map_err(Into::into)?;
            let protobuf = response
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/vnd.kubernetes.protobuf"));
            let mode = match (watch, protobuf) {
                (true, false) => Mode::Lines { since_newline: 0 },
                (true, true) => Mode::Frames,
                (false, _) => Mode::Whole { by: Box::pin(tokio::time::sleep_until(deadline)), timeout },
            };
            Ok(response.map(|inner| BoundedBody { inner, mode, kind }))
        })
    }
}

enum Mode {
    /// A watch: lines of at most [`MAX_LINE`] bytes.
    Lines { since_newline: usize },
    /// A protobuf watch: length-prefixed frames, which the watcher bounds to [`MAX_LINE`] as
    /// it reads each length (the bytes hold newlines anywhere).
    Frames,
    /// Anything else: the whole body by the deadline.
    Whole { by: Pin<Box<Sleep>>, timeout: Duration },
}

/// A response body within its bounds; an error ends it when it would go beyond them.
pub struct BoundedBody<B> {
    inner: B,
    mode: Mode,
    kind: Option<&'static str>,
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Mode::Whole { by, timeout } = &mut this.mode
            && by.as_mut().poll(cx).is_ready()
        {
            stalled(this.kind, "timeout");
            return Poll::Ready(Some(Err(Abandoned::Incomplete(*timeout).into())));
        }
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        let frame = match frame {
            None => {
                if matches!(this.mode, Mode::Whole { .. }) {
                    progressed(this.kind);
                }
                return Poll::Ready(None);
            }
            Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            Some(Ok(frame)) => frame,
        };
        if matches!(this.mode, Mode::Frames) && frame.is_data() {
            progressed(this.kind);
        }
        if let (Mode::Lines { since_newline }, Some(data)) = (&mut this.mode, frame.data_ref()) {
            let bytes = data.chunk();
            match bytes.iter().rposition(|&b| b == b'\n') {
                Some(last) => {
                    *since_newline = bytes.len() - last - 1;
                    progressed(this.kind);
                }
                None => *since_newline = since_newline.saturating_add(bytes.len()),
            }
            if *since_newline > MAX_LINE {
                stalled(this.kind, "oversized");
                return Poll::Ready(Some(Err(Abandoned::LineTooLong.into())));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::collections::VecDeque;

    /// A body of these chunks, then (when `endless`) nothing, for ever.
    struct Chunks {
        chunks: VecDeque<Bytes>,
        endless: bool,
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            match self.chunks.pop_front() {
                Some(c) => Poll::Ready(Some(Ok(Frame::data(c)))),
                None if self.endless => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    fn bounded(chunks: Vec<Vec<u8>>, endless: bool, mode: Mode) -> BoundedBody<Chunks> {
        let chunks = chunks.into_iter().map(Bytes::from).collect();
        BoundedBody { inner: Chunks { chunks, endless }, mode, kind: None }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    fn lines() -> Mode {
        Mode::Lines { since_newline: 0 }
    }

    #[test]
    fn a_watch_line_up_to_the_limit_passes_and_one_beyond_it_is_cut() {
        let rt = runtime();
        let mut longest = b"{}\n".to_vec();
        longest.extend(std::iter::repeat_n(b' ', MAX_LINE));
        longest.push(b'\n');
        let whole = rt.block_on(bounded(vec![longest.clone()], false, lines()).collect()).unwrap();
        assert_eq!(whole.to_bytes().len(), longest.len());

        // Beyond it, in small chunks: cut as soon as the line outgrows the limit.
        let chunk = vec![b' '; 1 << 20];
        let chunks: Vec<Vec<u8>> = std::iter::once(b"{}\n ".to_vec()).chain(std::iter::repeat_n(chunk, 64)).collect();
        let err = rt.block_on(async {
            let mut body = bounded(chunks, true, lines());
            let mut seen = 0;
            loop {
                match body.frame().await.unwrap() {
                    Ok(f) => seen += f.into_data().unwrap().len(),
                    Err(e) => return (e.to_string(), seen),
                }
            }
        });
        assert!(err.0.contains("longer than 16777216 bytes"), "{}", err.0);
        assert!(err.1 <= MAX_LINE + 4, "let {} bytes through", err.1);
    }

    #[test]
    fn a_response_that_does_not_end_by_the_deadline_is_abandoned() {
        let rt = runtime();
        let timeout = Duration::from_millis(50);
        let started = std::time::Instant::now();
        let err = rt.block_on(async {
            let by = Box::pin(tokio::time::sleep(timeout));
            bounded(vec![b"{\"items\": [".to_vec()], true, Mode::Whole { by, timeout }).collect().await.unwrap_err()
        });
        assert!(err.to_string().contains("whole response within 50ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // A body that ends in time is whole.
        let whole = rt.block_on(async {
            let by = Box::pin(tokio::time::sleep(Duration::from_secs(5)));
            bounded(vec![b"{}".to_vec()], false, Mode::Whole { by, timeout }).collect().await.unwrap()
        });
        assert_eq!(&whole.to_bytes()[..], b"{}");
    }

    #[test]
    fn watch_uris_and_kinds() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert!(is_watch(&uri("/api/v1/services?watch=true&resourceVersion=5")));
        assert!(!is_watch(&uri("/api/v1/services?limit=500")));
        assert_eq!(kind_of(&uri("/apis/discovery.k8s.io/v1/endpointslices?watch=1")), Some("EndpointSlice"));
        assert_eq!(kind_of(&uri("/api/v1/nodes?fieldSelector=metadata.name%3Dn1")), Some("Node"));
        assert_eq!(kind_of(&uri("/apis/events.k8s.io/v1/namespaces/x/events")), None);
    }
}
