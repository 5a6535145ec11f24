//! Small models for tests, built through the real model builder from source records.

use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{BuildOutput, Cidr, ProxyConfig, ProxyModel, build_model};

/// A ClusterIP (or NodePort, when `node_port` is set) Service with one port.
pub fn service(
    ns: &str,
    name: &str,
    cluster_ips: &[&str],
    protocol: &str,
    port: i32,
    node_port: Option<i32>,
) -> Service {
    Service {
        namespace: ns.into(),
        name: name.into(),
        service_type: if node_port.is_some() { "NodePort".into() } else { "ClusterIP".into() },
        cluster_ips: cluster_ips.iter().map(|s| s.to_string()).collect(),
        ports: vec![ServicePortSpec { name: "p".into(), protocol: protocol.into(), port, node_port }],
        ..Service::default()
    }
}

/// A slice of ready endpoints for the single port "p" of a fixture Service.
pub fn slice(
    ns: &str,
    service: &str,
    family: &str,
    protocol: &str,
    port: i32,
    addrs: &[&str],
    node: &str,
) -> EndpointSlice {
    EndpointSlice {
        namespace: ns.into(),
        name: format!("{service}-{}", family.to_lowercase()),
        service_name: service.into(),
        address_type: family.into(),
        ports: vec![EndpointPort { name: "p".into(), protocol: protocol.into(), port: Some(port) }],
        endpoints: addrs
            .iter()
            .map(|a| Endpoint { addresses: vec![a.to_string()], node_name: Some(node.into()), ..Endpoint::default() })
            .collect(),
        trigger_time: None,
    }
}

/// The node `test-node` with the given InternalIPs.
pub fn node(ips: &[&str]) -> Node {
    Node {
        name: "test-node".into(),
        addresses: ips.iter().map(|ip| ("InternalIP".to_string(), ip.to_string())).collect(),
        ..Node::default()
    }
}

/// Builds a model for `test-node` with cluster CIDRs 10.0.0.0/8 and fd00:10::/64, failing on
/// any problem.
pub fn model(node: &Node, services: &[Service], slices: &[EndpointSlice]) -> ProxyModel {
    let config = ProxyConfig {
        cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap(), Cidr::parse_tolerant("fd00:10::/64").unwrap()],
        ..ProxyConfig::default()
    };
    let BuildOutput { model, problems } = build_model(config, "test-node", Some(node), &[], services, slices);
    assert!(problems.is_empty(), "fixture has problems: {problems:?}");
    model
}

/// A dual-stack model with ClusterIP, NodePort, UDP, no-endpoint and IPv6 Services.
pub fn mixed() -> ProxyModel {
    let n = node(&["192.168.0.2", "2001:db8::2"]);
    let services = vec![
        service("ns1", "web", &["172.30.0.41"], "TCP", 80, None),
        service("ns2", "np", &["172.30.0.42"], "TCP", 80, Some(30080)),
        service("ns3", "none", &["172.30.0.43"], "TCP", 80, Some(30081)),
        service("ns4", "dns", &["172.30.0.44", "fd00:10:96::44"], "UDP", 53, None),
    ];
    let slices = vec![
        slice("ns1", "web", "IPv4", "TCP", 8080, &["10.180.0.1", "10.180.1.1"], "test-node"),
        slice("ns2", "np", "IPv4", "TCP", 80, &["10.180.0.2"], "test-node"),
        slice("ns4", "dns", "IPv4", "UDP", 5353, &["10.180.0.3", "10.180.0.4", "10.180.1.5"], "other"),
        slice("ns4", "dns", "IPv6", "UDP", 5353, &["fd00:10::3"], "test-node"),
    ];
    model(&n, &services, &slices)
}

/// The model of the `all-features` golden scenario (`tests/golden/all-features`), built from
/// its manifests with the configuration its `flags` give: every rule shape verdict writes.
/// Without `--config` the mode is upstream's default, iptables, whose behaviours verdict keeps
/// (NodePorts on every local address, localhost NodePorts, the conntrack-INVALID drop).
pub fn all_features() -> ProxyModel {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/all-features/manifests");
    let m = verdict_controller::manifests::load(&dir).expect("the all-features manifests");
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    let cidr = |s: &str| Cidr::parse_tolerant(s).unwrap();
    let mut service_cidrs = vec![cidr("172.30.0.0/16")];
    service_cidrs.extend(m.service_cidrs.iter().flat_map(|c| c.cidrs.iter()).map(|c| cidr(c)));
    let config = ProxyConfig {
        cluster_cidrs: vec![cidr("10.0.0.0/8"), cidr("fd00:10::/64")],
        service_cidrs,
        nodeport_addresses: verdict_model::NodePortAddresses::all(),
        localhost_nodeports: true,
        drop_ct_invalid: true,
        ..ProxyConfig::default()
    };
    let BuildOutput { model, problems } =
        build_model(config, "test-node", m.node("test-node"), &[], &m.services, &m.slices);
    assert!(problems.is_empty(), "{problems:?}");
    model
}

/// A Service whose namespace, name and port name are as long as Kubernetes allows (63, 63
/// and 15 characters): its `namespace/name:port` is 143 bytes, longer than the 128 `nft`
/// reads back in a comment. A dual-stack LoadBalancer with source ranges, affinity on one of
/// its two ports (chains of its own) and counters: every place a comment is written.
pub fn longest_names() -> ProxyModel {
    let namespace = format!("tenant-{}", "n".repeat(56));
    let name = format!("service-{}", "s".repeat(55));
    let mut svc = service(&namespace, &name, &["172.30.0.60", "fd00:10:96::60"], "TCP", 443, Some(30443));
    svc.service_type = "LoadBalancer".into();
    svc.ports[0].name = "https-metrics-1".into();
    svc.ports.push(ServicePortSpec {
        name: "dns-over-udp-53".into(),
        protocol: "UDP".into(),
        port: 53,
        node_port: Some(30053),
    });
    svc.external_ips = vec!["192.0.2.60".into(), "2001:db8:60::1".into()];
    svc.load_balancer_ingress =
        vec![verdict_model::source::LoadBalancerIngress { ip: "198.51.100.60".into(), ip_mode: None }];
    svc.load_balancer_source_ranges = vec!["203.0.113.0/24".into()];
    let mut affinity = service(&namespace, &format!("sticky-{}", "s".repeat(56)), &["172.30.0.61"], "TCP", 80, None);
    affinity.ports[0].name = "http-with-affin".into();
    affinity.session_affinity = "ClientIP".into();
    let mut slices = Vec::new();
    for (svc, ports) in [(&svc, &svc.ports), (&affinity, &affinity.ports)] {
        for (family, addrs) in [("IPv4", ["10.180.0.60", "10.180.1.60"]), ("IPv6", ["fd00:10::60", "fd00:10::61"])] {
            let mut s = slice(&namespace, &svc.name, family, "TCP", 8443, &addrs, "test-node");
            s.ports = ports
                .iter()
                .map(|p| EndpointPort { name: p.name.clone(), protocol: p.protocol.clone(), port: Some(8000 + p.port) })
                .collect();
            slices.push(s);
        }
    }
    let config = ProxyConfig {
        cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()],
        service_counters: verdict_model::ServiceCounters::All,
        ..ProxyConfig::default()
    };
    let n = node(&["192.168.0.2", "2001:db8::2"]);
    let BuildOutput { model, problems } = build_model(config, "test-node", Some(&n), &[], &[svc, affinity], &slices);
    assert!(problems.is_empty(), "fixture has problems: {problems:?}");
    model
}
