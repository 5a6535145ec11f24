//! The model's count of what a Service port costs the table (`ProxyModel::table_objects`,
//! which the per-Service cap is decided on) against what `render` writes for it, port by
//! port and family by family, over many generated Services: every layout (shared, affinity,
//! Local policies), NodePorts, external and load balancer IPs of both families, source
//! ranges (some that cannot be applied), counters, every endpoint condition. A change of what
//! render writes that the count does not follow fails here.

use super::{Class, ClassNames, Sink, service};
use proptest::collection::vec;
use proptest::prelude::*;
use std::collections::BTreeMap;
use verdict_model::source::{
    Endpoint, EndpointPort, EndpointSlice, LoadBalancerIngress, Node, Service, ServicePortSpec,
};
use verdict_model::{
    Cidr, DetectLocal, IpFamily, NodePortAddresses, ProxyConfig, ProxyModel, ServiceCounters, build_model,
};
use verdict_nft::rule::{Item, Stmt};
use verdict_nft::ruleset::{Blob, Chain, Elem, SetDecl};

/// Counts what one port's share of the table holds: elements, chains with their rules and the
/// entries of their anonymous maps, sets. The class chains and maps it asks for are shared by
/// every port with as many endpoints, and not counted.
#[derive(Default)]
struct Tally {
    objects: usize,
}

impl Sink for Tally {
    fn element(&mut self, _set: &str, _key: Blob, _elem: Elem) {
        self.objects += 1;
    }

    fn class(&mut self, class: Class) -> ClassNames {
        ClassNames::of(class)
    }

    fn chain(&mut self, chain: Chain) {
        let anonymous: usize = chain
            .rules
            .iter()
            .flat_map(|r| &r.items)
            .map(|item| match item {
                Item::Stmt(Stmt::AnonVmap { entries, .. }) => entries.len(),
                _ => 0,
            })
            .sum();
        self.objects += 1 + chain.rules.len() + anonymous;
    }

    fn set(&mut self, _decl: SetDecl) {
        self.objects += 1;
    }
}

/// What `render` writes for every port of the model, by port name and family.
fn rendered(model: &ProxyModel) -> BTreeMap<(String, IpFamily), usize> {
    let mut out = BTreeMap::new();
    for port in model.services.values() {
        for f in model.families() {
            let mut tally = Tally::default();
            service::render(model, port, f, &mut tally);
            out.insert((format!("{}/{}", port.name, port.protocol()), f), tally.objects);
        }
    }
    out
}

/// The model's count, keyed as [`rendered`].
fn counted(model: &ProxyModel) -> BTreeMap<(String, IpFamily), usize> {
    let mut out = BTreeMap::new();
    for port in model.services.values() {
        for f in model.families() {
            out.insert((format!("{}/{}", port.name, port.protocol()), f), model.table_objects_in(port, f));
        }
    }
    out
}

const NODE: &str = "node-a";

fn v4(i: u8) -> String {
    format!("10.96.0.{i}")
}

fn v6(i: u8) -> String {
    format!("fd00:96::{i:x}")
}

/// An address of either family from small pools (so that addresses repeat within a Service).
fn outside_address() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u8..6).prop_map(|i| format!("192.0.2.{i}")),
        (1u8..6).prop_map(|i| format!("2001:db8::{i:x}")),
        // The node's own addresses, so that a source range can contain them.
        Just("192.168.0.2".to_string()),
    ]
}

fn source_range() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("203.0.113.0/24".to_string()),
        Just("192.168.0.0/16".to_string()),
        Just("2001:db8:1::/48".to_string()),
        Just("fd02::/16".to_string()),
        // Cannot be applied: the firewall closes.
        Just("not-a-cidr".to_string()),
    ]
}

fn endpoint(family: &'static str) -> impl Strategy<Value = Endpoint> {
    let address = match family {
        "IPv4" => (1u8..12).prop_map(|i| format!("10.244.0.{i}")).boxed(),
        _ => (1u8..12).prop_map(|i| format!("fd00:244::{i:x}")).boxed(),
    };
    let optional = || prop_oneof![Just(None), any::<bool>().prop_map(Some)];
    let node = prop_oneof![Just(Some(NODE.to_string())), Just(Some("node-b".to_string())), Just(None)];
    let zones = prop_oneof![3 => Just(None), 1 => Just(Some(vec!["zone-a".to_string()])), 1 => Just(Some(vec!["zone-b".to_string()]))];
    (address, optional(), optional(), optional(), node, zones).prop_map(
        |(address, ready, serving, terminating, node_name, zone_hints)| Endpoint {
            addresses: vec![address],
            ready,
            serving,
            terminating,
            node_name,
            zone_hints,
            ..Endpoint::default()
        },
    )
}

/// Service `svc-<i>` in namespace `ns`, with its slices.
fn service(i: usize) -> impl Strategy<Value = (Service, Vec<EndpointSlice>)> {
    let ports = prop::sample::subsequence(vec![("http", 80, "TCP"), ("dns", 53, "UDP"), ("sctp", 9, "SCTP")], 1..=3);
    let policy = || prop::sample::select(vec!["Cluster", "Local"]);
    (
        prop::sample::select(vec!["ClusterIP", "NodePort", "LoadBalancer"]),
        prop::sample::select(vec![
            vec![v4(i as u8 + 1)],
            vec![v6(i as u8 + 1)],
            vec![v4(i as u8 + 1), v6(i as u8 + 1)],
        ]),
        ports,
        (vec(outside_address(), 0..4), vec(outside_address(), 0..3), vec(source_range(), 0..3)),
        (policy(), policy(), prop::option::of(1i32..100), any::<bool>()),
        (vec(endpoint("IPv4"), 0..6), vec(endpoint("IPv6"), 0..6)),
    )
        .prop_map(move |(ty, cluster_ips, ports, (external, ingress, ranges), policies, (eps4, eps6))| {
            let (etp, itp, affinity, labelled) = policies;
            let name = format!("svc-{i}");
            let svc = Service {
                namespace: "ns".into(),
                name: name.clone(),
                labels: labelled.then(|| ("team".to_string(), "a".to_string())).into_iter().collect(),
                service_type: ty.into(),
                cluster_ips,
                ports: ports
                    .iter()
                    .enumerate()
                    .map(|(k, (name, port, protocol))| ServicePortSpec {
                        name: name.to_string(),
                        protocol: protocol.to_string(),
                        port: *port,
                        node_port: (ty != "ClusterIP").then_some(30000 + 10 * i as i32 + k as i32),
                    })
                    .collect(),
                external_ips: external,
                load_balancer_ingress: ingress
                    .into_iter()
                    .map(|ip| LoadBalancerIngress { ip, ip_mode: None })
                    .collect(),
                load_balancer_source_ranges: ranges,
                external_traffic_policy: etp.into(),
                internal_traffic_policy: itp.into(),
                session_affinity: if affinity.is_some() { "ClientIP" } else { "None" }.into(),
                session_affinity_timeout_seconds: affinity,
                health_check_node_port: Some(32000 + i as i32),
            };
            let slice = |family: &str, endpoints: Vec<Endpoint>| EndpointSlice {
                namespace: "ns".into(),
                name: format!("{name}-{family}"),
                service_name: name.clone(),
                address_type: family.into(),
                ports: ports
                    .iter()
                    .map(|(name, port, protocol)| EndpointPort {
                        name: name.to_string(),
                        protocol: protocol.to_string(),
                        port: Some(port + 8000),
                    })
                    .collect(),
                endpoints,
                trigger_time: None,
            };
            (svc, vec![slice("IPv4", eps4), slice("IPv6", eps6)])
        })
}

fn config() -> impl Strategy<Value = ProxyConfig> {
    let cidr = |s: &str| Cidr::parse_tolerant(s).unwrap();
    (
        prop::sample::select(vec![vec![IpFamily::V4], vec![IpFamily::V6], IpFamily::ALL.to_vec()]),
        prop::sample::select(vec![
            DetectLocal::ClusterCidr,
            DetectLocal::NodeCidr,
            DetectLocal::None,
            DetectLocal::BridgeInterface("cbr0".into()),
        ]),
        any::<bool>(),
        prop::sample::select(vec![
            ServiceCounters::Off,
            ServiceCounters::All,
            ServiceCounters::Labelled(vec![("team".into(), Some("a".into()))]),
        ]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(families, detect_local, localhost, counters, cluster_cidrs, all_local)| ProxyConfig {
            families,
            detect_local,
            localhost_nodeports: localhost,
            service_counters: counters,
            cluster_cidrs: if cluster_cidrs { vec![cidr("10.244.0.0/16")] } else { Vec::new() },
            nodeport_addresses: if all_local {
                verdict_model::parse_nodeport_addresses(&["0.0.0.0/0", "::/0"], NodePortAddresses::primary()).unwrap()
            } else {
                NodePortAddresses::primary()
            },
            max_elements_per_service: usize::MAX,
            ..ProxyConfig::default()
        })
}

fn node() -> Node {
    Node {
        name: NODE.into(),
        labels: [("topology.kubernetes.io/zone".to_string(), "zone-a".to_string())].into(),
        addresses: vec![("InternalIP".into(), "192.168.0.2".into()), ("InternalIP".into(), "fd02::2".into())],
        pod_cidrs: vec!["10.244.0.0/24".into(), "fd00:244::/64".into()],
        ..Node::default()
    }
}

fn model(config: ProxyConfig, objects: Vec<(Service, Vec<EndpointSlice>)>) -> ProxyModel {
    let (services, slices): (Vec<Service>, Vec<Vec<EndpointSlice>>) = objects.into_iter().unzip();
    let slices: Vec<EndpointSlice> = slices.into_iter().flatten().collect();
    build_model(config, NODE, Some(&node()), &[], &services, &slices).model
}

fn objects(max: usize) -> impl Strategy<Value = Vec<(Service, Vec<EndpointSlice>)>> {
    (1..=max).prop_flat_map(|n| (0..n).map(service).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_models_count_is_what_render_writes(config in config(), objects in objects(5)) {
        let model = model(config, objects);
        prop_assert_eq!(counted(&model), rendered(&model));
    }
}

/// The generator reaches every layout and part of a port: a count that is right only for the
/// common case would pass a generator that never leaves it.
#[test]
fn the_generated_services_cover_every_layout() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut own, mut shared, mut firewalls, mut counted_ports, mut local_only) = (0, 0, 0, 0, 0);
    for _ in 0..200 {
        let config = config().new_tree(&mut runner).unwrap().current();
        let objects = objects(5).new_tree(&mut runner).unwrap().current();
        let model = model(config, objects);
        for port in model.services.values() {
            match port.needs_own_chains() {
                true => own += 1,
                false => shared += 1,
            }
            firewalls += usize::from(IpFamily::ALL.iter().any(|f| !port.firewalled_ips(*f).is_empty()));
            counted_ports += usize::from(port.counted && model.config.service_counters.enabled());
            local_only += usize::from(port.external_policy_local && port.v4.local.is_empty() && port.v4.has_any);
        }
    }
    for (what, n) in [
        ("own chains", own),
        ("shared", shared),
        ("firewalls", firewalls),
        ("counted", counted_ports),
        ("local", local_only),
    ] {
        assert!(n >= 20, "only {n} ports with {what}");
    }
}
