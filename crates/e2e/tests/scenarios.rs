//! The 40 acceptance scenarios of upstream kube-proxy's nftables mode
//! (`shared/reference/upstream-kube-proxy-nftables.md` §4.4), each as real connections through
//! a programmed node and, for the same connection, `verdict explain` on the same table.
//! Numbers in test names are the scenario numbers. Topology and addresses: see
//! `verdict_e2e::scenario`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::require_kernel;
use verdict_e2e::scenario::{ALTERNATE_NODE_IP, Cond, Eps, Expect, From, Lab, NODE_PORT, Svc};
use verdict_model::{Cidr, DetectLocal, NodePortAddresses};
use verdict_nft::explain::Summary;

use Cond::*;
use From::*;

fn lab(tag: &str) -> Lab {
    Lab::new(tag, Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab")
}

const NODE1: &str = "192.168.50.11";

fn node_port(addr: &str) -> String {
    format!("{addr}:{NODE_PORT}")
}

/// `web`: ClusterIP 172.30.0.41, port 80.
fn web() -> Svc {
    Svc::new("web", &["172.30.0.41"]).port("http", "TCP", 80)
}

fn web_eps(lab: &Lab, pods: &[(&str, Cond)]) -> Eps {
    pods.iter().fold(Eps::v4("web").port("http", "TCP", 8080), |eps, (pod, cond)| eps.pod(lab, pod, *cond))
}

/// `lb`: ClusterIP 172.30.0.43, external IP 192.168.99.11, NodePort 30001, load balancer
/// 1.2.3.4; TCP port 80.
fn lb(name: &str) -> Svc {
    Svc::new(name, &["172.30.0.43"])
        .node_port("http", "TCP", 80, NODE_PORT)
        .external_ips(&["192.168.99.11"])
        .load_balancer(&["1.2.3.4"])
}

fn eps(lab: &Lab, service: &str, pods: &[(&str, Cond)]) -> Eps {
    pods.iter().fold(Eps::v4(service).port("http", "TCP", 8080), |eps, (pod, cond)| eps.pod(lab, pod, *cond))
}

#[test]
fn s01_pod_to_clusterip_is_dnated_and_keeps_its_source() {
    require_kernel!();
    let lab = lab("s01");
    let rs = lab.program_objects(&[web()], &[web_eps(&lab, &[("a1", Ready)])]);
    lab.check(&rs, Pod("c1"), "172.30.0.41:80", Expect::pods(&["a1"], false));
}

#[test]
fn s02_endpoint_reaching_its_own_service_is_masqueraded() {
    require_kernel!();
    let lab = lab("s02");
    let rs = lab.program_objects(&[web()], &[web_eps(&lab, &[("a1", Ready)])]);
    lab.check(&rs, Pod("a1"), "172.30.0.41:80", Expect::pods(&["a1"], true));
}

/// `multi`: 172.30.0.42 with http 80, https 443 -> 9090, and dns 53 on TCP (-> 9090), UDP and
/// SCTP (-> 8080); endpoints a1 and b1.
fn multi(lab: &Lab) -> (Svc, Eps) {
    let svc = Svc::new("multi", &["172.30.0.42"])
        .port("http", "TCP", 80)
        .port("https", "TCP", 443)
        .port("dns-tcp", "TCP", 53)
        .port("dns-udp", "UDP", 53)
        .port("dns-sctp", "SCTP", 53);
    let eps = Eps::v4("multi")
        .port("http", "TCP", 8080)
        .port("https", "TCP", 9090)
        .port("dns-tcp", "TCP", 9090)
        .port("dns-udp", "UDP", 8080)
        .port("dns-sctp", "SCTP", 8080)
        .pod(lab, "a1", Ready)
        .pod(lab, "b1", Ready);
    (svc, eps)
}

#[test]
fn s03_a_named_port_uses_its_own_target_port() {
    require_kernel!();
    let lab = lab("s03");
    let (svc, eps) = multi(&lab);
    let rs = lab.program_objects(&[svc], &[eps]);
    let expect = Expect::Pods { pods: vec!["a1", "b1"], port: 9090, masquerade: false };
    lab.check(&rs, Pod("c1"), "172.30.0.42:443", expect);
}

#[test]
fn s04_tcp_udp_and_sctp_on_one_port_number_are_kept_apart() {
    require_kernel!();
    let lab = lab("s04");
    let (svc, eps) = multi(&lab);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, Pod("c1"), "172.30.0.42:53", Expect::Pods { pods: vec!["a1", "b1"], port: 9090, masquerade: false });
    lab.check(&rs, Pod("c1"), "172.30.0.42:53/udp", Expect::pods(&["a1", "b1"], false));
    if probe::sctp_available() {
        lab.check(&rs, Pod("c1"), "172.30.0.42:53/sctp", Expect::pods(&["a1", "b1"], false));
    } else {
        eprintln!("SKIP the SCTP part of s04: this kernel cannot open SCTP sockets");
    }
}

#[test]
fn s05_a_known_port_over_another_protocol_is_rejected() {
    require_kernel!();
    let lab = lab("s05");
    let (svc, eps) = multi(&lab);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, Pod("c1"), "172.30.0.42:80/udp", Expect::Reject);
}

#[test]
fn s06_an_unknown_port_of_a_clusterip_is_rejected() {
    require_kernel!();
    let lab = lab("s06");
    let rs = lab.program_objects(&[web()], &[web_eps(&lab, &[("a1", Ready)])]);
    lab.check(&rs, Pod("c1"), "172.30.0.41:443", Expect::Reject);
}

#[test]
fn s07_an_unallocated_address_in_the_service_cidr_is_dropped() {
    require_kernel!();
    let lab = lab("s07");
    let rs = lab.program_objects(&[web()], &[web_eps(&lab, &[("a1", Ready)])]);
    lab.check(&rs, Pod("c1"), "172.30.0.50:80", Expect::Drop);
}

#[test]
fn s08_a_service_without_endpoints_rejects_on_every_address() {
    require_kernel!();
    let lab = lab("s08");
    let rs = lab.program_objects(&[lb("lb")], &[]);
    for from in [Pod("c1"), External] {
        for to in ["172.30.0.43:80", "192.168.99.11:80", &node_port(NODE1), "1.2.3.4:80"] {
            lab.check(&rs, from, to, Expect::Reject);
        }
    }
}

/// `lbsr`: load balancer IPs 1.2.3.4 and 5.6.7.8 limited to `ranges`, NodePort 30001,
/// endpoint a1.
fn source_ranged(lab: &Lab, ranges: &[&str]) -> (Svc, Eps) {
    let svc = Svc::new("lbsr", &["172.30.0.44"])
        .node_port("http", "TCP", 80, NODE_PORT)
        .load_balancer(&["1.2.3.4", "5.6.7.8"])
        .source_ranges(ranges);
    (svc, eps(lab, "lbsr", &[("a1", Ready)]))
}

const RANGES: &[&str] = &["192.168.50.0/24", "203.0.113.0/25"];

#[test]
fn s09_a_client_inside_the_source_ranges_reaches_the_load_balancer() {
    require_kernel!();
    let lab = lab("s09");
    let (svc, eps) = source_ranged(&lab, RANGES);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, ExternalAt("203.0.113.2"), "1.2.3.4:80", Expect::pods(&["a1"], true));
}

#[test]
fn s09b_source_ranges_are_parsed_tolerantly() {
    require_kernel!();
    let lab = lab("s09b");
    let (svc, eps) = source_ranged(&lab, &[" 192.168.050.0/24", "203.0.113.000/025 "]);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, ExternalAt("203.0.113.2"), "5.6.7.8:80", Expect::pods(&["a1"], true));
    lab.check(&rs, ExternalAt("203.0.113.130"), "5.6.7.8:80", Expect::Drop);
}

#[test]
fn s10_a_client_outside_the_source_ranges_is_dropped() {
    require_kernel!();
    let lab = lab("s10");
    let (svc, eps) = source_ranged(&lab, RANGES);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, ExternalAt("203.0.113.130"), "1.2.3.4:80", Expect::Drop);
}

#[test]
fn s11_pods_are_subject_to_the_source_ranges_too() {
    require_kernel!();
    let lab = lab("s11");
    let (svc, eps) = source_ranged(&lab, RANGES);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, Pod("c1"), "1.2.3.4:80", Expect::Drop);
}

#[test]
fn s12_the_node_is_allowed_when_a_range_contains_its_address() {
    require_kernel!();
    let lab = lab("s12");
    let (svc, eps) = source_ranged(&lab, RANGES);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, Node, "1.2.3.4:80", Expect::pods(&["a1"], true));
}

#[test]
fn s13_the_load_balancer_ip_itself_is_an_allowed_source() {
    require_kernel!();
    let mut lab = lab("s13");
    lab.add_node_address("1.2.3.4/32").unwrap();
    let (svc, eps) = source_ranged(&lab, RANGES);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, NodeAt("1.2.3.4"), "1.2.3.4:80", Expect::pods(&["a1"], true));
}

#[test]
fn s14_nodeports_bypass_the_source_ranges() {
    require_kernel!();
    let lab = lab("s14");
    let (svc, eps) = source_ranged(&lab, RANGES);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, ExternalAt("203.0.113.130"), &node_port(NODE1), Expect::pods(&["a1"], true));
}

/// `np`: NodePort 30001 with endpoints b1 (remote) and a2 (local).
fn nodeport(lab: &Lab) -> (Svc, Eps) {
    let svc = Svc::new("np", &["172.30.0.45"]).node_port("http", "TCP", 80, NODE_PORT);
    (svc, eps(lab, "np", &[("b1", Ready), ("a2", Ready)]))
}

#[test]
fn s15_external_to_nodeport_reaches_every_endpoint_masqueraded() {
    require_kernel!();
    let lab = lab("s15");
    let (svc, eps) = nodeport(&lab);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, External, &node_port(NODE1), Expect::pods(&["b1", "a2"], true));
}

#[test]
fn s16_the_node_reaches_its_own_nodeport_masqueraded() {
    require_kernel!();
    let lab = lab("s16");
    let (svc, eps) = nodeport(&lab);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, Node, &node_port(NODE1), Expect::pods(&["b1", "a2"], true));
}

#[test]
fn s17_a_secondary_node_address_takes_no_nodeport_by_default() {
    require_kernel!();
    let lab = lab("s17");
    let (svc, eps) = nodeport(&lab);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, External, &node_port(ALTERNATE_NODE_IP), Expect::NotHandled);
}

#[test]
fn s18_nodeport_addresses_select_the_secondary_address() {
    require_kernel!();
    let lab = lab("s18");
    let (svc, eps) = nodeport(&lab);
    let mut config = lab.config();
    let cidrs = ["192.168.50.0/24", "192.168.51.0/24"].map(|c| Cidr::parse_tolerant(c).unwrap());
    config.nodeport_addresses = NodePortAddresses::cidrs(cidrs.to_vec());
    let rs = lab.program(&lab.model(config, &[svc], &[eps]));
    lab.check(&rs, External, &node_port(ALTERNATE_NODE_IP), Expect::pods(&["b1", "a2"], true));
}

#[test]
fn s19_ipv6_nodeport() {
    require_kernel!();
    let lab = lab("s19");
    let svc = Svc::new("np6", &["fd00:172:30::45"]).node_port("http", "TCP", 80, NODE_PORT);
    let eps = Eps::v6("np6").port("http", "TCP", 8080).pod(&lab, "b1", Ready).pod(&lab, "a2", Ready);
    let rs = lab.program_objects(&[svc], &[eps]);
    lab.check(&rs, External, &format!("[2001:db8:50::11]:{NODE_PORT}"), Expect::pods(&["b1", "a2"], true));
}

/// `lb` with `externalTrafficPolicy: Local`.
fn local_lb() -> Svc {
    lb("local").external_local(30000)
}

#[test]
fn s20_external_traffic_local_reaches_only_local_endpoints_and_keeps_the_client() {
    require_kernel!();
    let lab = lab("s20");
    let rs = lab.program_objects(&[local_lb()], &[eps(&lab, "local", &[("b1", Ready), ("a2", Ready)])]);
    for to in ["1.2.3.4:80", "192.168.99.11:80", &node_port(NODE1)] {
        lab.check(&rs, External, to, Expect::pods(&["a2"], false));
    }
}

#[test]
fn s21_pods_short_circuit_external_traffic_local_to_every_endpoint() {
    require_kernel!();
    let lab = lab("s21");
    let rs = lab.program_objects(&[local_lb()], &[eps(&lab, "local", &[("b1", Ready), ("a2", Ready)])]);
    for to in ["1.2.3.4:80", "192.168.99.11:80", &node_port(NODE1)] {
        lab.check(&rs, Pod("c1"), to, Expect::pods(&["b1", "a2"], false));
    }
}

#[test]
fn s22_the_node_reaches_every_endpoint_of_an_external_local_service_masqueraded() {
    require_kernel!();
    let lab = lab("s22");
    let rs = lab.program_objects(&[local_lb()], &[eps(&lab, "local", &[("b1", Ready), ("a2", Ready)])]);
    lab.check(&rs, Node, "1.2.3.4:80", Expect::pods(&["b1", "a2"], true));
}

#[test]
fn s23_external_traffic_local_without_a_local_endpoint_is_dropped() {
    require_kernel!();
    let lab = lab("s23");
    let model = lab.model(lab.config(), &[local_lb()], &[eps(&lab, "local", &[("b1", Ready)])]);
    assert_eq!(model.no_local_endpoints(), (0, 1), "no_local_endpoints_total{{traffic_policy=external}}");
    let rs = lab.program(&model);
    lab.check(&rs, External, "1.2.3.4:80", Expect::Drop);
}

#[test]
fn s24_pods_still_reach_remote_endpoints_of_an_external_local_service() {
    require_kernel!();
    let lab = lab("s24");
    let rs = lab.program_objects(&[local_lb()], &[eps(&lab, "local", &[("b1", Ready)])]);
    for to in ["1.2.3.4:80", "192.168.99.11:80"] {
        lab.check(&rs, Pod("c1"), to, Expect::pods(&["b1"], false));
    }
}

#[test]
fn s25_external_traffic_cluster_masquerades_all_but_pod_to_clusterip() {
    require_kernel!();
    let lab = lab("s25");
    let rs = lab.program_objects(&[lb("lb")], &[eps(&lab, "lb", &[("b1", Ready), ("a2", Ready)])]);
    lab.check(&rs, Pod("c1"), "172.30.0.43:80", Expect::pods(&["b1", "a2"], false));
    lab.check(&rs, Pod("c1"), "1.2.3.4:80", Expect::pods(&["b1", "a2"], true));
    lab.check(&rs, External, "1.2.3.4:80", Expect::pods(&["b1", "a2"], true));
    lab.check(&rs, External, &node_port(NODE1), Expect::pods(&["b1", "a2"], true));
}

/// `itl`: `internalTrafficPolicy: Local`, with a NodePort and a load balancer IP.
fn internal_local() -> Svc {
    Svc::new("itl", &["172.30.0.47"])
        .node_port("http", "TCP", 80, NODE_PORT)
        .load_balancer(&["1.2.3.4"])
        .internal_local()
}

#[test]
fn s26_internal_traffic_local_reaches_only_the_local_endpoint() {
    require_kernel!();
    let lab = lab("s26");
    let rs =
        lab.program_objects(&[internal_local()], &[eps(&lab, "itl", &[("a1", Ready), ("b1", Ready), ("b2", Ready)])]);
    lab.check(&rs, Pod("c1"), "172.30.0.47:80", Expect::pods(&["a1"], false));
}

#[test]
fn s27_internal_traffic_local_without_a_local_endpoint_is_dropped() {
    require_kernel!();
    let lab = lab("s27");
    let model = lab.model(lab.config(), &[internal_local()], &[eps(&lab, "itl", &[("b1", Ready), ("b2", Ready)])]);
    assert_eq!(model.no_local_endpoints(), (1, 0), "no_local_endpoints_total{{traffic_policy=internal}}");
    let rs = lab.program(&model);
    lab.check(&rs, Pod("c1"), "172.30.0.47:80", Expect::Drop);
}

#[test]
fn s28_internal_traffic_local_does_not_apply_to_nodeports_and_load_balancers() {
    require_kernel!();
    let lab = lab("s28");
    let rs =
        lab.program_objects(&[internal_local()], &[eps(&lab, "itl", &[("a1", Ready), ("b1", Ready), ("b2", Ready)])]);
    lab.check(&rs, Pod("c1"), &node_port(NODE1), Expect::pods(&["a1", "b1", "b2"], true));
    lab.check(&rs, Pod("c1"), "1.2.3.4:80", Expect::pods(&["a1", "b1", "b2"], true));
}

#[test]
fn s29_external_to_an_internal_local_clusterip_is_local_and_masqueraded() {
    require_kernel!();
    let lab = lab("s29");
    let rs =
        lab.program_objects(&[internal_local()], &[eps(&lab, "itl", &[("a1", Ready), ("b1", Ready), ("b2", Ready)])]);
    lab.check(&rs, External, "172.30.0.47:80", Expect::pods(&["a1"], true));
}

#[test]
fn s30_terminating_endpoints_are_ignored_while_ready_ones_exist() {
    require_kernel!();
    let lab = lab("s30");
    let slice = eps(&lab, "web", &[("a1", Ready), ("a2", Ready), ("b1", Ready), ("b2", ServingTerminating)]).address(
        "10.244.2.99",
        "node2",
        TerminatingNotServing,
    );
    let slice = Eps(verdict_model::source::EndpointSlice { ports: web_eps(&lab, &[]).0.ports, ..slice.0 });
    let rs = lab.program_objects(&[web()], &[slice]);
    lab.check(&rs, Pod("c1"), "172.30.0.41:80", Expect::pods(&["a1", "a2", "b1"], false));
}

#[test]
fn s31_serving_terminating_endpoints_are_used_when_none_is_ready() {
    require_kernel!();
    let lab = lab("s31");
    let slice = eps(&lab, "lb", &[("a1", ServingTerminating), ("a2", ServingTerminating), ("b1", ServingTerminating)])
        .pod(&lab, "b2", TerminatingNotServing);
    let rs = lab.program_objects(&[lb("lb")], &[slice]);
    lab.check(&rs, Pod("c1"), "172.30.0.43:80", Expect::pods(&["a1", "a2", "b1"], false));
    lab.check(&rs, External, "1.2.3.4:80", Expect::pods(&["a1", "a2", "b1"], true));
}

#[test]
fn s32_external_local_falls_back_to_local_serving_terminating_endpoints() {
    require_kernel!();
    let lab = lab("s32");
    let slice = eps(&lab, "local", &[("a1", ServingTerminating), ("a2", ServingTerminating), ("b1", Ready)]);
    let rs = lab.program_objects(&[local_lb()], &[slice]);
    lab.check(&rs, External, "1.2.3.4:80", Expect::pods(&["a1", "a2"], false));
    lab.check(&rs, Pod("c1"), "172.30.0.43:80", Expect::pods(&["b1"], false));
}

#[test]
fn s33_no_ready_or_serving_endpoint_anywhere_rejects() {
    require_kernel!();
    let lab = lab("s33");
    let slice = eps(&lab, "lb", &[("a1", NotReady), ("b1", TerminatingNotServing)]);
    let rs = lab.program_objects(&[lb("lb")], &[slice]);
    lab.check(&rs, Pod("c1"), "172.30.0.43:80", Expect::Reject);
    lab.check(&rs, External, "1.2.3.4:80", Expect::Reject);
}

#[test]
fn s34_without_a_local_traffic_detector_clusterip_traffic_is_not_masqueraded() {
    require_kernel!();
    let lab = lab("s34");
    let config = verdict_model::ProxyConfig { detect_local: DetectLocal::None, ..lab.config() };
    let rs = lab.program(&lab.model(config, &[web()], &[web_eps(&lab, &[("a1", Ready)])]));
    lab.check(&rs, Node, "172.30.0.41:80", Expect::pods(&["a1"], false));
    lab.check(&rs, External, "172.30.0.41:80", Expect::pods(&["a1"], false));
}

#[test]
fn s35_masquerade_all_masquerades_pod_to_clusterip() {
    require_kernel!();
    let lab = lab("s35");
    let config = verdict_model::ProxyConfig { masquerade_all: true, ..lab.config() };
    let rs = lab.program(&lab.model(config, &[web()], &[web_eps(&lab, &[("a1", Ready), ("b1", Ready)])]));
    lab.check(&rs, Pod("c1"), "172.30.0.41:80", Expect::pods(&["a1", "b1"], true));
}

#[test]
fn s36_without_a_detector_pods_get_only_local_endpoints_of_external_local() {
    require_kernel!();
    let lab = lab("s36");
    let config = verdict_model::ProxyConfig { detect_local: DetectLocal::None, ..lab.config() };
    let model = lab.model(config, &[local_lb()], &[eps(&lab, "local", &[("b1", Ready), ("a2", Ready)])]);
    let rs = lab.program(&model);
    lab.check(&rs, Pod("c1"), "1.2.3.4:80", Expect::pods(&["a2"], false));
}

#[test]
fn s37_a_proxied_load_balancer_ingress_is_left_alone() {
    require_kernel!();
    let mut lab = lab("s37");
    lab.add_node_address("1.2.3.4/32").unwrap();
    let svc = Svc::new("proxied", &["172.30.0.49"]).node_port("http", "TCP", 80, NODE_PORT).proxied_ingress("1.2.3.4");
    let rs = lab.program_objects(&[svc], &[eps(&lab, "proxied", &[("a1", Ready)])]);
    lab.check(&rs, External, "1.2.3.4:80", Expect::NotHandled);
}

#[test]
fn s38_client_ip_affinity_sticks_until_the_timeout() {
    require_kernel!();
    let lab = lab("s38");
    let svc = Svc::new("aff", &["172.30.0.51"]).port("http", "TCP", 80).affinity(1);
    let rs = lab.program_objects(&[svc], &[eps(&lab, "aff", &[("a1", Ready), ("b1", Ready)])]);
    let summary = lab.explain(&rs, Pod("c1"), "172.30.0.51:80").summary();
    assert!(
        matches!(&summary, Summary::Endpoints { endpoints, masquerade } if endpoints.len() == 2 && !masquerade.contains(&true)),
        "explain: a first connection may reach either endpoint, unmasqueraded: {summary}"
    );
    let client = lab.cluster.pod("c1");
    let addr = "172.30.0.51:80".parse().unwrap();
    let round = || -> BTreeSet<String> {
        let outcomes: Vec<Outcome> =
            client.ns.run(|| (0..20).map(|_| probe::tcp(addr, Duration::from_secs(2))).collect());
        outcomes.iter().map(|o| o.reply().unwrap_or_else(|| panic!("failed: {o:?}")).backend.clone()).collect()
    };
    let mut chosen = BTreeSet::new();
    // Each round after a timeout picks anew, one of two: 32 rounds miss the other with odds
    // of 2^-31 (16 left 2^-15, luck a CI run can meet).
    for _ in 0..32 {
        let backends = round();
        assert_eq!(backends.len(), 1, "20 connections within the timeout must stick to one endpoint: {backends:?}");
        chosen.extend(backends);
        if chosen.len() == 2 {
            return;
        }
        // Past the 1 s timeout the client is forgotten and chooses again.
        std::thread::sleep(Duration::from_millis(1500));
    }
    panic!("after 32 timeouts the client still always reached {chosen:?}: affinity never expires");
}

/// One UDP flow from c1: a socket that keeps its source port, so every datagram belongs to
/// the same conntrack entry.
fn udp_flow(lab: &Lab, to: &str) -> std::net::UdpSocket {
    let c1 = lab.cluster.pod("c1");
    let to: std::net::SocketAddr = to.parse().unwrap();
    c1.ns.run(|| {
        let s = std::net::UdpSocket::bind((c1.ipv4, 0)).unwrap();
        s.connect(to).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s
    })
}

/// Sends one datagram on the flow and returns who answered.
fn ask(flow: &std::net::UdpSocket) -> String {
    flow.send(b"q").unwrap();
    let mut buf = [0u8; 256];
    let n = flow.recv(&mut buf).unwrap_or_else(|e| panic!("no UDP answer: {e}"));
    probe::parse_reply(&String::from_utf8_lossy(&buf[..n])).expect("an echo reply").backend
}

#[test]
fn s39_stale_udp_flows_are_deleted_and_live_ones_kept() {
    require_kernel!();
    let lab = lab("s39");
    let dns = || Svc::new("dns", &["172.30.0.53"]).port("dns", "UDP", 53);
    let slice = |pod| Eps::v4("dns").port("dns", "UDP", 8080).pod(&lab, pod, Ready);
    let before = lab.model(lab.config(), &[dns()], &[slice("a1")]);
    lab.program(&before);
    let stale = udp_flow(&lab, "172.30.0.53:53");
    assert_eq!(ask(&stale), "a1");

    let after = lab.model(lab.config(), &[dns()], &[slice("b1")]);
    lab.program(&after);
    let live = udp_flow(&lab, "172.30.0.53:53");
    assert_eq!(ask(&live), "b1", "a new flow reaches the new endpoint");
    assert_eq!(ask(&stale), "a1", "without cleanup the old flow sticks to the removed endpoint");

    let name = after.services.keys().next().unwrap().clone();
    let change = verdict_model::PortChange {
        old: before.services.get(&name).cloned(),
        new: after.services.get(&name).cloned(),
        name,
    };
    lab.cluster.nodes[0].ns.run(|| {
        use verdict_controller::sync::AfterSync;
        verdict_controller::conntrack::ConntrackCleaner::new().after_sync(&after, false, &[change]);
    });
    let entries = lab.cluster.nodes[0].ns.check(&["conntrack", "-L", "-p", "udp"]).unwrap();
    let to_a1 = lab.cluster.pod("a1").ipv4.to_string();
    assert!(!entries.contains(&format!("src={to_a1} ")), "the flow answered by a1 is gone:\n{entries}");
    assert_eq!(ask(&live), "b1", "the live flow is kept");
    assert_eq!(ask(&stale), "b1", "the old flow, deleted, starts over at the new endpoint");
}

#[test]
fn s40_each_family_uses_only_its_own_slices() {
    require_kernel!();
    let lab = lab("s40");
    let dual = Svc::new("dual", &["172.30.0.48", "fd00:172:30::48"]).port("http", "TCP", 80);
    let v4_only = Svc::new("v4only", &["172.30.0.52"]).port("http", "TCP", 80);
    let slices = [
        Eps::v4("dual").port("http", "TCP", 8080).pod(&lab, "a1", Ready),
        Eps::v6("dual").port("http", "TCP", 8080).pod(&lab, "b1", Ready),
        Eps::v6("v4only").port("http", "TCP", 8080).pod(&lab, "b2", Ready),
    ];
    let rs = lab.program_objects(&[dual, v4_only], &slices);
    lab.check(&rs, Pod("c1"), "172.30.0.48:80", Expect::pods(&["a1"], false));
    lab.check(&rs, Pod("c1"), "[fd00:172:30::48]:80", Expect::pods(&["b1"], false));
    lab.check(&rs, Pod("c1"), "172.30.0.52:80", Expect::Reject);
}

#[test]
fn s26b_internal_traffic_local_on_a_plain_clusterip() {
    require_kernel!();
    let lab = lab("s26b");
    let svc = Svc::new("itl", &["172.30.0.47"]).port("http", "TCP", 80).internal_local();
    let rs = lab.program_objects(&[svc], &[eps(&lab, "itl", &[("a1", Ready), ("b1", Ready)])]);
    lab.check(&rs, Pod("c1"), "172.30.0.47:80", Expect::pods(&["a1"], false));
}

#[test]
fn topology_zone_hints_keep_traffic_in_the_nodes_zone() {
    require_kernel!();
    let mut lab = lab("topo");
    lab.zone = Some("zone-a".into());
    let hinted = Eps::v4("web")
        .port("http", "TCP", 8080)
        .pod(&lab, "a1", Ready)
        .for_zones(&["zone-a"])
        .pod(&lab, "b1", Ready)
        .for_zones(&["zone-b"]);
    let rs = lab.program_objects(&[web()], std::slice::from_ref(&hinted));
    lab.check(&rs, Pod("c1"), "172.30.0.41:80", Expect::pods(&["a1"], false));
    // One ready endpoint without hints turns the filtering off.
    let rs = lab.program_objects(&[web()], &[hinted.pod(&lab, "b2", Ready)]);
    lab.check(&rs, Pod("c1"), "172.30.0.41:80", Expect::pods(&["a1", "b1", "b2"], false));
}

fn detect_local(tag: &str, detect: DetectLocal) {
    let lab = lab(tag);
    let config = verdict_model::ProxyConfig { detect_local: detect, ..lab.config() };
    let rs = lab.program(&lab.model(config, &[web()], &[web_eps(&lab, &[("a1", Ready)])]));
    lab.check(&rs, Pod("c1"), "172.30.0.41:80", Expect::pods(&["a1"], false));
    lab.check(&rs, External, "172.30.0.41:80", Expect::pods(&["a1"], true));
}

#[test]
fn detect_local_by_the_nodes_pod_cidr() {
    require_kernel!();
    detect_local("dl-node", DetectLocal::NodeCidr);
}

#[test]
fn detect_local_by_bridge_interface() {
    require_kernel!();
    detect_local("dl-br", DetectLocal::BridgeInterface("br0".into()));
}

#[test]
fn detect_local_by_interface_name_prefix() {
    require_kernel!();
    detect_local("dl-pfx", DetectLocal::InterfaceNamePrefix("br".into()));
}
