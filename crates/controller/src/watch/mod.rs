//! Watching the API server: Services, EndpointSlices and this Node through verdict's own
//! reflector ([`reflector`]: protobuf or JSON, as negotiated), ServiceCIDRs through a kube-rs
//! watcher (JSON), translated into [`Event`]s as they arrive.
//!
//! The watchers keep no copy of the Kubernetes objects: each one is translated at once into
//! the model's much smaller source record, and the model cache is the store. A relist (after a
//! dropped watch or 410 Gone) arrives as [`Event::InitStart`] / [`Event::Apply`]... /
//! [`Event::InitDone`]: nothing is flushed.

pub mod list_stream;
#[cfg(test)]
mod list_tests;
pub mod proto;
pub mod reflector;
#[cfg(test)]
mod tests;
pub mod wire;

use crate::decode::{WatchedService, WatchedSlice};
use crate::event::{Event, Kind, Object};
use crate::metrics as m;
use crate::translate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

async fn forward<K, F>(kind: Kind, tx: &SyncSender<Event>, ev: watcher::Event<K>, translate: F) -> bool
where
    K: kube::Resource,
    F: Fn(K) -> Object,
{
    let event = match ev {
        watcher::Event::Init => Event::InitStart(kind),
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => Event::Apply(translate(o)),
        watcher::Event::Delete(o) => Event::Delete {
            kind,
            namespace: o.meta().namespace.clone().unwrap_or_default(),
            name: o.meta().name.clone().unwrap_or_default(),
        },
        watcher::Event::InitDone => Event::InitDone(kind),
    };
    send(tx, event).await
}

/// Queues an event for the sync loop; `false` once the loop is gone. While its queue is full
/// (the loop is busy with a sync, or behind a list), the watcher waits and reads no further:
/// what it has not read stays on the wire, not decoded in memory. Unbounded, the queue held
/// 200 MiB of decoded objects during the lists of 100k Services. The wait yields the
/// runtime's thread to the other watchers and the metrics and health endpoints.
async fn send(tx: &SyncSender<Event>, mut event: Event) -> bool {
    loop {
        match tx.try_send(event) {
            Ok(()) => return true,
            Err(TrySendError::Full(back)) => {
                event = back;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(TrySendError::Disconnected(_)) => return false,
        }
    }
}

/// Whether `e` says the API server does not offer streaming lists (before Kubernetes 1.27, or
/// with the WatchList feature off, it refuses `sendInitialEvents` as an invalid parameter).
fn streaming_refused(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}

/// Bounds on the lists the watchers make (the API client bounds each request: see the agent's
/// `api_bounds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchBounds {
    /// How long a list may go without its next object (a streaming list) or page (a paged
    /// one) before it is abandoned and made again: a list that stalls half-way would
    /// otherwise hold every later change of its kind back until the watch's own timeout.
    pub list_progress: Duration,
}

impl Default for WatchBounds {
    /// A minute: the API server's own timeout for a request.
    fn default() -> Self {
        WatchBounds { list_progress: Duration::from_secs(60) }
    }
}

/// The `kind` label of the API metrics.
fn label(kind: Kind) -> &'static str {
    match kind {
        Kind::Service => "Service",
        Kind::EndpointSlice => "EndpointSlice",
        Kind::Node => "Node",
        Kind::ServiceCidr => "ServiceCIDR",
    }
}

async fn run<K, F>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    tx: SyncSender<Event>,
    translate: F,
    bounds: WatchBounds,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(K) -> Object,
{
    // A streaming list (a watch with `sendInitialEvents`) costs the API server one request
    // served from its watch cache, and arrives object by object. The fallback lists at
    // resourceVersion "0" as client-go's reflector does: the API server answers it from its
    // watch cache too, in one response (kube's `ListParams` sends no resourceVersion "0"
    // with a limit, so none is set; a consistent list paged 500 at a time cost one
    // rate-limited request per page: 80 s at 100k Services).
    let start = |streaming: bool| {
        let config = match streaming {
            true => config.clone().streaming_lists(),
            false => {
                let mut config = config.clone().any_semantic();
                config.page_size = None;
                config
            }
        };
        watcher(api.clone(), config).default_backoff().boxed()
    };
    let mut streaming = true;
    let mut stream = start(streaming);
    // From a list's start to its end, each object (or page) must come within the bound. The
    // time the sync loop takes to accept what came is not counted: it is spent in `forward`.
    let mut listing = false;
    loop {
        let next = match listing {
            true => tokio::time::timeout(bounds.list_progress, stream.next()).await,
            false => Ok(stream.next().await),
        };
        let Ok(next) = next else {
            tracing::warn!(
                ?kind,
                "the list made no progress in {:?} (--api-timeout): abandoned, listing again",
                bounds.list_progress
            );
            metrics::counter!(m::API_STALLS, "kind" => label(kind), "reason" => "timeout").increment(1);
            stream = start(streaming);
            listing = false;
            continue;
        };
        let Some(item) = next else { return };
        match item {
            Ok(ev) => {
                match ev {
                    watcher::Event::Init => listing = true,
                    watcher::Event::InitDone => listing = false,
                    _ => {}
                }
                if !forward(kind, &tx, ev, &translate).await {
                    return; // the sync loop is gone
                }
            }
            Err(e) if streaming && streaming_refused(&e) => {
                tracing::info!(?kind, "the API server does not offer streaming lists ({e}); using paged lists");
                streaming = false;
                listing = false;
                stream = start(streaming);
            }
            Err(e) => {
                // The watcher starts over after its backoff, which the bound must not cut.
                listing = false;
                tracing::warn!(?kind, "watch failed (retrying with backoff): {e}");
            }
        }
    }
}

/// Watches everything the node needs until the sync loop goes away, with the default bounds
/// and content types.
pub async fn watch(client: Client, node_name: &str, tx: SyncSender<Event>) {
    watch_with(client, node_name, tx, WatchOptions::default()).await;
}

/// Watches everything the node needs until the sync loop goes away, with the default content
/// types.
pub async fn watch_bounded(client: Client, node_name: &str, tx: SyncSender<Event>, bounds: WatchBounds) {
    watch_with(client, node_name, tx, WatchOptions { bounds, ..WatchOptions::default() }).await;
}

/// How the watchers ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// The bounds on lists.
    pub bounds: WatchBounds,
    /// The content types asked for.
    pub content: ContentTypes,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions { bounds: WatchBounds::default(), content: ContentTypes::new(wire::PROTOBUF, "") }
    }
}

/// The `Accept` header of lists and watches, from kube-proxy's `clientConnection.contentType`
/// (`--kube-api-content-type`) and `acceptContentTypes`, as client-go makes it: the accepted
/// types when given; else protobuf first with JSON as the fallback (the API server answers
/// JSON for what it has no protobuf for) when the content type is protobuf; else JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentTypes {
    accept: String,
}

impl ContentTypes {
    /// From `contentType` and `acceptContentTypes` (empty: not set).
    pub fn new(content_type: &str, accept_content_types: &str) -> ContentTypes {
        let (content_type, accepted) = (content_type.trim(), accept_content_types.trim());
        let accept = match () {
            _ if !accepted.is_empty() => accepted.to_string(),
            _ if content_type.starts_with(wire::PROTOBUF) => format!("{}, application/json", wire::PROTOBUF),
            _ => "application/json".to_string(),
        };
        ContentTypes { accept }
    }

    /// The `Accept` header.
    pub fn accept(&self) -> &str {
        &self.accept
    }
}

impl reflector::Reflected for WatchedService {
    const SOURCE: Kind = Kind::Service;
    const PATH: &'static str = "/api/v1/services";
    fn into_object(self) -> Object {
        Object::Service(self.record)
    }
}

impl wire::Decoded for WatchedService {
    type Proto = proto::Service;
    const KIND: &'static str = "Service";
}

impl reflector::Reflected for WatchedSlice {
    const SOURCE: Kind = Kind::EndpointSlice;
    const PATH: &'static str = "/apis/discovery.k8s.io/v1/endpointslices";
    fn into_object(self) -> Object {
        Object::EndpointSlice(self.record)
    }
}

impl wire::Decoded for WatchedSlice {
    type Proto = proto::EndpointSlice;
    const KIND: &'static str = "EndpointSlice";
}

impl reflector::Reflected for Node {
    const SOURCE: Kind = Kind::Node;
    const PATH: &'static str = "/api/v1/nodes";
    fn into_object(self) -> Object {
        Object::Node(translate::node(&self))
    }
}

impl wire::Decoded for Node {
    type Proto = proto::Node;
    const KIND: &'static str = "Node";
}

/// Watches everything the node needs until the sync loop goes away.
pub async fn watch_with(client: Client, node_name: &str, tx: SyncSender<Event>, options: WatchOptions) {
    // Services handed to another proxy, and headless Services, with their slices, are left
    // out by the API server (upstream kube-proxy's selector; manifests apply the same rule).
    let selector = verdict_model::proxied_services_selector();
    let target = |labels: Option<String>, fields: Option<String>| reflector::Target {
        labels,
        fields,
        accept: options.content.accept().to_string(),
    };
    let bounds = options.bounds;
    // Services and slices are decoded straight into source records (see `crate::decode`).
    let services =
        reflector::reflect::<WatchedService>(client.clone(), target(Some(selector.clone()), None), tx.clone(), bounds);
    let slices = reflector::reflect::<WatchedSlice>(client.clone(), target(Some(selector), None), tx.clone(), bounds);
    let node = reflector::reflect::<Node>(
        client.clone(),
        target(None, Some(format!("metadata.name={node_name}"))),
        tx.clone(),
        bounds,
    );
    let service_cidrs = watch_service_cidrs(client, tx, bounds);
    tokio::join!(services, slices, node, service_cidrs);
}

/// ServiceCIDRs are optional: an API server that does not serve them (before Kubernetes 1.33,
/// or with the API off) leaves `--service-cluster-ip-range` as the only source.
async fn watch_service_cidrs(client: Client, tx: SyncSender<Event>, bounds: WatchBounds) {
    let api = Api::<ServiceCIDR>::all(client);
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::info!(
                "the API server does not serve networking.k8s.io/v1 ServiceCIDRs; using --service-cluster-ip-range only"
            );
            return;
        }
        Err(e) => tracing::warn!("listing ServiceCIDRs failed (watching anyway): {e}"),
        Ok(_) => {}
    }
    run(
        api,
        watcher::Config::default(),
        Kind::ServiceCidr,
        tx,
        |c: ServiceCIDR| Object::ServiceCidr(translate::service_cidr(&c)),
        bounds,
    )
    .await;
}

/// The name of an object, for logs.
pub fn describe<K: kube::Resource>(o: &K) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}
