//! The controller against the test API server, both inside a network namespace of the test's
//! own: the server listens on the namespace's loopback, the real `kube` client watches it, and
//! the sync loop programs the namespace's nftables.
//!
//! Sockets belong to the namespace of the thread that creates them, so everything that opens
//! one runs on a tokio runtime whose worker threads were started inside the namespace (work is
//! spawned onto it, never run on the caller's thread).

use crate::netns::Netns;
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeStatus, Service, ServicePort, ServiceSpec,
    ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, SystemTime};
use tokio::runtime::Runtime;
use verdict_controller::health::ProxyHealth;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_model::{Cidr, ModelCache, ProxyConfig};
use verdict_nft::netlink::Netlink;
use verdict_testapi::TestApiServer;

/// A namespace with a runtime and a test API server inside.
pub struct ApiLab {
    /// The runtime (worker threads inside the namespace).
    pub rt: Runtime,
    /// The server, on the namespace's 127.0.0.1.
    pub server: TestApiServer,
    /// The namespace (declared last: dropped after the runtime's threads are gone).
    pub ns: Netns,
}

/// A running controller: the watchers on the lab's runtime, the sync loop on its own thread.
pub struct Controller {
    /// A report per sync.
    pub reports: Receiver<SyncReport>,
    watch: tokio::task::JoinHandle<()>,
}

impl Controller {
    /// The next sync's report.
    pub fn next(&self, within: Duration) -> Result<SyncReport> {
        self.reports.recv_timeout(within).context("no sync in time")
    }

    /// Waits for syncs until `done` holds; returns them.
    pub fn until(&self, within: Duration, mut done: impl FnMut() -> bool) -> Result<Vec<SyncReport>> {
        let deadline = std::time::Instant::now() + within;
        let mut seen = Vec::new();
        while !done() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            anyhow::ensure!(!left.is_zero(), "condition not met after {} syncs: {seen:#?}", seen.len());
            if let Ok(r) = self.reports.recv_timeout(left.min(Duration::from_millis(200))) {
                seen.push(r);
            }
        }
        Ok(seen)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        // Ending the watchers closes the event channel, which ends the sync loop.
        self.watch.abort();
    }
}

impl ApiLab {
    /// A namespace named after `tag`, a runtime in it, and a server listening there.
    pub fn new(tag: &str) -> Result<ApiLab> {
        Self::with_server(tag, false)
    }

    /// [`ApiLab::new`] with the server on HTTPS ([`TestApiServer::start_tls`]), as a pod
    /// reaches a real one.
    pub fn new_tls(tag: &str) -> Result<ApiLab> {
        Self::with_server(tag, true)
    }

    /// [`ApiLab::new`] with the server on `ip` (an address given to the namespace's loopback
    /// first), as a node reaches an API server at an address of its network.
    pub fn new_at(tag: &str, ip: std::net::IpAddr) -> Result<ApiLab> {
        Self::with_server_at(tag, false, Some(ip))
    }

    fn with_server(tag: &str, tls: bool) -> Result<ApiLab> {
        Self::with_server_at(tag, tls, None)
    }

    fn with_server_at(tag: &str, tls: bool, ip: Option<std::net::IpAddr>) -> Result<ApiLab> {
        let ns = Netns::new(tag)?;
        let rt = ns.run(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build())?;
        let server = match (tls, ip) {
            (true, None) => rt.block_on(rt.spawn(TestApiServer::start_tls()))??,
            (false, None) => rt.block_on(rt.spawn(TestApiServer::start()))??,
            (tls, Some(ip)) => {
                let prefix = if ip.is_ipv6() { 128 } else { 32 };
                // `nodad`: a tentative IPv6 address cannot be bound (EADDRNOTAVAIL).
                let nodad: &[&str] = if ip.is_ipv6() { &["nodad"] } else { &[] };
                ns.ip(&[&["addr", "add", &format!("{ip}/{prefix}"), "dev", "lo"][..], nodad].concat())?;
                let addr = std::net::SocketAddr::new(ip, 0);
                match tls {
                    true => rt.block_on(rt.spawn(TestApiServer::start_tls_on(addr)))??,
                    false => rt.block_on(rt.spawn(TestApiServer::start_on(addr)))??,
                }
            }
        };
        Ok(ApiLab { rt, server, ns })
    }

    /// Starts the controller for node `node` (the same code `verdict run` runs), with a fast
    /// sync period.
    pub fn controller(&self, node: &str, min_sync_period: Duration) -> Result<Controller> {
        let (tx, rx) = verdict_controller::event::queue();
        let (report_tx, reports) = channel();
        let server = self.server.clone();
        let client = self.rt.block_on(self.rt.spawn(async move { server.client() }))?;
        let node_name = node.to_string();
        let watch = self.rt.spawn(async move { verdict_controller::watch::watch(client, &node_name, tx).await });
        let path = format!("/run/netns/{}", self.ns.name());
        let node = node.to_string();
        std::thread::Builder::new().name(format!("sync-{node}")).spawn(move || {
            let f = std::fs::File::open(&path).expect("namespace file");
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let cfg = SyncConfig { min_sync_period, sync_period: Duration::from_secs(2), ..SyncConfig::default() };
            let config = ProxyConfig {
                cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").expect("CIDR")],
                ..ProxyConfig::default()
            };
            let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
            let sync = SyncLoop::new(ModelCache::new(config, &node), Netlink::open().expect("netlink"), cfg, health)
                .with_reports(report_tx);
            let _ = sync.run(rx);
        })?;
        Ok(Controller { reports, watch })
    }

    /// `nft list table inet kube-proxy` in the namespace ("" when there is none).
    pub fn table(&self) -> String {
        self.ns
            .exec(&["nft", "list", "table", "inet", "kube-proxy"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.into()), namespace: namespace.map(str::to_string), ..ObjectMeta::default() }
}

/// A Node with one InternalIP.
pub fn node(name: &str, ip: &str) -> Node {
    Node {
        metadata: meta(None, name),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress { type_: "InternalIP".into(), address: ip.into() }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

/// A ClusterIP Service in namespace `ns` with one TCP port named `http`.
pub fn service(ns: &str, name: &str, cluster_ip: &str, port: i32) -> Service {
    Service {
        metadata: meta(Some(ns), name),
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port,
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `svc` with label `key=value`.
pub fn labelled(mut svc: Service, key: &str, value: &str) -> Service {
    svc.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
    svc
}

/// `svc` as a LoadBalancer whose ingress is `lb_ip`, open only to `source_ranges`.
pub fn load_balancer(mut svc: Service, lb_ip: &str, source_ranges: &[&str]) -> Service {
    let spec = svc.spec.get_or_insert_with(ServiceSpec::default);
    spec.type_ = Some("LoadBalancer".into());
    spec.load_balancer_source_ranges = Some(source_ranges.iter().map(|r| r.to_string()).collect());
    for port in spec.ports.iter_mut().flatten() {
        port.node_port = None;
    }
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress { ip: Some(lb_ip.into()), ..LoadBalancerIngress::default() }]),
        }),
        ..ServiceStatus::default()
    });
    svc
}

/// The EndpointSlice of Service `svc` with these ready IPv4 endpoints (port `http` 8080), and
/// the trigger-time annotation when `trigger` is given.
pub fn slice(ns: &str, svc: &str, ips: &[String], trigger: Option<SystemTime>) -> EndpointSlice {
    let mut metadata = meta(Some(ns), &format!("{svc}-1"));
    metadata.labels = Some(BTreeMap::from([("kubernetes.io/service-name".to_string(), svc.to_string())]));
    if let Some(t) = trigger {
        let nanos = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos() as i128;
        let stamp = k8s_openapi::jiff::Timestamp::from_nanosecond(nanos).expect("a timestamp");
        metadata.annotations = Some(BTreeMap::from([(
            verdict_controller::translate::TRIGGER_TIME_ANNOTATION.to_string(),
            stamp.to_string(),
        )]));
    }
    EndpointSlice {
        metadata,
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint {
                addresses: vec![ip.clone()],
                conditions: Some(EndpointConditions { ready: Some(true), ..EndpointConditions::default() }),
                ..Endpoint::default()
            })
            .collect(),
    }
}
