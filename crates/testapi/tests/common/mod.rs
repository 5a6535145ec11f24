//! Shared fixtures for the integration tests: object builders and timeouts.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::ObjectMeta;
use kube::runtime::watcher;

/// Generous, so a slow CI machine does not flake, but a hang still fails.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Awaits `f`, failing the test if it takes longer than [`TIMEOUT`].
pub async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(TIMEOUT, f).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The next item of a stream, failing the test on timeout or end of stream.
pub async fn next<S: Stream + Unpin>(stream: &mut S) -> S::Item {
    within("the next stream item", stream.next()).await.expect("the stream ended")
}

/// The next successful watcher event; watcher errors (expected around disconnects) are skipped
/// and returned alongside so tests can assert on them.
pub async fn next_event<K: Debug, S>(stream: &mut S, errors: &mut Vec<watcher::Error>) -> watcher::Event<K>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin,
{
    // One deadline for the whole wait: a watcher stuck in an error loop must fail too.
    within("the next watcher event", async {
        loop {
            match stream.next().await.expect("the watcher stream ended") {
                Ok(event) => return event,
                Err(e) => errors.push(e),
            }
        }
    })
    .await
}

/// A short, comparable description of a watcher event: `Apply(web@12)` etc.
pub fn describe<K: kube::ResourceExt>(event: &watcher::Event<K>) -> String {
    let obj = |k: &K| format!("{}@{}", k.name_any(), k.resource_version().unwrap_or_default());
    match event {
        watcher::Event::Apply(k) => format!("Apply({})", obj(k)),
        watcher::Event::Delete(k) => format!("Delete({})", obj(k)),
        watcher::Event::Init => "Init".into(),
        watcher::Event::InitApply(k) => format!("InitApply({})", obj(k)),
        watcher::Event::InitDone => "InitDone".into(),
    }
}

fn meta(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: (!labels.is_empty())
            .then(|| labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()),
        ..Default::default()
    }
}

/// A ClusterIP Service with one TCP port.
pub fn service(namespace: &str, name: &str, labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: meta(Some(namespace), name, labels),
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            ports: Some(vec![ServicePort { port: 80, protocol: Some("TCP".into()), ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A Service with a different port, for "modified" events.
pub fn service_with_port(namespace: &str, name: &str, port: i32) -> Service {
    let mut svc = service(namespace, name, &[]);
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = port;
    svc
}

pub fn node(name: &str) -> Node {
    Node { metadata: meta(None, name, &[]), ..Default::default() }
}

/// An EndpointSlice for `service` with one ready endpoint.
pub fn endpoint_slice(namespace: &str, name: &str, service: &str, ip: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(Some(namespace), name, &[("kubernetes.io/service-name", service)]),
        address_type: "IPv4".into(),
        endpoints: vec![Endpoint { addresses: vec![ip.into()], ..Default::default() }],
        ports: None,
    }
}
