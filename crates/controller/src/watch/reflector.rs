//! The list/watch loop of one kind, as client-go's reflector runs it, in protobuf or JSON
//! (kube's `watcher` decodes JSON only):
//!
//! - a streaming list (a watch with `sendInitialEvents`, ended by the bookmark annotated
//!   `k8s.io/initial-events-end`), or where the API server refuses those, a list at
//!   resourceVersion "0" with a limit of 500, which the API server answers from its watch
//!   cache whole (it pages only where it serves the list from etcd), decoded object by
//!   object as it arrives;
//! - then a watch from the list's resourceVersion, with bookmarks; a watch that ends is made
//!   again from the last resourceVersion seen; 410 Gone lists again;
//! - failures are retried with backoff (0.8 s doubling to 30 s, as kube's default), and a list
//!   that goes [`WatchBounds::list_progress`] without progress is abandoned and made again.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt;
use kube::Client;
use std::fmt::Write;
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use super::list_stream::ListStream;
use super::wire::{self, Decoded, Encoding, Framer, Status, WatchEvent, WireError};
use super::{WatchBounds, label, send};
use crate::event::{Event, Kind, Object};
use crate::metrics as m;

/// How many objects a list asks for per page (client-go's pager); the API server ignores it
/// for lists from its watch cache.
pub const PAGE_SIZE: u32 = 500;

/// How long the API server keeps a watch open (kube's `watcher` asks for the same).
const WATCH_TIMEOUT_SECONDS: u32 = 290;

/// A kind the reflector watches.
pub trait Reflected: Decoded + kube::Resource + Send + 'static {
    /// The sync loop's kind.
    const SOURCE: Kind;
    /// The collection's path, e.g. `/api/v1/services`.
    const PATH: &'static str;
    /// The sync loop's record.
    fn into_object(self) -> Object;
}

/// What to watch, and how to ask.
#[derive(Clone, Debug)]
pub struct Target {
    /// `labelSelector`.
    pub labels: Option<String>,
    /// `fieldSelector`.
    pub fields: Option<String>,
    /// The `Accept` header.
    pub accept: String,
}

/// Why a list or watch stopped.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("request failed: {0}")]
    Request(#[from] kube::Error),
    #[error("reading the response failed: {0}")]
    Body(String),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the API server answered {0}")]
    Status(Status),
    #[error("the list made no progress in {0:?} (--api-timeout)")]
    Stalled(Duration),
    #[error("the watch ended before its initial events did")]
    Unfinished,
    #[error("the sync loop is gone")]
    Gone,
}

impl Failure {
    fn code(&self) -> Option<u16> {
        match self {
            Failure::Status(s) => Some(s.code),
            _ => None,
        }
    }
}

struct Reflector<'a, K> {
    client: &'a Client,
    target: &'a Target,
    tx: &'a SyncSender<Event>,
    bounds: WatchBounds,
    _kind: std::marker::PhantomData<fn() -> K>,
}

/// A response being read: its encoding and body.
struct Response {
    encoding: Encoding,
    body: kube::client::Body,
}

impl Response {
    async fn chunk(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(Failure::Body(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    async fn whole(mut self) -> Result<Vec<u8>, Failure> {
        let mut out = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

/// The events of one watch response.
struct Events<K> {
    response: Response,
    framer: Framer,
    ended: bool,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Decoded> Events<K> {
    fn new(response: Response) -> Events<K> {
        let framer = Framer::new(response.encoding);
        Events { response, framer, ended: false, _kind: std::marker::PhantomData }
    }

    async fn next(&mut self) -> Result<Option<WatchEvent<K>>, Failure> {
        loop {
            if let Some(bytes) = self.framer.next_frame()? {
                return Ok(Some(wire::event(self.response.encoding, &bytes)?));
            }
            if self.ended {
                return Ok(None);
            }
            match self.response.chunk().await? {
                Some(chunk) => self.framer.push(&chunk),
                None => {
                    self.ended = true;
                    if let Some(bytes) = self.framer.finish()? {
                        return Ok(Some(wire::event(self.response.encoding, &bytes)?));
                    }
                }
            }
        }
    }
}

/// The next objects of a list response (at least one), or `None` at its end.
async fn next_objects<K: Decoded>(
    response: &mut Response,
    page: &mut ListStream<K>,
) -> Result<Option<Vec<K>>, Failure> {
    while let Some(chunk) = response.chunk().await? {
        let items = page.push(&chunk)?;
        if !items.is_empty() {
            return Ok(Some(items));
        }
    }
    Ok(None)
}

fn object_name<K: kube::Resource>(o: &K) -> (String, String) {
    let meta = o.meta();
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

impl<K: Reflected> Reflector<'_, K> {
    async fn get(&self, query: &str) -> Result<Response, Failure> {
        let mut uri = format!("{}?{query}", K::PATH);
        for (name, value) in [("labelSelector", &self.target.labels), ("fieldSelector", &self.target.fields)] {
            if let Some(v) = value {
                let _ =
                    write!(uri, "&{}", form_urlencoded::Serializer::new(String::new()).append_pair(name, v).finish());
            }
        }
        let request = http::Request::get(uri)
            .header(ACCEPT, &self.target.accept)
            .body(kube::client::Body::empty())
            .map_err(|e| Failure::Body(e.to_string()))?;
        let response = self.client.send(request).await?;
        let encoding = Encoding::of(response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()));
        let code = response.status().as_u16();
        let response = Response { encoding, body: response.into_body() };
        if !(200..300).contains(&code) {
            let body = response.whole().await.unwrap_or_default();
            return Err(Failure::Status(wire::status(encoding, &body, code)));
        }
        Ok(response)
    }

    async fn send(&self, event: Event) -> Result<(), Failure> {
        match send(self.tx, event).await {
            true => Ok(()),
            false => Err(Failure::Gone),
        }
    }

    /// Within the list's bound.
    async fn progress<T>(&self, step: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
        let bound = self.bounds.list_progress;
        tokio::time::timeout(bound, step).await.map_err(|_| Failure::Stalled(bound))?
    }

    /// A list at resourceVersion "0", page by page where the server pages; the list's
    /// resourceVersion. Each page's objects go to the sync loop as they arrive (see
    /// [`ListStream`]): a list from the watch cache is the whole collection in one response.
    async fn list(&self) -> Result<String, Failure> {
        let mut query = format!("resourceVersion=0&limit={PAGE_SIZE}");
        self.send(Event::InitStart(K::SOURCE)).await?;
        loop {
            let mut response = self.progress(self.get(&query)).await?;
            let mut page = ListStream::<K>::new(response.encoding);
            while let Some(items) = self.progress(next_objects(&mut response, &mut page)).await? {
                for item in items {
                    self.send(Event::Apply(item.into_object())).await?;
                }
            }
            let end = page.finish()?;
            match end.continue_token {
                Some(token) => {
                    let token = form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>();
                    query = format!("limit={PAGE_SIZE}&continue={token}");
                }
                None => {
                    self.send(Event::InitDone(K::SOURCE)).await?;
                    return Ok(end.resource_version);
                }
            }
        }
    }

    /// A streaming list, then the watch it goes on as.
    async fn stream(&self, rv: &mut Option<String>) -> Result<(), Failure> {
        let query = format!(
            "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds={WATCH_TIMEOUT_SECONDS}"
        );
        let mut events = Events::<K>::new(self.progress(self.get(&query)).await?);
        self.send(Event::InitStart(K::SOURCE)).await?;
        loop {
            match self.progress(events.next()).await? {
                None => return Err(Failure::Unfinished),
                Some(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    self.send(Event::Apply(o.into_object())).await?;
                }
                Some(WatchEvent::Deleted(o)) => self.deleted(o).await?,
                Some(WatchEvent::Bookmark { resource_version, initial_events_end }) => {
                    if initial_events_end {
                        self.send(Event::InitDone(K::SOURCE)).await?;
                        *rv = Some(resource_version);
                        return self.follow(events, rv).await;
                    }
                }
                Some(WatchEvent::Error(s)) => return Err(Failure::Status(s)),
            }
        }
    }

    async fn deleted(&self, o: K) -> Result<(), Failure> {
        let (namespace, name) = object_name(&o);
        self.send(Event::Delete { kind: K::SOURCE, namespace, name }).await
    }

    /// A watch from `rv`.
    async fn watch(&self, rv: &mut Option<String>) -> Result<(), Failure> {
        let from = rv.clone().unwrap_or_default();
        let query = format!(
            "watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds={WATCH_TIMEOUT_SECONDS}"
        );
        let events = Events::<K>::new(self.get(&query).await?);
        self.follow(events, rv).await
    }

    /// The events of a watch until it ends, keeping `rv` at the last one seen.
    async fn follow(&self, mut events: Events<K>, rv: &mut Option<String>) -> Result<(), Failure> {
        // The API server ends a watch after its timeout; a silent one is given up 5 s later.
        let silent = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECONDS) + 5);
        loop {
            let Ok(next) = tokio::time::timeout(silent, events.next()).await else { return Ok(()) };
            let event = match next? {
                None => return Ok(()),
                Some(event) => event,
            };
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    let at = o.meta().resource_version.clone();
                    self.send(Event::Apply(o.into_object())).await?;
                    *rv = at.or(rv.take());
                }
                WatchEvent::Deleted(o) => {
                    let at = o.meta().resource_version.clone();
                    self.deleted(o).await?;
                    *rv = at.or(rv.take());
                }
                WatchEvent::Bookmark { resource_version, .. } => *rv = Some(resource_version),
                WatchEvent::Error(s) => return Err(Failure::Status(s)),
            }
        }
    }
}

/// kube's default backoff: 0.8 s, doubling, at most 30 s.
struct Backoff(Duration);

impl Backoff {
    const FIRST: Duration = Duration::from_millis(800);
    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(30));
        now
    }
}

/// Lists and watches `K` until the sync loop goes away.
pub async fn reflect<K: Reflected>(client: Client, target: Target, tx: SyncSender<Event>, bounds: WatchBounds) {
    let reflector =
        Reflector::<K> { client: &client, target: &target, tx: &tx, bounds, _kind: std::marker::PhantomData };
    let kind = K::SOURCE;
    let mut streaming = true;
    // The resourceVersion to watch from; none: list first.
    let mut rv: Option<String> = None;
    let mut backoff = Backoff(Backoff::FIRST);
    loop {
        let result = match (&rv, streaming) {
            (None, true) => reflector.stream(&mut rv).await,
            (None, false) => reflector.list().await.map(|at| rv = Some(at)),
            (Some(_), _) => reflector.watch(&mut rv).await,
        };
        let failure = match result {
            Ok(()) => {
                backoff = Backoff(Backoff::FIRST);
                continue;
            }
            Err(failure) => failure,
        };
        match failure {
            Failure::Gone => return,
            // Before Kubernetes 1.27, or with WatchList off, `sendInitialEvents` is refused as
            // an invalid parameter.
            f if rv.is_none() && streaming && matches!(f.code(), Some(400 | 422)) => {
                tracing::info!(?kind, "the API server does not offer streaming lists ({f}); listing instead");
                streaming = false;
            }
            f if f.code() == Some(410) => {
                tracing::info!(?kind, "{f}: listing again");
                rv = None;
            }
            Failure::Stalled(bound) => {
                tracing::warn!(
                    ?kind,
                    "the list made no progress in {bound:?} (--api-timeout): abandoned, listing again"
                );
                metrics::counter!(m::API_STALLS, "kind" => label(kind), "reason" => "timeout").increment(1);
                rv = None;
            }
            f => {
                if matches!(f, Failure::Wire(WireError::TooLong)) {
                    metrics::counter!(m::API_STALLS, "kind" => label(kind), "reason" => "oversized").increment(1);
                }
                let wait = backoff.next();
                tracing::warn!(?kind, "watch failed (retrying in {wait:?}): {f}");
                if matches!(f, Failure::Unfinished | Failure::Wire(_)) {
                    rv = None;
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}
