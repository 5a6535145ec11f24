//! Issue 31: the per-Service cap counts what the table really gets. The shared layout writes
//! one endpoint-map element per address and endpoint, so a Service's cost is its addresses
//! times its endpoints, not its ports times its addresses; a Service over the cap is left out
//! whole, with the count and the cap in its problem, before it is rendered.

use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, LoadBalancerIngress, Service, ServicePortSpec};
use verdict_model::{
    BuildOutput, DEFAULT_MAX_ELEMENTS_PER_SERVICE, ModelCache, ProxyConfig, ServiceCounters, build_model,
};

fn service(name: &str, cluster_ips: &[&str], ports: usize) -> Service {
    Service {
        namespace: "tenant".into(),
        name: name.into(),
        cluster_ips: cluster_ips.iter().map(|s| s.to_string()).collect(),
        ports: (0..ports)
            .map(|i| ServicePortSpec {
                name: format!("p{i}"),
                protocol: "TCP".into(),
                port: 1000 + i as i32,
                node_port: None,
            })
            .collect(),
        ..Service::default()
    }
}

/// One slice of `service` with `n` ready endpoints of `family` for each of its ports.
fn slice(svc: &Service, family: &str, n: usize) -> EndpointSlice {
    let address = |i: usize| match family {
        "IPv4" => format!("10.{}.{}.{}", 128 + i / 65536, (i / 256) % 256, i % 256),
        _ => format!("fd00:244::{i:x}"),
    };
    EndpointSlice {
        namespace: svc.namespace.clone(),
        name: format!("{}-{family}", svc.name),
        service_name: svc.name.clone(),
        address_type: family.into(),
        ports: svc
            .ports
            .iter()
            .map(|p| EndpointPort { name: p.name.clone(), protocol: p.protocol.clone(), port: Some(8080) })
            .collect(),
        endpoints: (0..n)
            .map(|i| Endpoint { addresses: vec![address(i)], node_name: Some("n1".into()), ..Endpoint::default() })
            .collect(),
        trigger_time: None,
    }
}

/// The batch build, checked against the incremental cache fed the same objects.
fn build(config: ProxyConfig, services: &[Service], slices: &[EndpointSlice]) -> BuildOutput {
    let batch = build_model(config.clone(), "n1", None, &[], services, slices);
    let mut cache = ModelCache::new(config, "n1");
    for s in slices {
        cache.upsert_slice(s.clone());
    }
    for s in services {
        cache.upsert_service(s.clone());
    }
    cache.rebuild();
    assert_eq!(cache.model().services, batch.model.services, "the cache decides as the batch build");
    assert_eq!(cache.problems(), batch.problems);
    batch
}

/// What the model's ports cost, all told.
fn cost(out: &BuildOutput) -> usize {
    out.model.services.values().map(|p| out.model.table_objects(p)).sum()
}

/// The measured case of the issue: 999 externalIPs and one slice of 1,000 endpoints. Counted
/// as ports x addresses it was 1,000 elements, under the cap; rendered it was a million map
/// elements. It is left out whole, and its problem names what it would cost and the cap.
#[test]
fn a_thousand_addresses_times_a_thousand_endpoints_is_left_out() {
    let mut big = service("big", &["10.96.9.9"], 1);
    big.external_ips = (0..999).map(|i| format!("198.18.{}.{}", i / 256, i % 256)).collect();
    let small = service("small", &["10.96.9.10"], 1);
    let slices = [slice(&big, "IPv4", 1000), slice(&small, "IPv4", 3)];
    let out = build(ProxyConfig::default(), &[big.clone(), small.clone()], &slices);

    assert!(out.model.services.keys().all(|n| &*n.name == "small"), "the big Service is left out whole");
    assert_eq!(out.model.services.len(), 1, "the small one is programmed");
    let problems: Vec<_> = out.problems.iter().filter(|p| p.object.name == "big").collect();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].reason, "TooManyElements");
    // Its cluster-ips element, 1,000 hairpin elements, and for each of its 1,000 addresses a
    // dispatch element and 1,000 endpoint-map elements.
    let message = &problems[0].message;
    assert!(message.contains(" 1002001 objects"), "{message}");
    assert!(message.contains(&format!("the {DEFAULT_MAX_ELEMENTS_PER_SERVICE} one Service may add")), "{message}");
}

/// A port that cannot fit is refused before its endpoints are looked at: its addresses alone
/// (one element each at least) are over the cap, and the problem says "at least".
#[test]
fn a_service_whose_addresses_alone_are_over_the_cap_is_refused_before_its_endpoints() {
    let mut wide = service("wide", &["10.96.9.11"], 2);
    wide.external_ips = (0..20).map(|i| format!("198.18.0.{i}")).collect();
    let config = ProxyConfig { max_elements_per_service: 30, ..ProxyConfig::default() };
    let out = build(config, std::slice::from_ref(&wide), &[slice(&wide, "IPv4", 5)]);
    assert!(out.model.services.is_empty());
    let problem = &out.problems[0];
    assert_eq!(problem.reason, "TooManyElements");
    // The first port costs 1 + 5 + 21 x 6 = 132, over 30 once its endpoints are known; with
    // 2 ports the floor check would refuse the second one before them.
    assert!(problem.message.contains(" 132 objects"), "{}", problem.message);
    let config = ProxyConfig { max_elements_per_service: 10, ..ProxyConfig::default() };
    let out = build(config, std::slice::from_ref(&wide), &[slice(&wide, "IPv4", 5)]);
    assert!(out.problems[0].message.contains("at least 22 objects"), "{}", out.problems[0].message);
}

/// A large real Service fits the default: a dual-stack LoadBalancer with an externalIP and a
/// load balancer IP per family (3 addresses per family), 100 ports and 30 endpoints per
/// family, NodePorts, counted by `--service-counters`.
#[test]
fn a_large_real_service_fits_the_default_cap() {
    let mut svc = service("large", &["10.96.9.20", "fd00:96::20"], 100);
    svc.service_type = "LoadBalancer".into();
    for (i, p) in svc.ports.iter_mut().enumerate() {
        p.node_port = Some(30000 + i as i32);
    }
    svc.external_ips = vec!["192.0.2.20".into(), "2001:db8::20".into()];
    svc.load_balancer_ingress = ["198.51.100.20", "2001:db8:1::20"]
        .iter()
        .map(|ip| LoadBalancerIngress { ip: ip.to_string(), ip_mode: None })
        .collect();
    let slices = [slice(&svc, "IPv4", 30), slice(&svc, "IPv6", 30)];
    let config = ProxyConfig { service_counters: ServiceCounters::All, ..ProxyConfig::default() };
    let out = build(config, std::slice::from_ref(&svc), &slices);
    assert!(out.problems.is_empty(), "{:#?}", out.problems);
    assert_eq!(out.model.services.len(), 100);
    let spent = cost(&out);
    // Per port and family: its cluster-ips element, 30 hairpin elements, 3 addresses and the
    // NodePort each with a dispatch element and 30 endpoint-map elements, 8 counting elements.
    assert_eq!(spent, 100 * 2 * (1 + 30 + 4 * 31 + 8));
    assert!(spent <= DEFAULT_MAX_ELEMENTS_PER_SERVICE, "{spent}");
    // Its own Service's size the other way: at exactly its cost it is programmed, one below not.
    let at = |max| ProxyConfig {
        max_elements_per_service: max,
        service_counters: ServiceCounters::All,
        ..ProxyConfig::default()
    };
    assert!(build(at(spent), std::slice::from_ref(&svc), &slices).problems.is_empty());
    let refused = build(at(spent - 1), std::slice::from_ref(&svc), &slices);
    assert!(refused.model.services.is_empty() && refused.problems[0].reason == "TooManyElements");
}
