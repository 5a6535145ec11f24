//! Both families are proxied whatever addresses the Node object lists, as upstream does on a
//! kernel with IPv6: the Node's addresses decide only which families get NodePorts.
//! Real connections through node1 of the scenario lab (`verdict_e2e::scenario`), whose
//! namespaces have both families; only the Node object changes.

use std::path::Path;
use verdict_e2e::require_kernel;
use verdict_e2e::scenario::{Cond, Eps, Expect, From, Lab, NODE_PORT, Svc};
use verdict_model::IpFamily;

use Cond::*;
use From::*;

const NODE1_V4: &str = "192.168.50.11";
const NODE1_V6: &str = "2001:db8:50::11";

/// A lab whose Node object lists InternalIPs of `listed` only.
fn lab(tag: &str, listed: IpFamily) -> Lab {
    let mut lab = Lab::new(tag, Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab");
    lab.listed_families = vec![listed];
    lab
}

/// `dual`: ClusterIPs 172.30.0.48 and fd00:172:30::48, NodePort 30001, endpoints a1 (IPv4)
/// and b1, a2 (IPv6).
fn dual(lab: &Lab) -> (Svc, [Eps; 2]) {
    let svc = Svc::new("dual", &["172.30.0.48", "fd00:172:30::48"]).node_port("http", "TCP", 80, NODE_PORT);
    let slices = [
        Eps::v4("dual").port("http", "TCP", 8080).pod(lab, "a1", Ready),
        Eps::v6("dual").port("http", "TCP", 8080).pod(lab, "b1", Ready).pod(lab, "a2", Ready),
    ];
    (svc, slices)
}

#[test]
fn an_ipv4_only_node_proxies_ipv6_services_without_ipv6_nodeports() {
    require_kernel!();
    let lab = lab("ds4", IpFamily::V4);
    let svc = Svc::new("np6", &["fd00:172:30::45"]).node_port("http", "TCP", 80, NODE_PORT);
    let eps = Eps::v6("np6").port("http", "TCP", 8080).pod(&lab, "b1", Ready);
    // `model` asserts no problem: the IPv6 Service and slice are accepted.
    let model = lab.model(lab.config(), &[svc], &[eps]);
    assert_eq!(model.families(), IpFamily::ALL.to_vec());
    assert_eq!(model.families_without_nodeports(), vec![IpFamily::V6]);
    let rs = lab.program(&model);
    lab.check(&rs, Pod("c1"), "[fd00:172:30::45]:80", Expect::pods(&["b1"], false));
    lab.check(&rs, Node, "[fd00:172:30::45]:80", Expect::pods(&["b1"], true));
    // No IPv6 node address is a NodePort address: node1's own server answers.
    lab.check(&rs, External, &format!("[{NODE1_V6}]:{NODE_PORT}"), Expect::NotHandled);
}

#[test]
fn an_ipv6_only_node_proxies_ipv4_services_without_ipv4_nodeports() {
    require_kernel!();
    let lab = lab("ds6", IpFamily::V6);
    let svc = Svc::new("np4", &["172.30.0.45"]).node_port("http", "TCP", 80, NODE_PORT);
    let eps = Eps::v4("np4").port("http", "TCP", 8080).pod(&lab, "b1", Ready);
    let model = lab.model(lab.config(), &[svc], &[eps]);
    assert_eq!(model.families_without_nodeports(), vec![IpFamily::V4]);
    let rs = lab.program(&model);
    lab.check(&rs, Pod("c1"), "172.30.0.45:80", Expect::pods(&["b1"], false));
    lab.check(&rs, External, &format!("{NODE1_V4}:{NODE_PORT}"), Expect::NotHandled);
}

#[test]
fn a_dual_stack_service_on_an_ipv4_only_node_answers_in_both_families() {
    require_kernel!();
    let lab = lab("dsd", IpFamily::V4);
    let (svc, slices) = dual(&lab);
    let rs = lab.program_objects(&[svc], &slices);
    lab.check(&rs, Pod("c1"), "172.30.0.48:80", Expect::pods(&["a1"], false));
    lab.check(&rs, Pod("c1"), "[fd00:172:30::48]:80", Expect::pods(&["b1", "a2"], false));
    lab.check(&rs, External, &format!("{NODE1_V4}:{NODE_PORT}"), Expect::pods(&["a1"], true));
    lab.check(&rs, External, &format!("[{NODE1_V6}]:{NODE_PORT}"), Expect::NotHandled);
}
