//! `--nodeport-addresses` with real traffic: with `all`, a NodePort answers on an address the
//! node gained after its table was programmed, with no resync (the `fib daddr type local`
//! rule); with `primary`, only on the Node's primary IPs; a list without a CIDR of a family
//! takes every address of that family.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use verdict_e2e::fixtures::{service, slice};
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::topology::{self, Cluster, ECHO_PORT};
use verdict_e2e::{dataplane, fixtures, require_kernel};
use verdict_model::{BuildOutput, Cidr, NodePortAddresses, ProxyConfig, build_model};

const T: Duration = Duration::from_secs(1);
const NODE_PORT: u16 = 30080;
/// On the LAN, so that the external host reaches it directly; not in the Node object.
const LATE_V4: &str = "192.168.50.77";
const LATE_V6: &str = "2001:db8:50::77";

/// node1 programmed once, with a dual-stack NodePort Service whose endpoint is pod-a.
fn programmed(tag: &str, nodeport_addresses: &[&str]) -> Cluster {
    let echo = Path::new(env!("CARGO_BIN_EXE_verdict-echo"));
    let c = topology::build(tag, &[&["pod-a"]], echo).unwrap();
    let node = &c.nodes[0];
    let n = fixtures::node(&[&node.ipv4.to_string(), &node.ipv6.to_string()]);
    let n = verdict_model::source::Node { name: node.name.clone(), ..n };
    let config = ProxyConfig {
        cluster_cidrs: vec![
            Cidr::parse_tolerant(topology::CLUSTER_CIDR_V4).unwrap(),
            Cidr::parse_tolerant(topology::CLUSTER_CIDR_V6).unwrap(),
        ],
        nodeport_addresses: NodePortAddresses::parse(nodeport_addresses).unwrap(),
        ..ProxyConfig::default()
    };
    let svc = service("default", "web", &["172.30.0.10", "fd00:10:96::10"], "TCP", 80, Some(NODE_PORT.into()));
    let pod = c.pod("pod-a");
    let slices = [(false, "IPv4"), (true, "IPv6")].map(|(v6, family)| {
        slice("default", "web", family, "TCP", ECHO_PORT.into(), &[&pod.ip(v6).to_string()], "node1")
    });
    let BuildOutput { model, problems } = build_model(config, &node.name, Some(&n), &[], &[svc], &slices);
    assert!(problems.is_empty(), "{problems:?}");
    dataplane::program(&node.ns, &model);
    c
}

/// Gives node1 the late addresses, after its table was programmed.
fn add_late_addresses(c: &Cluster) {
    let ns = &c.nodes[0].ns;
    ns.ip(&["addr", "add", &format!("{LATE_V4}/24"), "dev", "eth0"]).unwrap();
    ns.ip(&["-6", "addr", "add", &format!("{LATE_V6}/64"), "dev", "eth0", "nodad"]).unwrap();
}

fn from_outside(c: &Cluster, addr: &str) -> Outcome {
    let to = SocketAddr::new(addr.parse::<IpAddr>().unwrap(), NODE_PORT);
    c.external.run(|| probe::tcp(to, T))
}

fn answered_by_pod_a(got: &Outcome) -> bool {
    got.reply().is_some_and(|r| r.backend == "pod-a")
}

#[test]
fn all_answers_on_an_address_added_after_programming() {
    require_kernel!();
    let c = programmed("npall", &["all"]);
    add_late_addresses(&c);
    for addr in [LATE_V4, LATE_V6] {
        let got = from_outside(&c, addr);
        assert!(answered_by_pod_a(&got), "NodePort on the late address {addr}: {got:?}");
    }
    let node = &c.nodes[0];
    let got = from_outside(&c, &node.ipv4.to_string());
    assert!(answered_by_pod_a(&got), "NodePort on the primary address: {got:?}");
}

#[test]
fn primary_does_not_answer_on_an_address_added_after_programming() {
    require_kernel!();
    let c = programmed("nppri", &["primary"]);
    add_late_addresses(&c);
    // The setup works: the primary addresses answer ...
    let node = &c.nodes[0];
    for addr in [node.ipv4.to_string(), node.ipv6.to_string()] {
        let got = from_outside(&c, &addr);
        assert!(answered_by_pod_a(&got), "NodePort on the primary address {addr}: {got:?}");
    }
    // ... and the late ones are plain node addresses, with nothing listening on the port.
    for addr in [LATE_V4, LATE_V6] {
        assert_eq!(from_outside(&c, addr), Outcome::Refused, "NodePort on the late address {addr}");
    }
}

#[test]
fn an_ipv4_only_list_leaves_ipv6_nodeports_on_every_address() {
    require_kernel!();
    // Upstream decides per family: a list with no IPv6 CIDR is `::/0` for IPv6.
    let c = programmed("npv4only", &["192.168.50.0/24"]);
    add_late_addresses(&c);
    let node = &c.nodes[0];
    for addr in [node.ipv4.to_string(), node.ipv6.to_string(), LATE_V6.to_string()] {
        let got = from_outside(&c, &addr);
        assert!(answered_by_pod_a(&got), "NodePort on {addr}: {got:?}");
    }
}
