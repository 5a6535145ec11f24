//! A sync writes what changed and nothing else: the number of kernel objects a change touches
//! does not depend on how many other Services exist (upstream kube-proxy checks the same).

use verdict_layout::{RenderOptions, render};
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{Cidr, ProxyConfig, build_model};
use verdict_nft::{Ruleset, diff};

fn service(i: usize) -> Service {
    Service {
        namespace: "bulk".into(),
        name: format!("svc-{i}"),
        cluster_ips: vec![format!("172.{}.{}.{}", 16 + i / 65536, (i / 256) % 256, i % 256)],
        ports: vec![ServicePortSpec { name: "http".into(), protocol: "TCP".into(), port: 80, node_port: None }],
        ..Service::default()
    }
}

fn slice(svc: &str, addrs: &[String]) -> EndpointSlice {
    EndpointSlice {
        namespace: "bulk".into(),
        name: format!("{svc}-1"),
        service_name: svc.into(),
        address_type: "IPv4".into(),
        ports: vec![EndpointPort { name: "http".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: addrs.iter().map(|a| Endpoint { addresses: vec![a.clone()], ..Endpoint::default() }).collect(),
        trigger_time: None,
    }
}

fn pod(i: usize, k: usize) -> String {
    format!("10.{}.{}.{}", 100 + k, (i / 256) % 256, i % 256)
}

/// `others` Services with one endpoint each, plus `extra` (the Service under test).
fn table(others: usize, extra: Option<(Service, EndpointSlice)>) -> Ruleset {
    let mut services: Vec<Service> = (0..others).map(service).collect();
    let mut slices: Vec<EndpointSlice> = (0..others).map(|i| slice(&format!("svc-{i}"), &[pod(i, 0)])).collect();
    if let Some((s, e)) = extra {
        services.push(s);
        slices.push(e);
    }
    let node =
        Node { name: "n".into(), addresses: vec![("InternalIP".into(), "192.168.0.2".into())], ..Node::default() };
    let config =
        ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() };
    let out = build_model(config, "n", Some(&node), &[], &services, &slices);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    render(&out.model, &RenderOptions::default())
}

fn under_test(endpoints: &[&str]) -> (Service, EndpointSlice) {
    let mut s = service(0);
    s.namespace = "test".into();
    s.name = "target".into();
    s.cluster_ips = vec!["172.31.255.1".into()];
    let mut e = slice("target", &endpoints.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    e.namespace = "test".into();
    (s, e)
}

/// Objects written by each change, for a table with `others` other Services.
fn counts(others: usize) -> [usize; 5] {
    let base = table(others, None);
    let committed = diff(None, &base).result;
    let none = diff(Some(&committed), &table(others, None)).transaction.object_count();

    let with_one = table(others, Some(under_test(&["10.250.0.1"])));
    let add = diff(Some(&committed), &with_one);
    let remove = diff(Some(&add.result), &base).transaction.object_count();
    let moved = table(others, Some(under_test(&["10.250.0.2"])));
    let change = diff(Some(&add.result), &moved).transaction.object_count();

    let three = table(others, Some(under_test(&["10.250.0.1", "10.250.0.5", "10.250.0.9"])));
    let three_committed = diff(Some(&committed), &three).result;
    let one_of_three = table(others, Some(under_test(&["10.250.0.1", "10.250.0.7", "10.250.0.9"])));
    let change_one_of_three = diff(Some(&three_committed), &one_of_three).transaction.object_count();
    [none, add.transaction.object_count(), remove, change, change_one_of_three]
}

#[test]
fn changes_cost_the_same_with_10_and_10000_other_services() {
    let small = counts(10);
    let large = counts(10_000);
    // [no change, add a Service with one endpoint, delete it, replace its endpoint,
    //  replace one endpoint of three]
    assert_eq!(small, large, "the cost of a change must not depend on the other Services");
    let [none, add, remove, change, one_of_three] = small;
    assert_eq!(none, 0, "a sync with no change writes nothing");
    // cluster-ips, service-ips, endpoints-1 and hairpin-endpoints: one element each.
    assert_eq!(add, 4);
    assert_eq!(remove, 4);
    // The endpoint slot and the hairpin entry are swapped (delete + add each).
    assert_eq!(change, 4);
    // Only the slot of the replaced endpoint changes: the others keep theirs.
    assert_eq!(one_of_three, 4);
}

#[test]
fn a_new_endpoint_count_creates_its_chain_once() {
    let base = table(10, None);
    let committed = diff(None, &base).result;
    let with_pair = table(10, Some(under_test(&["10.250.0.1", "10.250.0.2"])));
    let plan = diff(Some(&committed), &with_pair);
    let text = plan.transaction.to_string();
    assert!(text.contains("add chain inet kube-proxy endpoints-2"), "{text}");
    assert!(text.contains("add map inet kube-proxy endpoints-2"), "{text}");
    // cluster-ips + service-ips + 2 slots + 2 hairpin, the chain, the map, the rule.
    assert_eq!(plan.transaction.object_count(), 9, "{text}");
    // Removing the Service removes the chain and the map again.
    let back = diff(Some(&plan.result), &base);
    let text = back.transaction.to_string();
    assert!(
        text.contains("delete chain inet kube-proxy endpoints-2")
            && text.contains("delete set inet kube-proxy endpoints-2"),
        "{text}"
    );
}
