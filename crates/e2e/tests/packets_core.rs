//! Real connections through a programmed node: which pod answers, and which source it sees.
//!
//! Topology: one node (node1) with pods pod-a, pod-b, pod-c and a client pod on its bridge
//! (10.244.1.0/24, fd00:10:244:1::/64), and an external host on the LAN.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use verdict_e2e::fixtures::{self, service, slice};
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::topology::{self, Cluster, ECHO_PORT};
use verdict_e2e::{dataplane, require_kernel};
use verdict_model::source::{EndpointSlice, Service};
use verdict_model::{BuildOutput, Cidr, ProxyConfig, build_model};

const T: Duration = Duration::from_secs(1);

fn cluster(tag: &str) -> Cluster {
    topology::build(tag, &[&["pod-a", "pod-b", "pod-c", "client"]], Path::new(env!("CARGO_BIN_EXE_verdict-echo")))
        .unwrap()
}

/// Programs node1 with these Services (cluster CIDRs of the topology, node1's LAN addresses).
fn program(c: &Cluster, services: &[Service], slices: &[EndpointSlice]) {
    let node = &c.nodes[0];
    let n = fixtures::node(&[&node.ipv4.to_string(), &node.ipv6.to_string()]);
    let n = verdict_model::source::Node { name: node.name.clone(), ..n };
    let config = ProxyConfig {
        cluster_cidrs: vec![
            Cidr::parse_tolerant(topology::CLUSTER_CIDR_V4).unwrap(),
            Cidr::parse_tolerant(topology::CLUSTER_CIDR_V6).unwrap(),
        ],
        ..ProxyConfig::default()
    };
    let BuildOutput { model, problems } = build_model(config, &node.name, Some(&n), &[], services, slices);
    assert!(problems.is_empty(), "{problems:?}");
    dataplane::program(&node.ns, &model);
}

fn pods(c: &Cluster, names: &[&str], v6: bool) -> Vec<String> {
    names.iter().map(|n| c.pod(n).ip(v6).to_string()).collect()
}

fn slice_of(c: &Cluster, svc: &str, proto: &str, names: &[&str], v6: bool) -> EndpointSlice {
    let ips = pods(c, names, v6);
    let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
    slice("default", svc, if v6 { "IPv6" } else { "IPv4" }, proto, ECHO_PORT as i32, &ips, "node1")
}

fn count(outcomes: &[Outcome]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for o in outcomes {
        let key = match o {
            Outcome::Reply(r) => r.backend.clone(),
            other => format!("{other:?}"),
        };
        *m.entry(key).or_default() += 1;
    }
    m
}

#[test]
fn clusterip_tcp_reaches_every_endpoint_and_keeps_the_pod_source() {
    require_kernel!();
    let c = cluster("cip");
    program(
        &c,
        &[service("default", "web", &["172.30.0.10"], "TCP", 80, None)],
        &[slice_of(&c, "web", "TCP", &["pod-a", "pod-b", "pod-c"], false)],
    );
    let client = c.pod("client");
    let addr: SocketAddr = "172.30.0.10:80".parse().unwrap();
    let outcomes: Vec<Outcome> = client.ns.run(|| (0..60).map(|_| probe::tcp(addr, T)).collect());
    let counts = count(&outcomes);
    assert_eq!(counts.keys().collect::<Vec<_>>(), ["pod-a", "pod-b", "pod-c"], "60 connections: {counts:?}");
    assert!(
        outcomes.iter().all(|o| o.reply().is_some_and(|r| r.peer == client.ip(false))),
        "pod-to-ClusterIP must keep the pod's source address"
    );
}

#[test]
fn clusterip_udp_reaches_every_endpoint() {
    require_kernel!();
    let c = cluster("udp");
    program(
        &c,
        &[service("default", "dns", &["172.30.0.53"], "UDP", 53, None)],
        &[slice_of(&c, "dns", "UDP", &["pod-a", "pod-b", "pod-c"], false)],
    );
    let addr: SocketAddr = "172.30.0.53:53".parse().unwrap();
    let outcomes: Vec<Outcome> = c.pod("client").ns.run(|| (0..60).map(|_| probe::udp(addr, T)).collect());
    let counts = count(&outcomes);
    assert_eq!(counts.keys().collect::<Vec<_>>(), ["pod-a", "pod-b", "pod-c"], "60 queries: {counts:?}");
}

#[test]
fn clusterip_sctp() {
    require_kernel!();
    if !probe::sctp_available() {
        eprintln!("\n*** SKIPPED clusterip_sctp: this kernel has no SCTP (socket(IPPROTO_SCTP) failed) ***\n");
        return;
    }
    let c = cluster("sctp");
    program(
        &c,
        &[service("default", "sig", &["172.30.0.70"], "SCTP", 7000, None)],
        &[slice_of(&c, "sig", "SCTP", &["pod-a", "pod-b", "pod-c"], false)],
    );
    let addr: SocketAddr = "172.30.0.70:7000".parse().unwrap();
    let outcomes: Vec<Outcome> = c.pod("client").ns.run(|| (0..60).map(|_| probe::sctp(addr, T)).collect());
    let counts = count(&outcomes);
    assert_eq!(counts.keys().collect::<Vec<_>>(), ["pod-a", "pod-b", "pod-c"], "60 associations: {counts:?}");
}

#[test]
fn ipv6_clusterip() {
    require_kernel!();
    let c = cluster("v6");
    program(
        &c,
        &[service("default", "web6", &["fd00:10:96::10"], "TCP", 80, None)],
        &[slice_of(&c, "web6", "TCP", &["pod-a", "pod-b", "pod-c"], true)],
    );
    let client = c.pod("client");
    let addr: SocketAddr = "[fd00:10:96::10]:80".parse().unwrap();
    let outcomes: Vec<Outcome> = client.ns.run(|| (0..60).map(|_| probe::tcp(addr, T)).collect());
    let counts = count(&outcomes);
    assert_eq!(counts.keys().collect::<Vec<_>>(), ["pod-a", "pod-b", "pod-c"], "{counts:?}");
    assert!(outcomes.iter().all(|o| o.reply().is_some_and(|r| r.peer == client.ip(true))));
}

#[test]
fn nodeport_from_outside_reaches_an_endpoint_masqueraded() {
    require_kernel!();
    let c = cluster("np");
    program(
        &c,
        &[service("default", "web", &["172.30.0.10"], "TCP", 80, Some(30080))],
        &[slice_of(&c, "web", "TCP", &["pod-a", "pod-b", "pod-c"], false)],
    );
    let node = &c.nodes[0];
    let addr = SocketAddr::new(IpAddr::V4(node.ipv4), 30080);
    let outcomes: Vec<Outcome> = c.external.run(|| (0..30).map(|_| probe::tcp(addr, T)).collect());
    let counts = count(&outcomes);
    assert!(counts.keys().all(|k| k.starts_with("pod-")), "{counts:?}");
    assert!(counts.len() >= 2, "30 NodePort connections should spread: {counts:?}");
    for o in &outcomes {
        assert_eq!(
            o.reply().unwrap().peer,
            IpAddr::V4(node.bridge_v4),
            "the endpoint must see the node's address, not the client's"
        );
    }
}

#[test]
fn clusterip_from_outside_the_cluster_cidr_is_masqueraded() {
    require_kernel!();
    let c = cluster("ext");
    program(
        &c,
        &[service("default", "web", &["172.30.0.10"], "TCP", 80, None)],
        &[slice_of(&c, "web", "TCP", &["pod-a"], false)],
    );
    let node = &c.nodes[0];
    // From the node itself (host network, source 192.168.50.11) ...
    let from_node = node.ns.run(|| probe::tcp("172.30.0.10:80".parse().unwrap(), T));
    assert_eq!(from_node.reply().map(|r| r.peer), Some(IpAddr::V4(node.bridge_v4)), "{from_node:?}");
    // ... and from an external host routed through the node.
    c.external.ip(&["route", "add", "172.30.0.0/16", "via", &node.ipv4.to_string()]).unwrap();
    let from_ext = c.external.run(|| probe::tcp("172.30.0.10:80".parse().unwrap(), T));
    assert_eq!(from_ext.reply().map(|r| r.peer), Some(IpAddr::V4(node.bridge_v4)), "{from_ext:?}");
}

#[test]
fn service_without_endpoints_is_refused_fast_everywhere() {
    require_kernel!();
    let c = cluster("noep");
    program(
        &c,
        &[
            service("default", "empty", &["172.30.0.20"], "TCP", 80, Some(30090)),
            service("default", "empty-udp", &["172.30.0.21"], "UDP", 53, None),
        ],
        &[],
    );
    let client = c.pod("client");
    // A reject, not a drop: the client's one-second timeout would report a timeout instead.
    assert_eq!(client.ns.run(|| probe::tcp("172.30.0.20:80".parse().unwrap(), T)), Outcome::Refused);
    assert_eq!(client.ns.run(|| probe::udp("172.30.0.21:53".parse().unwrap(), T)), Outcome::Refused);
    let np = SocketAddr::new(IpAddr::V4(c.nodes[0].ipv4), 30090);
    assert_eq!(c.external.run(|| probe::tcp(np, T)), Outcome::Refused);
}

#[test]
fn wrong_port_or_protocol_on_a_clusterip_is_refused() {
    require_kernel!();
    let c = cluster("port");
    program(
        &c,
        &[service("default", "web", &["172.30.0.10"], "TCP", 80, None)],
        &[slice_of(&c, "web", "TCP", &["pod-a"], false)],
    );
    let client = c.pod("client");
    assert!(client.ns.run(|| probe::tcp("172.30.0.10:80".parse().unwrap(), T)).reply().is_some());
    assert_eq!(client.ns.run(|| probe::tcp("172.30.0.10:81".parse().unwrap(), T)), Outcome::Refused);
    assert_eq!(client.ns.run(|| probe::udp("172.30.0.10:80".parse().unwrap(), T)), Outcome::Refused);
}

#[test]
fn hairpin_reaches_itself_masqueraded() {
    require_kernel!();
    let c = cluster("hair");
    program(
        &c,
        &[service("default", "solo", &["172.30.0.11"], "TCP", 80, None)],
        &[slice_of(&c, "solo", "TCP", &["pod-a"], false)],
    );
    let a = c.pod("pod-a");
    let got = a.ns.run(|| probe::tcp("172.30.0.11:80".parse().unwrap(), T));
    let reply = got.reply().unwrap_or_else(|| panic!("hairpin connection failed: {got:?}"));
    assert_eq!(reply.backend, "pod-a");
    assert_eq!(reply.peer, IpAddr::V4(c.nodes[0].bridge_v4), "hairpin traffic must be masqueraded");
}
