use super::*;
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{Cidr, ProxyConfig, build_model};

/// Services (a third dual-stack, so that the split falls among the IPv4 ports), some with
/// NodePorts and external IPs, whose endpoints share pods (so that shared elements cross the
/// split), and a few without endpoints.
fn model(n: usize) -> ProxyModel {
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for i in 0..n {
        let name = format!("svc-{i}");
        services.push(Service {
            namespace: "ns".into(),
            name: name.clone(),
            service_type: if i % 7 == 0 { "NodePort".into() } else { String::new() },
            cluster_ips: std::iter::once(format!("172.30.{}.{}", i / 250, i % 250 + 1))
                .chain((i % 3 == 0).then(|| format!("fd00::{:x}", i + 1)))
                .collect(),
            external_ips: if i % 11 == 0 { vec![format!("192.0.2.{}", i % 200 + 1)] } else { Vec::new() },
            ports: vec![ServicePortSpec {
                name: "http".into(),
                protocol: if i % 5 == 0 { "UDP".into() } else { "TCP".into() },
                port: 80,
                node_port: (i % 7 == 0).then_some(30000 + (i % 2000) as i32),
            }],
            ..Service::default()
        });
        if i % 13 == 0 {
            continue;
        }
        for family in ["IPv4", "IPv6"] {
            let addr = |k: usize| match family {
                "IPv4" => format!("10.1.{}.{}", (i * 3 + k) % 40, k + 1),
                _ => format!("fd01::{:x}", (i * 3 + k) % 2000 + 1),
            };
            slices.push(EndpointSlice {
                namespace: "ns".into(),
                name: format!("{name}-{family}"),
                service_name: name.clone(),
                address_type: family.into(),
                ports: vec![EndpointPort {
                    name: "http".into(),
                    protocol: services[i].ports[0].protocol.clone(),
                    port: Some(8080),
                }],
                endpoints: (0..1 + i % 4)
                    .map(|k| Endpoint { addresses: vec![addr(k)], ..Endpoint::default() })
                    .collect(),
                trigger_time: None,
            });
        }
    }
    let node = Node {
        name: "n".into(),
        addresses: vec![("InternalIP".into(), "192.168.0.2".into()), ("InternalIP".into(), "fd02::2".into())],
        ..Node::default()
    };
    let config = ProxyConfig {
        cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap(), Cidr::parse_tolerant("fd01::/64").unwrap()],
        ..ProxyConfig::default()
    };
    let out = build_model(config, "n", Some(&node), &[], &services, &slices);
    out.model
}

#[test]
fn two_threads_render_what_one_renders() {
    let model = model(3000);
    let opts = RenderOptions::default();
    let (one, one_counts) = render_split(&model, &opts, true, false);
    let (two, two_counts) = render_split(&model, &opts, true, true);
    assert_eq!(one, two);
    assert_eq!(one_counts.shared, two_counts.shared);
    assert_eq!(one_counts.classes, two_counts.classes);
    assert_eq!(one_counts.maps, two_counts.maps);
    assert!(one_counts.shared.values().any(|m| m.len() > 0), "the model shares elements");
    assert!(one.sets.values().map(|s| s.elements.len()).sum::<usize>() > 10_000);
}
