//! The incremental model (ModelCache) and the batch build (build_model) agree, object by
//! object, after any sequence of changes, and the changes it reports replay to the new model.

use std::collections::BTreeMap;
use verdict_model::source::{
    Endpoint, EndpointPort, EndpointSlice, LoadBalancerIngress, Node, Service, ServicePortSpec,
};
use verdict_model::{Cidr, ModelCache, ProxyConfig, ServicePorts, build_model};

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn service(rng: &mut Rng, name: usize) -> Service {
    // Few addresses and NodePorts, so Services often conflict.
    let kind = ["ClusterIP", "NodePort", "LoadBalancer"][rng.next(3)];
    Service {
        namespace: format!("ns{}", name % 3),
        name: format!("svc{name}"),
        service_type: kind.into(),
        cluster_ips: vec![format!("172.30.0.{}", rng.next(8))],
        // Outside addresses sometimes another Service's ClusterIP, so that claims of every
        // kind contend (a ClusterIP beats a load balancer IP beats an externalIP) as
        // Services come and go.
        external_ips: if rng.next(4) == 0 { vec![outside_address(rng)] } else { vec![] },
        load_balancer_ingress: if kind == "LoadBalancer" && rng.next(2) == 0 {
            vec![LoadBalancerIngress { ip: outside_address(rng), ip_mode: None }]
        } else {
            vec![]
        },
        ports: (0..1 + rng.next(2))
            .map(|i| ServicePortSpec {
                name: format!("p{i}"),
                protocol: ["TCP", "UDP"][rng.next(2)].into(),
                port: 80 + rng.next(2) as i32,
                node_port: (kind != "ClusterIP").then(|| 30000 + rng.next(4) as i32),
            })
            .collect(),
        external_traffic_policy: ["Cluster", "Local"][rng.next(2)].into(),
        internal_traffic_policy: ["Cluster", "Local"][rng.next(2)].into(),
        ..Service::default()
    }
}

fn outside_address(rng: &mut Rng) -> String {
    if rng.next(2) == 0 { format!("192.168.99.{}", rng.next(3)) } else { format!("172.30.0.{}", rng.next(8)) }
}

fn slice(rng: &mut Rng, svc: usize, idx: usize) -> EndpointSlice {
    EndpointSlice {
        namespace: format!("ns{}", svc % 3),
        name: format!("svc{svc}-{idx}"),
        service_name: format!("svc{svc}"),
        address_type: "IPv4".into(),
        ports: (0..2)
            .map(|i| EndpointPort {
                name: format!("p{i}"),
                protocol: ["TCP", "UDP"][rng.next(2)].into(),
                port: Some(8080),
            })
            .collect(),
        endpoints: (0..rng.next(4))
            .map(|_| Endpoint {
                addresses: address(rng),
                ready: Some(rng.next(4) != 0),
                serving: Some(rng.next(3) != 0),
                terminating: Some(rng.next(3) == 0),
                node_name: Some(["node1", "node2"][rng.next(2)].into()),
                zone_hints: (rng.next(5) == 0).then(|| vec!["zone-a".to_string()]),
                node_hints: (rng.next(5) == 0).then(|| vec![["node1", "node2"][rng.next(2)].to_string()]),
                ..Endpoint::default()
            })
            .collect(),
        trigger_time: None,
    }
}

/// Mostly canonical addresses; sometimes spellings the cache keeps as text (leading zeros,
/// spaces, upper-case IPv6), a wrong family, garbage, a second address, or none.
fn address(rng: &mut Rng) -> Vec<String> {
    let canonical = format!("10.0.{}.{}", rng.next(2), rng.next(6));
    match rng.next(12) {
        0 => vec![format!("10.0.0{}.{}", rng.next(2), rng.next(6))],
        1 => vec![format!(" {canonical}")],
        2 => vec!["FD00::1".into()],
        3 => vec!["fd00::1".into()],
        4 => vec!["not-an-ip".into()],
        5 => vec![],
        6 => vec![canonical, "10.0.9.9".into()],
        _ => vec![canonical],
    }
}

fn node(rng: &mut Rng) -> Node {
    Node {
        name: "node1".into(),
        addresses: vec![("InternalIP".into(), format!("192.168.0.{}", 1 + rng.next(2)))],
        labels: [("topology.kubernetes.io/zone".to_string(), format!("z{}", rng.next(2)))].into(),
        ..Node::default()
    }
}

#[test]
fn incremental_model_equals_batch_model() {
    incremental_model_equals_batch_model_with(false);
}

/// As the sync loop does before its first sync: rebuilds ahead between the full ones, which
/// leave Services without slices for later. Every full rebuild still gives the batch model.
#[test]
fn rebuilds_ahead_leave_the_same_model() {
    incremental_model_equals_batch_model_with(true);
}

fn incremental_model_equals_batch_model_with(ahead: bool) {
    let config =
        ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() };
    let mut rng = Rng(42);
    let mut cache = ModelCache::new(config.clone(), "node1");
    let mut services: BTreeMap<String, Service> = BTreeMap::new();
    let mut slices: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut the_node = Some(node(&mut rng));
    cache.set_node(the_node.clone());
    let mut mirror = ServicePorts::default();
    let mut conflicts_seen = 0;
    let mut trumped = 0;

    for round in 0..400 {
        for _ in 0..1 + rng.next(4) {
            let svc = rng.next(12);
            match rng.next(7) {
                0 | 1 => {
                    let s = service(&mut rng, svc);
                    services.insert(s.name.clone(), s.clone());
                    cache.upsert_service(s);
                }
                2 => {
                    if let Some(s) = services.remove(&format!("svc{svc}")) {
                        cache.remove_service(&s.namespace, &s.name);
                    }
                }
                3 | 4 => {
                    let idx = rng.next(2);
                    let e = slice(&mut rng, svc, idx);
                    slices.insert(e.name.clone(), e.clone());
                    cache.upsert_slice(e);
                }
                5 => {
                    let name = format!("svc{svc}-{}", rng.next(2));
                    if let Some(e) = slices.remove(&name) {
                        cache.remove_slice(&e.namespace, &e.name);
                    }
                }
                _ => {
                    the_node = if rng.next(5) == 0 { None } else { Some(node(&mut rng)) };
                    cache.set_node(the_node.clone());
                }
            }
        }
        if ahead && round % 2 == 0 {
            for change in cache.rebuild_ahead().changes {
                assert_eq!(mirror.get(&change.name), change.old.as_ref(), "round {round}: reported old state is wrong");
                match change.new {
                    Some(p) => mirror.insert(p),
                    None => mirror.remove(&change.name),
                };
            }
            continue;
        }
        let rebuilt = cache.rebuild();
        let svcs: Vec<Service> = services.values().cloned().collect();
        let sls: Vec<EndpointSlice> = slices.values().cloned().collect();
        let batch = build_model(config.clone(), "node1", the_node.as_ref(), &[], &svcs, &sls);
        assert_eq!(cache.model().node, batch.model.node, "round {round}: node facts");
        assert_eq!(cache.model().services, batch.model.services, "round {round}: services differ");
        assert_eq!(cache.problems(), batch.problems, "round {round}: problems differ");
        conflicts_seen += batch.problems.iter().filter(|p| p.reason == "AddressConflict").count();
        let lost_to = |kind: &str| {
            batch.problems.iter().filter(|p| p.reason == "AddressConflict" && p.message.contains(kind)).count()
        };
        trumped += lost_to("(its clusterIP)") + lost_to("(its load balancer IP)");
        for change in rebuilt.changes {
            assert_eq!(mirror.get(&change.name), change.old.as_ref(), "round {round}: reported old state is wrong");
            match change.new {
                Some(p) => mirror.insert(p),
                None => mirror.remove(&change.name),
            };
        }
        assert_eq!(
            mirror, batch.model.services,
            "round {round}: replaying the reported changes does not give the model"
        );
    }
    let checks = if ahead { 2 } else { 1 };
    assert!(conflicts_seen > 50 / checks, "the test should exercise address conflicts ({conflicts_seen})");
    assert!(trumped > 20 / checks, "the test should exercise claims of different kinds ({trumped})");
}
