//! Watching the API server: kube-rs watchers for Services, EndpointSlices and this Node,
//! translated into [`Event`]s as they arrive.
//!
//! The watchers keep no copy of the Kubernetes objects: each one is translated at once into
//! the model's much smaller source record, and the model cache is the store. A relist (after a
//! dropped watch or 410 Gone) arrives as `Init`, `InitApply`..., `InitDone`, which becomes
//! [`Event::InitStart`] / [`Event::Apply`] / [`Event::InitDone`]: nothing is flushed.

use crate::event::{Event, Kind, Object};
use crate::translate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use std::sync::mpsc::Sender;

/// Services handed to another proxy, and headless Services, are filtered out at the watch
/// (upstream kube-proxy's selector).
pub const SERVICE_SELECTOR: &str = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

fn forward<K, F>(kind: Kind, tx: &Sender<Event>, ev: watcher::Event<K>, translate: F) -> bool
where
    K: kube::Resource,
    F: Fn(&K) -> Object,
{
    let sent = match ev {
        watcher::Event::Init => tx.send(Event::InitStart(kind)),
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => tx.send(Event::Apply(translate(&o))),
        watcher::Event::Delete(o) => tx.send(Event::Delete {
            kind,
            namespace: o.meta().namespace.clone().unwrap_or_default(),
            name: o.meta().name.clone().unwrap_or_default(),
        }),
        watcher::Event::InitDone => tx.send(Event::InitDone(kind)),
    };
    sent.is_ok()
}

async fn run<K, F>(api: Api<K>, config: watcher::Config, kind: Kind, tx: Sender<Event>, translate: F)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(&K) -> Object,
{
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                if !forward(kind, &tx, ev, &translate) {
                    return; // the sync loop is gone
                }
            }
            Err(e) => tracing::warn!(?kind, "watch failed (retrying with backoff): {e}"),
        }
    }
}

/// Watches everything the node needs until the sync loop goes away.
pub async fn watch(client: Client, node_name: &str, tx: Sender<Event>) {
    let services = run(
        Api::<Service>::all(client.clone()),
        watcher::Config::default().labels(SERVICE_SELECTOR),
        Kind::Service,
        tx.clone(),
        |s: &Service| Object::Service(translate::service(s)),
    );
    let slices = run(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default().labels(SERVICE_SELECTOR),
        Kind::EndpointSlice,
        tx.clone(),
        |e: &EndpointSlice| Object::EndpointSlice(translate::endpoint_slice(e)),
    );
    let node = run(
        Api::<Node>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={node_name}")),
        Kind::Node,
        tx,
        |n: &Node| Object::Node(translate::node(n)),
    );
    tokio::join!(services, slices, node);
}

/// The name of an object, for logs.
pub fn describe<K: kube::Resource>(o: &K) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}
