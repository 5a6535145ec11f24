//! Synthetic clusters for benchmarks and tests (of this crate's users: the sync loop's unit
//! tests, the namespace tests, the benchmarks): Services and EndpointSlices as a cluster of a
//! given size holds them.

use crate::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use crate::{BuildOutput, Cidr, ProxyConfig, build_model};

/// The pod addresses endpoints are drawn from: a cluster's pods (150,000 is Kubernetes'
/// tested maximum), so with many Services each pod backs several of them, as in real clusters.
pub const POD_POOL: usize = 150_000;

/// The ClusterIP of Service `i` (inside 172.16.0.0/12).
pub fn cluster_ip(i: usize) -> String {
    let n = (172u32 << 24) | (16 << 16) | i as u32;
    std::net::Ipv4Addr::from(n).to_string()
}

/// The address of pod `p` (inside 10.128.0.0/9).
pub fn pod_ip(p: usize) -> String {
    let n = (10u32 << 24) | (128 << 16) | p as u32;
    std::net::Ipv4Addr::from(n).to_string()
}

/// Service `i`'s EndpointSlice with `endpoints` endpoints; a non-zero `shift` replaces its
/// first endpoint with pod `pool - shift`, one it did not have (the "one endpoint changed"
/// case).
pub fn slice(i: usize, endpoints: usize, pool: usize, shift: usize) -> EndpointSlice {
    EndpointSlice {
        namespace: "bench".into(),
        name: format!("svc-{i}-1"),
        service_name: format!("svc-{i}"),
        address_type: "IPv4".into(),
        ports: vec![EndpointPort { name: "http".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: (0..endpoints)
            .map(|k| {
                let p = if k == 0 && shift > 0 { pool - shift } else { (i * endpoints + k) % pool };
                Endpoint { addresses: vec![pod_ip(p)], node_name: Some("other".into()), ..Endpoint::default() }
            })
            .collect(),
        trigger_time: None,
    }
}

/// Service `i`.
pub fn service(i: usize) -> Service {
    Service {
        namespace: "bench".into(),
        name: format!("svc-{i}"),
        cluster_ips: vec![cluster_ip(i)],
        ports: vec![ServicePortSpec { name: "http".into(), protocol: "TCP".into(), port: 80, node_port: None }],
        ..Service::default()
    }
}

/// A cluster of `n` Services with `endpoints` endpoints each.
pub fn cluster(n: usize, endpoints: usize, pool: usize) -> (Vec<Service>, Vec<EndpointSlice>) {
    ((0..n).map(service).collect(), (0..n).map(|i| slice(i, endpoints, pool, 0)).collect())
}

/// The benchmark node.
pub fn node() -> Node {
    Node { name: "bench".into(), addresses: vec![("InternalIP".into(), "192.168.0.2".into())], ..Node::default() }
}

/// The benchmark node's configuration.
pub fn config() -> ProxyConfig {
    ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() }
}

/// Builds the model for the benchmark node.
pub fn model(services: &[Service], slices: &[EndpointSlice]) -> BuildOutput {
    build_model(config(), "bench", Some(&node()), &[], services, slices)
}
