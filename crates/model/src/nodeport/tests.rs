use super::*;
use crate::proxy_model::ProxyModel;
use crate::types::{NodeFacts, ProxyConfig};
use std::net::IpAddr;

fn cidr(s: &str) -> Cidr {
    Cidr::parse_tolerant(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn parse(items: &[&str]) -> Result<NodePortAddresses, NodePortAddressesError> {
    NodePortAddresses::parse(items)
}

fn primary_and(cidrs: &[&str]) -> NodePortAddresses {
    NodePortAddresses { primary: true, ..NodePortAddresses::cidrs(cidrs.iter().map(|c| cidr(c)).collect()) }
}

#[test]
fn nothing_is_the_default_the_caller_names() {
    assert_eq!(parse(&[]), Ok(NodePortAddresses::primary()));
    assert_eq!(parse(&["", "  "]), Ok(NodePortAddresses::primary()));
    assert_eq!(parse(&[" primary "]), Ok(NodePortAddresses::primary()));
    // iptables and ipvs mode: unset is every local address.
    assert_eq!(parse_nodeport_addresses(&[], NodePortAddresses::all()), Ok(NodePortAddresses::all()));
    assert_eq!(parse_nodeport_addresses(&[" "], NodePortAddresses::all()), Ok(NodePortAddresses::all()));
    assert_eq!(parse_nodeport_addresses(&["primary"], NodePortAddresses::all()), Ok(NodePortAddresses::primary()));
}

#[test]
fn keywords_and_cidrs_combine() {
    assert_eq!(parse(&["all"]), Ok(NodePortAddresses::all()));
    assert_eq!(
        parse(&["10.99.0.0/16", " ", "fd00::/64"]),
        Ok(NodePortAddresses::cidrs(vec![cidr("10.99.0.0/16"), cidr("fd00::/64")]))
    );
    // The union, in either order.
    let union = primary_and(&["10.99.0.0/16"]);
    assert_eq!(parse(&["primary", "10.99.0.0/16"]), Ok(union.clone()));
    assert_eq!(parse(&["10.99.0.0/16", "primary"]), Ok(union));
    // `all` covers whatever else is listed.
    let all = parse(&["primary", "all", "10.99.0.0/16"]).unwrap();
    assert!(all.all && IpFamily::ALL.iter().all(|f| all.all_local(*f)));
    // kube-proxy's tolerant CIDR syntax.
    assert_eq!(parse(&["10.099.0.0/016"]), Ok(NodePortAddresses::cidrs(vec![cidr("10.99.0.0/16")])));
}

#[test]
fn duplicates_keywords_refused_cidrs_merged() {
    assert_eq!(parse(&["primary", "primary"]), Err(NodePortAddressesError::DuplicateKeyword("primary")));
    assert_eq!(parse(&["all", "10.0.0.0/8", " all"]), Err(NodePortAddressesError::DuplicateKeyword("all")));
    assert_eq!(
        parse(&["10.99.0.0/16", "10.99.1.0/16"]),
        Ok(NodePortAddresses::cidrs(vec![cidr("10.99.0.0/16")])),
        "the same network twice (host bits aside) is one network"
    );
}

#[test]
fn errors_name_the_bad_item() {
    let err = parse(&["10.0.0.0/8", "10.0.0.0/33"]).unwrap_err();
    assert_eq!(err, NodePortAddressesError::Invalid("10.0.0.0/33".into()));
    assert!(err.to_string().contains("\"10.0.0.0/33\""), "{err}");
    let err = parse(&["Primary"]).unwrap_err();
    assert_eq!(err, NodePortAddressesError::KeywordCase { item: "Primary".into(), keyword: "primary" });
    assert!(err.to_string().contains("\"Primary\"") && err.to_string().contains("`primary`"), "{err}");
    assert!(matches!(parse(&["ALL"]), Err(NodePortAddressesError::KeywordCase { keyword: "all", .. })));
    assert!(matches!(parse(&["LocalHost"]), Err(NodePortAddressesError::KeywordCase { keyword: "localhost", .. })));
    assert_eq!(parse(&["every"]), Err(NodePortAddressesError::Invalid("every".into())));
}

fn model(npa: NodePortAddresses) -> ProxyModel {
    ProxyModel {
        node: NodeFacts {
            primary_ips: vec![ip("192.168.0.2"), ip("fd00::2")],
            addresses: vec![
                ip("192.168.0.2"),
                ip("192.168.1.2"),
                ip("10.99.3.4"),
                ip("127.0.0.1"),
                ip("fd00::2"),
                ip("fd00:99::7"),
                ip("::1"),
            ],
            ..NodeFacts::default()
        },
        config: ProxyConfig { nodeport_addresses: npa, ..ProxyConfig::default() },
        ..ProxyModel::default()
    }
}

fn ips(s: &[&str]) -> Vec<IpAddr> {
    s.iter().map(|a| ip(a)).collect()
}

#[test]
fn primary_selects_the_primary_ips() {
    let m = model(NodePortAddresses::primary());
    assert_eq!(m.nodeport_ips(), ips(&["192.168.0.2", "fd00::2"]));
    assert!(m.nodeport_all_local_families().is_empty());
    assert!(m.families_without_nodeports().is_empty());
}

#[test]
fn primary_and_cidrs_select_the_union() {
    let m = model(parse(&["primary", "10.99.0.0/16"]).unwrap());
    assert_eq!(m.nodeport_ips(), ips(&["10.99.3.4", "192.168.0.2", "fd00::2"]));
    assert!(m.nodeport_all_local_families().is_empty());
    // CIDRs alone: only the addresses inside them, loopback never.
    let m = model(parse(&["10.99.0.0/16", "127.0.0.0/8", "fd00:99::/64"]).unwrap());
    assert_eq!(m.nodeport_ips(), ips(&["10.99.3.4", "fd00:99::7"]));
}

#[test]
fn all_accepts_every_local_address_of_both_families_and_lists_none() {
    let m = model(NodePortAddresses::all());
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V4, IpFamily::V6]);
    assert!(m.nodeport_ips().is_empty(), "no list: the table matches local addresses");
    assert!(m.families_without_nodeports().is_empty());
    assert_eq!(m.nodeport_listen_addresses(), ips(&["0.0.0.0", "::"]));
}

#[test]
fn a_family_wide_cidr_is_all_of_that_family_only() {
    let m = model(parse(&["0.0.0.0/0", "fd00:99::/64"]).unwrap());
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V4]);
    assert_eq!(m.nodeport_ips(), ips(&["fd00:99::7"]), "IPv6 keeps its CIDR");
    assert_eq!(m.nodeport_listen_addresses(), ips(&["fd00:99::7", "0.0.0.0"]));
    let m = model(parse(&["primary", "::/0"]).unwrap());
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V6]);
    assert_eq!(m.nodeport_ips(), ips(&["192.168.0.2"]), "IPv4 keeps its primary IP");
}

#[test]
fn all_local_families_are_only_programmed_ones() {
    let mut m = model(NodePortAddresses::all());
    m.config.families = vec![IpFamily::V4];
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V4]);
}

#[test]
fn only_cidr_selections_read_interfaces() {
    assert!(!NodePortAddresses::primary().reads_interfaces());
    assert!(!NodePortAddresses::all().reads_interfaces());
    assert!(parse(&["10.99.0.0/16"]).unwrap().reads_interfaces());
    assert!(parse(&["primary", "fd00:99::/64"]).unwrap().reads_interfaces());
    assert!(!parse(&["all", "10.99.0.0/16"]).unwrap().reads_interfaces(), "all covers the CIDR");
    assert!(!parse(&["0.0.0.0/0", "::/0"]).unwrap().reads_interfaces());
}

#[test]
fn a_list_without_a_cidr_of_a_family_takes_every_address_of_that_family() {
    // Upstream decides per family: IPv4 CIDRs alone leave IPv6 NodePorts on every address.
    let m = model(parse(&["10.99.0.0/16"]).unwrap());
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V6]);
    assert_eq!(m.nodeport_ips(), ips(&["10.99.3.4"]));
    assert!(m.families_without_nodeports().is_empty());
    let m = model(parse(&["fd00:99::/64"]).unwrap());
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V4]);
    assert_eq!(m.nodeport_ips(), ips(&["fd00:99::7"]));
    // With `primary` the primary IPs stand for their families (no fallback, as before).
    let m = model(parse(&["primary", "10.99.0.0/16"]).unwrap());
    assert!(m.nodeport_all_local_families().is_empty());
    let mut no_v6_primary = model(NodePortAddresses::primary());
    no_v6_primary.node.primary_ips.retain(|ip| ip.is_ipv4());
    assert_eq!(no_v6_primary.families_without_nodeports(), vec![IpFamily::V6]);
}

#[test]
fn localhost_is_the_loopback_cidrs_of_both_families() {
    let lo = parse(&["primary", "localhost"]).unwrap();
    assert_eq!(lo, primary_and(&["127.0.0.0/8", "::1/128"]));
    assert_eq!(parse(&["localhost", "127.0.0.0/8"]).unwrap().cidrs.len(), 2, "the same network once");
    assert_eq!(parse(&["localhost", " localhost"]), Err(NodePortAddressesError::DuplicateKeyword("localhost")));
    // Its networks count as that family's CIDRs: no fallback to every address, and loopback
    // is never a `nodeport-ips` element.
    let m = model(parse(&["localhost"]).unwrap());
    assert!(m.nodeport_all_local_families().is_empty());
    assert!(m.nodeport_ips().is_empty());
    assert_eq!(m.families_without_nodeports(), vec![IpFamily::V4, IpFamily::V6]);
    let mut served = m.clone();
    served.config.localhost_nodeports = true;
    assert_eq!(served.families_without_nodeports(), vec![IpFamily::V6], "IPv4 answers on 127.0.0.0/8");
}

#[test]
fn which_lists_name_or_cover_loopback() {
    let check = |items: &[&str], names: [bool; 2], covers: [bool; 2]| {
        let npa = parse(items).unwrap();
        let got = |f: fn(&NodePortAddresses, IpFamily) -> bool| [f(&npa, IpFamily::V4), f(&npa, IpFamily::V6)];
        assert_eq!(got(NodePortAddresses::names_loopback), names, "{items:?} names loopback");
        assert_eq!(got(NodePortAddresses::covers_loopback), covers, "{items:?} covers loopback");
    };
    check(&["primary"], [false, false], [false, false]);
    check(&["all"], [false, false], [true, true]);
    check(&["primary", "localhost"], [true, true], [true, true]);
    check(&["all", "localhost"], [true, true], [true, true]);
    check(&["primary", "127.0.0.1/32"], [true, false], [true, false]);
    check(&["0.0.0.0/0", "127.0.0.1/32"], [true, false], [true, true]);
    check(&["127.0.0.5/32"], [true, false], [true, true]);
    check(&["0.0.0.0/0"], [false, false], [true, true]);
    check(&["0.0.0.0/1"], [true, false], [true, true]);
    check(&["10.0.0.0/8"], [false, false], [false, true]);
    assert_eq!(loopback_net(IpFamily::V4), cidr("127.0.0.0/8"));
}
