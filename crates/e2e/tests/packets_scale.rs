//! 10,000 Services programmed in one transaction, and a spread of them answered by the right
//! pods. (No timing assertion: speed is measured by `cargo xtask bench`.)

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use verdict_e2e::fixtures::{service, slice};
use verdict_e2e::probe;
use verdict_e2e::topology::{self, ECHO_PORT};
use verdict_e2e::{dataplane, require_kernel};
use verdict_model::{Cidr, ProxyConfig, build_model};

const SERVICES: usize = 10_000;

fn cluster_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(172, 30 + (i / 65536) as u8, ((i / 256) % 256) as u8, (i % 256) as u8)
}

#[test]
fn ten_thousand_services_program_and_answer() {
    require_kernel!();
    let names = ["pod-a", "pod-b", "pod-c"];
    let c = topology::build(
        "scale",
        &[&["pod-a", "pod-b", "pod-c", "client"]],
        Path::new(env!("CARGO_BIN_EXE_verdict-echo")),
    )
    .unwrap();
    let node = &c.nodes[0];
    let mut services = Vec::with_capacity(SERVICES);
    let mut slices = Vec::with_capacity(SERVICES);
    for i in 0..SERVICES {
        let name = format!("svc-{i}");
        services.push(service("scale", &name, &[&cluster_ip(i).to_string()], "TCP", 80, None));
        // Service i is served by pod i % 3 only, so each answer tells whether the right
        // Service entry was hit.
        let pod = c.pod(names[i % 3]).ipv4.to_string();
        slices.push(slice("scale", &name, "IPv4", "TCP", ECHO_PORT as i32, &[&pod], "node1"));
    }
    let n = verdict_model::source::Node {
        name: "node1".into(),
        addresses: vec![("InternalIP".into(), node.ipv4.to_string())],
        ..Default::default()
    };
    let config = ProxyConfig {
        cluster_cidrs: vec![Cidr::parse_tolerant(topology::CLUSTER_CIDR_V4).unwrap()],
        ..ProxyConfig::default()
    };
    let built = build_model(config, "node1", Some(&n), &[], &services, &slices);
    assert!(built.problems.is_empty());
    let committed = dataplane::program(&node.ns, &built.model);
    assert_eq!(committed.sets["service-ips"].elements.len(), SERVICES);

    let client = c.pod("client");
    let sample: Vec<usize> =
        [0, 1, 2, SERVICES / 2, SERVICES - 1].into_iter().chain((0..25).map(|k| (k * 7919 + 13) % SERVICES)).collect();
    for i in sample {
        let addr = SocketAddr::new(IpAddr::V4(cluster_ip(i)), 80);
        let got = client.ns.run(|| probe::tcp(addr, Duration::from_secs(2)));
        let reply = got.reply().unwrap_or_else(|| panic!("Service {i} ({addr}) did not answer: {got:?}"));
        assert_eq!(reply.backend, names[i % 3], "Service {i} reached the wrong pod");
    }
}
