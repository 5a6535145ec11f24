//! The keys a scrape asks the kernel for (`CountedKeys`) are exactly the elements of the
//! counting sets in the rendered table, for a whole model and after port changes applied one
//! at a time: a key missing here would be a Service port missing from `/metrics`.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use verdict_layout::render::counted_keys::CountedKeys;
use verdict_layout::render::counters::CountingSet;
use verdict_layout::{RenderOptions, render};
use verdict_model::source::{
    Endpoint, EndpointPort, EndpointSlice, LoadBalancerIngress, Node, Service, ServicePortSpec,
};
use verdict_model::{Cidr, ProxyConfig, ProxyModel, ServiceCounters, build_model};

const LABEL: &str = "verdict.dev/count";

fn port(name: &str, port: i32, node_port: Option<i32>) -> ServicePortSpec {
    ServicePortSpec { name: name.into(), protocol: "TCP".into(), port, node_port }
}

/// A dual-stack cluster: a ClusterIP (v4), a NodePort of two ports (dual-stack), a load
/// balancer filtered by source ranges with an external IP, a Service without endpoints, and
/// one that is not labelled.
fn services() -> Vec<Service> {
    let labelled = |mut s: Service| {
        s.labels.insert(LABEL.into(), "yes".into());
        s
    };
    vec![
        labelled(Service {
            namespace: "ns".into(),
            name: "web".into(),
            cluster_ips: vec!["172.30.0.10".into()],
            ports: vec![port("http", 80, None)],
            ..Service::default()
        }),
        labelled(Service {
            namespace: "ns".into(),
            name: "np".into(),
            service_type: "NodePort".into(),
            cluster_ips: vec!["172.30.0.11".into(), "fd00:30::11".into()],
            ports: vec![port("http", 80, Some(30080)), port("https", 443, Some(30443))],
            ..Service::default()
        }),
        labelled(Service {
            namespace: "ns".into(),
            name: "lb".into(),
            service_type: "LoadBalancer".into(),
            cluster_ips: vec!["172.30.0.12".into()],
            ports: vec![port("http", 80, Some(30081))],
            external_ips: vec!["192.0.2.7".into()],
            load_balancer_ingress: vec![LoadBalancerIngress { ip: "5.6.7.8".into(), ip_mode: None }],
            load_balancer_source_ranges: vec!["203.0.113.0/25".into()],
            ..Service::default()
        }),
        labelled(Service {
            namespace: "ns".into(),
            name: "empty".into(),
            cluster_ips: vec!["172.30.0.13".into()],
            ports: vec![port("http", 80, None)],
            ..Service::default()
        }),
        Service {
            namespace: "ns".into(),
            name: "plain".into(),
            cluster_ips: vec!["172.30.0.14".into()],
            ports: vec![port("http", 80, None)],
            ..Service::default()
        },
    ]
}

fn slices(services: &[Service]) -> Vec<EndpointSlice> {
    services
        .iter()
        .filter(|s| s.name != "empty")
        .map(|s| EndpointSlice {
            namespace: s.namespace.clone(),
            name: format!("{}-1", s.name),
            service_name: s.name.clone(),
            address_type: "IPv4".into(),
            ports: s
                .ports
                .iter()
                .map(|p| EndpointPort { name: p.name.clone(), protocol: "TCP".into(), port: Some(8080) })
                .collect(),
            endpoints: vec![Endpoint { addresses: vec!["10.0.1.1".into()], ..Endpoint::default() }],
            trigger_time: None,
        })
        .collect()
}

fn model(counters: ServiceCounters, services: &[Service]) -> ProxyModel {
    let node = Node {
        name: "n".into(),
        addresses: vec![("InternalIP".into(), "192.168.0.2".into()), ("InternalIP".into(), "fd00::2".into())],
        ..Node::default()
    };
    let config = ProxyConfig {
        cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()],
        service_counters: counters,
        ..ProxyConfig::default()
    };
    let out = build_model(config, "n", Some(&node), &[], services, &slices(services));
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    out.model
}

/// (set, key) of every element of the rendered table's counting sets.
fn rendered(model: &ProxyModel) -> BTreeSet<(String, Vec<u8>)> {
    let rs = render(model, &RenderOptions::default());
    let names: BTreeSet<String> = CountingSet::all().map(CountingSet::name).collect();
    rs.sets
        .iter()
        .filter(|(name, _)| names.contains(*name))
        .flat_map(|(name, set)| set.elements.iter().map(move |(k, _)| (name.clone(), k.as_slice().to_vec())))
        .collect()
}

fn of_keys(keys: &CountedKeys) -> BTreeSet<(String, Vec<u8>)> {
    let out: BTreeSet<_> = keys.iter().map(|k| (k.set.name(), k.key.as_slice().to_vec())).collect();
    assert_eq!(out.len(), keys.len(), "a key twice, or len() wrong");
    out
}

#[test]
fn keys_are_the_counting_sets_elements() {
    for counters in [ServiceCounters::All, ServiceCounters::Labelled(vec![(LABEL.into(), Some("yes".into()))])] {
        let m = model(counters.clone(), &services());
        let want = rendered(&m);
        let sets: BTreeSet<&str> = want.iter().map(|(s, _)| s.as_str()).collect();
        // The model covers every kind of counting element there is.
        for set in ["accepted-ips", "accepted-nodeports", "rejected-ips-v6", "rejected-nodeports-v6", "firewalled-ips"]
        {
            assert!(sets.contains(set), "{counters:?}: no element in {set}: {want:?}");
        }
        assert_eq!(of_keys(&CountedKeys::of_model(&m)), want, "{counters:?}");
    }
    assert!(CountedKeys::of_model(&model(ServiceCounters::Off, &services())).is_empty());
}

#[test]
fn keys_follow_port_changes_one_at_a_time() {
    let counters = ServiceCounters::Labelled(vec![(LABEL.into(), None)]);
    let before = model(counters.clone(), &services());
    let mut keys = CountedKeys::of_model(&before);
    // A load balancer IP more, a port gone, a Service no longer labelled, another newly so.
    let mut changed = services();
    changed[2].load_balancer_ingress.push(LoadBalancerIngress { ip: "5.6.7.9".into(), ip_mode: None });
    changed[1].ports.pop();
    changed[0].labels.clear();
    changed[4].labels.insert(LABEL.into(), String::new());
    let after = model(counters, &changed);
    let ports: BTreeMap<_, _> = before.services.keys().chain(after.services.keys()).map(|n| (n.clone(), ())).collect();
    for name in ports.keys() {
        keys.update(&after, name, after.services.get(name).map(|p| &**p));
    }
    assert_ne!(rendered(&before), rendered(&after));
    assert_eq!(of_keys(&keys), rendered(&after));
}
