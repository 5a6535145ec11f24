//! Structure-aware generators of Kubernetes objects for the fuzz harnesses: real k8s-openapi
//! types and field names, filled either with values the API server would accept ("good") or
//! with hostile ones (empty and huge strings, unicode, 0 and 65536 ports, negative timeouts,
//! addresses of the wrong family, duplicate names and ports, thousands of endpoints).

#![allow(dead_code)] // each test binary uses part of it

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeSpec, NodeStatus, Service,
    ServicePort, ServiceSpec, ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice};
use k8s_openapi::api::discovery::v1::{ForNode, ForZone};
use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The node being programmed.
pub const NODE: &str = "node-a";
/// The label that ties a slice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Strings a parser or a renderer might choke on.
pub fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(" ".to_string()),
        Just("ñandú-☃-𝄞".to_string()),
        Just("a\"b\\c\nd\te".to_string()),
        Just("\u{0}\u{202e}".to_string()),
        Just("None".to_string()),
        Just("x".repeat(64)),
        Just("y".repeat(300)),
        Just("z".repeat(70_000)),
        "[a-z0-9.-]{0,20}",
        ".{0,12}",
    ]
}

/// A Service name from a small pool (so that slices find their Service and names repeat), or
/// a hostile one.
pub fn object_name() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(vec!["svc", "a", "b"]).prop_map(str::to_string), 1 => hostile_string()]
}

/// A DNS-1123 label, as the API server requires of names and namespaces.
pub fn dns_label() -> impl Strategy<Value = String> {
    prop_oneof![8 => "[a-z][a-z0-9-]{0,10}[a-z0-9]", 1 => Just("n".repeat(63))]
}

/// A good IPv4 address from a small pool, so that objects overlap often.
pub fn pool_v4(third: u8) -> impl Strategy<Value = String> {
    (0u8..2, 1u8..4).prop_map(move |(a, b)| format!("10.{third}.{a}.{b}"))
}

/// A good IPv6 address from a small pool.
pub fn pool_v6(third: u16) -> impl Strategy<Value = String> {
    (0u16..2, 1u16..4).prop_map(move |(a, b)| format!("fd00:{third:x}:{a:x}::{b:x}"))
}

/// Anything that may stand where an IP address is expected.
pub fn hostile_ip() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => pool_v4(96),
        2 => pool_v6(96),
        // The good Services' load balancer IPs, for externalIPs to contend with.
        1 => pool_v4(97),
        1 => any::<u32>().prop_map(|n| std::net::Ipv4Addr::from(n).to_string()),
        1 => any::<u128>().prop_map(|n| std::net::Ipv6Addr::from(n).to_string()),
        1 => prop::sample::select(vec![
            "0.0.0.0", "255.255.255.255", "127.0.0.1", "::", "::1", "::ffff:10.96.0.1", "fe80::1%eth0",
            "::ffff:10.96.1.2", "0:0:0:0:0:ffff:a60:1", "224.0.0.1", "ff02::1", "169.254.169.254", "fe80::1",
            "010.096.000.001", "256.1.1.1", "1.2.3", "10.96.0.1/32", " 10.96.0.2 ", "None", "",
        ])
        .prop_map(str::to_string),
        1 => hostile_string(),
    ]
}

/// Anything that may stand where a CIDR is expected.
pub fn hostile_cidr() -> impl Strategy<Value = String> {
    prop_oneof![
        (pool_v4(96), 0u8..=40).prop_map(|(ip, len)| format!("{ip}/{len}")),
        (pool_v6(96), 0u8..=140).prop_map(|(ip, len)| format!("{ip}/{len}")),
        hostile_ip(),
        prop::sample::select(vec!["0.0.0.0/0", "::/0", "10.0.0.0/-1", "10.0.0.0/", "/8", "10.0.0.0/8/8"])
            .prop_map(str::to_string),
    ]
}

/// Port numbers, including the impossible ones.
pub fn hostile_port() -> impl Strategy<Value = i32> {
    // The good objects' ports and NodePorts come up often, so that hostile ones contend for them.
    let taken = prop::sample::select(vec![80, 53, 9, 8080, 8053, 8009, 30000, 30001]);
    prop_oneof![6 => taken, 3 => 1i32..=65535, 1 => Just(0), 1 => Just(65536), 1 => Just(-1), 1 => any::<i32>()]
}

/// `type`, `protocol`, policies and the like: the real spellings and some others.
pub fn word(real: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => prop::sample::select(real).prop_map(|s| Some(s.to_string())),
        1 => Just(None),
        1 => hostile_string().prop_map(Some),
    ]
}

fn meta(namespace: Option<String>, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta { namespace, name: Some(name), labels: Some(labels).filter(|l| !l.is_empty()), ..Default::default() }
}

fn hostile_service_port() -> impl Strategy<Value = ServicePort> {
    (
        of(prop_oneof![prop::sample::select(vec!["", "http", "p0", "dns"]).prop_map(str::to_string), hostile_string()]),
        word(&["TCP", "UDP", "SCTP", "tcp", "ICMP"]),
        hostile_port(),
        of(hostile_port()),
    )
        .prop_map(|(name, protocol, port, node_port)| ServicePort {
            name,
            protocol,
            port,
            node_port,
            ..Default::default()
        })
}

/// A Service with hostile values in `namespace`.
pub fn hostile_service(namespace: impl Strategy<Value = String>) -> impl Strategy<Value = Service> {
    let spec = (
        word(&["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
        (of(hostile_ip()), of(vec(hostile_ip(), 0..3))),
        vec(hostile_service_port(), 0..4),
        of(vec(hostile_ip(), 0..3)),
        of(vec(hostile_cidr(), 0..2)),
        (word(&["Cluster", "Local"]), word(&["Cluster", "Local"])),
        (word(&["None", "ClientIP"]), of(prop_oneof![1..=86400, Just(0), Just(-5), Just(86401), any::<i32>()])),
        of(hostile_port()),
    );
    let status = vec((of(hostile_ip()), word(&["VIP", "Proxy"])), 0..3);
    let labels = prop_oneof![
        4 => Just(BTreeMap::new()),
        1 => Just(BTreeMap::from([("service.kubernetes.io/service-proxy-name".to_string(), "other".to_string())])),
        1 => Just(BTreeMap::from([("service.kubernetes.io/headless".to_string(), String::new())])),
    ];
    (namespace, object_name(), labels, spec, status).prop_map(|(ns, name, labels, spec, ingress)| {
        let (ty, (cluster_ip, cluster_ips), ports, external_ips, ranges, (etp, itp), (aff, timeout), hc) = spec;
        Service {
            metadata: meta(Some(ns), name, labels),
            spec: Some(ServiceSpec {
                type_: ty,
                cluster_ip,
                cluster_ips,
                ports: Some(ports),
                external_ips,
                load_balancer_source_ranges: ranges,
                external_traffic_policy: etp,
                internal_traffic_policy: itp,
                session_affinity: aff,
                session_affinity_config: timeout
                    .map(|t| SessionAffinityConfig { client_ip: Some(ClientIPConfig { timeout_seconds: Some(t) }) }),
                health_check_node_port: hc,
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        ingress
                            .into_iter()
                            .map(|(ip, ip_mode)| LoadBalancerIngress { ip, ip_mode, ..Default::default() })
                            .collect(),
                    ),
                }),
                ..Default::default()
            }),
        }
    })
}

fn hostile_endpoint(v4: bool) -> impl Strategy<Value = Endpoint> {
    let address = if v4 { pool_v4(244).boxed() } else { pool_v6(244).boxed() };
    (
        prop_oneof![8 => vec(address, 1..2), 1 => vec(hostile_ip(), 0..3)],
        of((of(any::<bool>()), of(any::<bool>()), of(any::<bool>()))),
        of(prop_oneof![Just(NODE.to_string()), Just("node-b".to_string()), hostile_string()]),
        of((of(vec(Just("zone-a".to_string()), 0..2)), of(vec(Just(NODE.to_string()), 0..2)))),
    )
        .prop_map(|(addresses, conditions, node_name, hints)| Endpoint {
            addresses,
            conditions: conditions.map(|(ready, serving, terminating)| EndpointConditions {
                ready,
                serving,
                terminating,
            }),
            node_name,
            hints: hints.map(|(zones, nodes)| EndpointHints {
                for_zones: zones.map(|z| z.into_iter().map(|name| ForZone { name }).collect()),
                for_nodes: nodes.map(|n| n.into_iter().map(|name| ForNode { name }).collect()),
            }),
            ..Default::default()
        })
}

/// A slice with hostile values in `namespace`, for a Service named from the same pool as
/// [`hostile_service`]'s names. Now and then it has thousands of endpoints.
pub fn hostile_slice(namespace: impl Strategy<Value = String>) -> impl Strategy<Value = EndpointSlice> {
    let ports = vec(
        (of(prop_oneof![Just("http".to_string()), Just(String::new()), hostile_string()]), of(hostile_port()))
            .prop_flat_map(|(name, port)| {
                word(&["TCP", "UDP", "SCTP"]).prop_map(move |protocol| EndpointPort {
                    name: name.clone(),
                    port,
                    protocol,
                    ..Default::default()
                })
            }),
        0..3,
    );
    let family = prop_oneof![4 => Just("IPv4".to_string()), 2 => Just("IPv6".to_string()), 1 => Just("FQDN".to_string()), 1 => hostile_string()];
    (namespace, dns_label(), of(object_name()), family, ports, any::<bool>())
        .prop_flat_map(|(ns, name, service, family, ports, v4)| {
            let count = prop_oneof![300 => 0usize..5, 1 => 1000usize..3000];
            let endpoints = count.prop_flat_map(move |n| vec(hostile_endpoint(v4), n));
            (Just((ns, name, service, family, ports)), endpoints)
        })
        .prop_map(|((ns, name, service, family, ports), endpoints)| {
            let labels = service.map(|s| BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), s)])).unwrap_or_default();
            EndpointSlice {
                metadata: meta(Some(ns), name, labels),
                address_type: family,
                ports: Some(ports),
                endpoints,
            }
        })
}

/// The Node being programmed, with hostile addresses and pod CIDRs.
pub fn hostile_node() -> impl Strategy<Value = Node> {
    let address = (word(&["InternalIP", "ExternalIP", "Hostname"]), hostile_ip())
        .prop_map(|(t, address)| NodeAddress { type_: t.unwrap_or_default(), address });
    (vec(address, 0..4), of(hostile_cidr()), of(vec(hostile_cidr(), 0..3)), of(Just("zone-a".to_string()))).prop_map(
        |(addresses, pod_cidr, pod_cidrs, zone)| Node {
            metadata: meta(
                None,
                NODE.to_string(),
                zone.map(|z| BTreeMap::from([("topology.kubernetes.io/zone".to_string(), z)])).unwrap_or_default(),
            ),
            spec: Some(NodeSpec { pod_cidr, pod_cidrs, ..Default::default() }),
            status: Some(NodeStatus { addresses: Some(addresses), ..Default::default() }),
        },
    )
}

/// A ServiceCIDR with hostile CIDRs.
pub fn hostile_service_cidr() -> impl Strategy<Value = ServiceCIDR> {
    (hostile_string(), of(vec(hostile_cidr(), 0..3))).prop_map(|(name, cidrs)| ServiceCIDR {
        metadata: meta(None, name, BTreeMap::new()),
        spec: Some(ServiceCIDRSpec { cidrs }),
        ..Default::default()
    })
}

/// An externalIP of a good Service, of either family (a pool no hostile generator draws
/// from but the single-stack contenders').
pub fn good_external_ip() -> impl Strategy<Value = String> {
    prop_oneof![pool_v4(98), pool_v6(98)]
}

/// Service `good-<i>/svc` with valid values (some dual-stack, with externalIPs and load
/// balancer IPs of both families), its IPv4 slice and, when dual-stack, its IPv6 slice.
pub fn good_service_and_slice(i: usize) -> impl Strategy<Value = (Service, Vec<EndpointSlice>)> {
    let ports = prop::sample::subsequence(vec![("http", 80, "TCP"), ("dns", 53, "UDP"), ("sctp", 9, "SCTP")], 1..=3);
    let endpoints = vec((pool_v4(244), any::<bool>(), of(Just(NODE.to_string()))), 0..4);
    let endpoints_v6 = vec((pool_v6(244), any::<bool>(), of(Just(NODE.to_string()))), 0..4);
    (
        prop::sample::select(vec!["ClusterIP", "NodePort", "LoadBalancer"]),
        (pool_v4(96), of(pool_v6(96))),
        ports,
        30000i32..30010,
        (prop::sample::select(vec!["Cluster", "Local"]), prop::sample::select(vec!["Cluster", "Local"])),
        (of(pool_v4(97)), of(pool_v6(97)), of(1i32..=86400), vec(good_external_ip(), 0..3)),
        (endpoints, endpoints_v6),
    )
        .prop_map(move |(ty, (v4, v6), ports, node_port, (etp, itp), outside, (endpoints, endpoints_v6))| {
            let (lb, lb_v6, affinity, external_ips) = outside;
            let dual_stack = v6.is_some();
            let ns = format!("good-{i}");
            let svc = Service {
                metadata: meta(Some(ns.clone()), "svc".into(), BTreeMap::new()),
                spec: Some(ServiceSpec {
                    type_: Some(ty.into()),
                    cluster_ips: Some([Some(v4), v6].into_iter().flatten().collect()),
                    ports: Some(
                        ports
                            .iter()
                            .map(|(name, port, protocol)| ServicePort {
                                name: Some(name.to_string()),
                                port: *port,
                                protocol: Some(protocol.to_string()),
                                node_port: (ty != "ClusterIP").then_some(node_port),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    external_ips: Some(external_ips),
                    external_traffic_policy: Some(etp.into()),
                    internal_traffic_policy: Some(itp.into()),
                    session_affinity: Some(if affinity.is_some() { "ClientIP" } else { "None" }.into()),
                    session_affinity_config: affinity.map(|t| SessionAffinityConfig {
                        client_ip: Some(ClientIPConfig { timeout_seconds: Some(t) }),
                    }),
                    ..Default::default()
                }),
                status: Some(ServiceStatus {
                    load_balancer: Some(LoadBalancerStatus {
                        ingress: Some(
                            lb.into_iter()
                                .chain(lb_v6)
                                .map(|ip| LoadBalancerIngress { ip: Some(ip), ..Default::default() })
                                .collect(),
                        ),
                    }),
                    ..Default::default()
                }),
            };
            let slice = |family: &str, endpoints: Vec<(String, bool, Option<String>)>| EndpointSlice {
                metadata: meta(
                    Some(ns.clone()),
                    format!("svc-{}", family.to_lowercase()),
                    BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), "svc".to_string())]),
                ),
                address_type: family.into(),
                ports: Some(
                    ports
                        .iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name: Some(name.to_string()),
                            port: Some(port + 8000),
                            protocol: Some(protocol.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                endpoints: endpoints
                    .into_iter()
                    .map(|(ip, ready, node_name)| Endpoint {
                        addresses: vec![ip],
                        conditions: Some(EndpointConditions { ready: Some(ready), ..Default::default() }),
                        node_name,
                        ..Default::default()
                    })
                    .collect(),
            };
            let mut slices = vec![slice("IPv4", endpoints)];
            if dual_stack {
                slices.push(slice("IPv6", endpoints_v6));
            }
            (svc, slices)
        })
}

/// Up to `max` good Services with their slices, each in its own `good-<i>` namespace.
pub fn good_objects(max: usize) -> impl Strategy<Value = Vec<(Service, Vec<EndpointSlice>)>> {
    (0..=max).prop_flat_map(|n| (0..n).map(good_service_and_slice).collect::<Vec<_>>())
}

/// The Node being programmed, with valid values.
pub fn good_node() -> Node {
    Node {
        metadata: meta(
            None,
            NODE.into(),
            BTreeMap::from([("topology.kubernetes.io/zone".to_string(), "zone-a".to_string())]),
        ),
        spec: Some(NodeSpec { pod_cidrs: Some(vec!["10.244.0.0/24".into()]), ..Default::default() }),
        status: Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".into(), address: "192.168.0.2".into() },
                NodeAddress { type_: "InternalIP".into(), address: "fd00:192::2".into() },
            ]),
            ..Default::default()
        }),
    }
}

/// An address of the good objects' (ClusterIPs from `pool_v4(96)`, load balancer IPs from
/// `pool_v4(97)`) in the spellings that mean it, or that would have meant it to some part of
/// the proxy: leading zeros, spaces, IPv4-mapped IPv6.
pub fn squatted_ip() -> impl Strategy<Value = String> {
    (prop_oneof![pool_v4(96), pool_v4(97)], 0u8..4).prop_map(|(ip, spelling)| match spelling {
        0 => ip,
        1 => ip.split('.').map(|o| format!("0{o}")).collect::<Vec<_>>().join("."),
        2 => format!(" {ip} "),
        _ => format!("::ffff:{ip}"),
    })
}

/// A valid Service in a namespace that sorts before every `good-*` one, claiming the good
/// objects' ClusterIPs and load balancer IPs on their ports as externalIPs and load balancer
/// IPs (its own ClusterIP and NodePorts are its own: the API server allocates those).
pub fn squatter_service() -> impl Strategy<Value = Service> {
    let ports = prop::sample::subsequence(vec![("http", 80, "TCP"), ("dns", 53, "UDP"), ("sctp", 9, "SCTP")], 1..=3);
    (
        0u8..3,
        prop::sample::select(vec!["ClusterIP", "NodePort", "LoadBalancer"]),
        pool_v4(95),
        ports,
        vec(squatted_ip(), 0..4),
        vec(squatted_ip(), 0..3),
        of(vec(hostile_cidr(), 0..2)),
    )
        .prop_map(|(k, ty, cluster_ip, ports, external_ips, ingress, ranges)| Service {
            metadata: meta(Some(format!("aa-bad-{k}")), "svc".into(), BTreeMap::new()),
            spec: Some(ServiceSpec {
                type_: Some(ty.into()),
                cluster_ips: Some(vec![cluster_ip]),
                ports: Some(
                    ports
                        .iter()
                        .enumerate()
                        .map(|(i, (name, port, protocol))| ServicePort {
                            name: Some(name.to_string()),
                            port: *port,
                            protocol: Some(protocol.to_string()),
                            node_port: (ty != "ClusterIP").then_some(31000 + 10 * k as i32 + i as i32),
                            ..Default::default()
                        })
                        .collect(),
                ),
                external_ips: Some(external_ips),
                load_balancer_source_ranges: ranges,
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        ingress
                            .into_iter()
                            .map(|ip| LoadBalancerIngress { ip: Some(ip), ..Default::default() })
                            .collect(),
                    ),
                }),
                ..Default::default()
            }),
        })
}

/// A valid single-stack Service (IPv4-only or IPv6-only) in a namespace that sorts before
/// every `good-*` one, on the good Services' ports, listing the good Services' externalIPs
/// and load balancer IPs of the *other* family as its own, with an endpoint of its own
/// family: upstream ignores them, so it must take none of them.
pub fn single_stack_contender() -> impl Strategy<Value = (Service, EndpointSlice)> {
    let ports = prop::sample::subsequence(vec![("http", 80, "TCP"), ("dns", 53, "UDP"), ("sctp", 9, "SCTP")], 1..=3);
    (0u8..3, any::<bool>(), ports, vec(pool_v4(98), 1..4), vec(pool_v6(98), 1..4), of(pool_v6(97)), of(pool_v4(97)))
        .prop_map(|(k, v4_only, ports, ext_v4, ext_v6, lb_v6, lb_v4)| {
            let ns = format!("aa-bad-{k}");
            let (cluster_ip, family, endpoint, external_ips, ingress) = match v4_only {
                true => (format!("10.95.9.{}", k + 1), "IPv4", "10.246.0.1", ext_v6, lb_v6),
                false => (format!("fd00:95:9::{}", k + 1), "IPv6", "fd00:246::1", ext_v4, lb_v4),
            };
            let svc = Service {
                metadata: meta(Some(ns.clone()), "svc".into(), BTreeMap::new()),
                spec: Some(ServiceSpec {
                    type_: Some("LoadBalancer".into()),
                    cluster_ips: Some(vec![cluster_ip]),
                    ports: Some(
                        ports
                            .iter()
                            .enumerate()
                            .map(|(i, (name, port, protocol))| ServicePort {
                                name: Some(name.to_string()),
                                port: *port,
                                protocol: Some(protocol.to_string()),
                                node_port: Some(31500 + 10 * i32::from(k) + i as i32),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    external_ips: Some(external_ips),
                    ..Default::default()
                }),
                status: Some(ServiceStatus {
                    load_balancer: Some(LoadBalancerStatus {
                        ingress: Some(
                            ingress
                                .into_iter()
                                .map(|ip| LoadBalancerIngress { ip: Some(ip), ..Default::default() })
                                .collect(),
                        ),
                    }),
                    ..Default::default()
                }),
            };
            let slice = EndpointSlice {
                metadata: meta(
                    Some(ns),
                    "svc-1".into(),
                    BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), "svc".into())]),
                ),
                address_type: family.into(),
                ports: Some(
                    ports
                        .iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name: Some(name.to_string()),
                            port: Some(port + 8000),
                            protocol: Some(protocol.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                endpoints: vec![Endpoint { addresses: vec![endpoint.into()], ..Default::default() }],
            };
            (svc, slice)
        })
}

/// A valid Service of namespace `zz-big-<k>` or `aa-big-<k>` with many addresses (up to 300
/// externalIPs of both families, from ranges no other generator uses) on up to 3 ports, and
/// one slice per family with many endpoints (up to 1,000): its cost is addresses times
/// endpoints, from a few hundred objects to hundreds of thousands.
pub fn big_service_and_slices() -> impl Strategy<Value = (Service, Vec<EndpointSlice>)> {
    let ports = prop::sample::subsequence(vec![("http", 80, "TCP"), ("dns", 53, "UDP"), ("alt", 8443, "TCP")], 1..=3);
    let count = || prop_oneof![2 => 0usize..20, 1 => 20usize..300];
    (0u8..3, any::<bool>(), ports, (count(), count()), (0usize..40, prop_oneof![2 => 0usize..50, 1 => 50usize..1000]))
        .prop_map(|(k, first, ports, (ext_v4, ext_v6), (eps_v6, eps_v4))| {
            let ns = format!("{}-big-{k}", if first { "aa" } else { "zz" });
            let v4 = |i: usize| format!("198.18.{}.{}", i / 256, i % 256);
            let v6 = |i: usize| format!("2001:db8:ff::{:x}", i + 1);
            let external_ips: Vec<String> = (0..ext_v4).map(v4).chain((0..ext_v6).map(v6)).collect();
            let svc = Service {
                metadata: meta(Some(ns.clone()), "svc".into(), BTreeMap::new()),
                spec: Some(ServiceSpec {
                    type_: Some("ClusterIP".into()),
                    cluster_ips: Some(vec![format!("10.95.8.{}", k + 1), format!("fd00:95:8::{}", k + 1)]),
                    ports: Some(
                        ports
                            .iter()
                            .map(|(name, port, protocol)| ServicePort {
                                name: Some(name.to_string()),
                                port: *port,
                                protocol: Some(protocol.to_string()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    external_ips: Some(external_ips),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let slice = |family: &str, n: usize| EndpointSlice {
                metadata: meta(
                    Some(ns.clone()),
                    format!("svc-{}", family.to_lowercase()),
                    BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), "svc".into())]),
                ),
                address_type: family.into(),
                ports: Some(
                    ports
                        .iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name: Some(name.to_string()),
                            port: Some(port + 1),
                            protocol: Some(protocol.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                endpoints: (0..n)
                    .map(|i| {
                        let address = match family {
                            "IPv4" => format!("10.247.{}.{}", i / 256, i % 256),
                            _ => format!("fd00:247::{:x}", i + 1),
                        };
                        Endpoint { addresses: vec![address], ..Default::default() }
                    })
                    .collect(),
            };
            (svc, vec![slice("IPv4", eps_v4), slice("IPv6", eps_v6)])
        })
}
