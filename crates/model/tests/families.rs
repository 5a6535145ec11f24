//! Which families the model proxies: the kernel's (from the configuration), not the Node's.

use verdict_model::{IpFamily, ProxyConfig, build_model, source};

fn node(addresses: &[&str]) -> source::Node {
    source::Node {
        name: "n1".into(),
        addresses: addresses.iter().map(|a| ("InternalIP".to_string(), a.to_string())).collect(),
        ..source::Node::default()
    }
}

fn v6_service() -> (source::Service, source::EndpointSlice) {
    let svc = source::Service {
        namespace: "ns".into(),
        name: "v6".into(),
        cluster_ips: vec!["fd00::10".into()],
        ports: vec![source::ServicePortSpec { name: "".into(), protocol: "TCP".into(), port: 80, node_port: None }],
        ..source::Service::default()
    };
    let slice = source::EndpointSlice {
        namespace: "ns".into(),
        name: "v6-abc".into(),
        service_name: "v6".into(),
        address_type: "IPv6".into(),
        ports: vec![source::EndpointPort { name: "".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: vec![source::Endpoint { addresses: vec!["fd00:1::5".into()], ..source::Endpoint::default() }],
        trigger_time: None,
    };
    (svc, slice)
}

#[test]
fn an_ipv4_node_on_a_dual_stack_kernel_proxies_ipv6_services() {
    let (svc, slice) = v6_service();
    let out = build_model(ProxyConfig::default(), "n1", Some(&node(&["10.0.0.1"])), &[], &[svc], &[slice]);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let port = out.model.services.values().next().expect("the IPv6 Service is proxied");
    assert_eq!(port.v6.cluster.len(), 1);
    assert_eq!(out.model.families_without_nodeports(), vec![IpFamily::V6]);
}

#[test]
fn a_kernel_without_ipv6_leaves_ipv6_services_out_and_says_why() {
    let (svc, slice) = v6_service();
    let config = ProxyConfig { families: vec![IpFamily::V4], ..ProxyConfig::default() };
    let out = build_model(config, "n1", Some(&node(&["10.0.0.1", "fd00::1"])), &[], &[svc], &[slice]);
    assert!(out.model.services.is_empty());
    let reasons: Vec<&str> = out.problems.iter().map(|p| p.reason).collect();
    assert_eq!(reasons, ["NoUsableClusterIP"], "{:?}", out.problems);
    assert!(out.problems[0].message.contains("kernel supports (IPv4)"), "{:?}", out.problems);
    assert!(out.model.families_without_nodeports().is_empty());
}
