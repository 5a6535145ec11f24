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
    parse_nodeport_addresses(items)
}

#[test]
fn nothing_is_the_nftables_default_primary() {
    assert_eq!(parse(&[]), Ok(NodePortAddresses::Primary));
    assert_eq!(parse(&["", "  "]), Ok(NodePortAddresses::Primary));
    assert_eq!(parse(&[" primary "]), Ok(NodePortAddresses::Primary));
}

#[test]
fn keywords_and_cidrs_combine() {
    assert_eq!(parse(&["all"]), Ok(NodePortAddresses::All));
    assert_eq!(
        parse(&["10.99.0.0/16", " ", "fd00::/64"]),
        Ok(NodePortAddresses::Cidrs(vec![cidr("10.99.0.0/16"), cidr("fd00::/64")]))
    );
    // The union, in either order.
    let union = NodePortAddresses::PrimaryAndCidrs(vec![cidr("10.99.0.0/16")]);
    assert_eq!(parse(&["primary", "10.99.0.0/16"]), Ok(union.clone()));
    assert_eq!(parse(&["10.99.0.0/16", "primary"]), Ok(union));
    // `all` covers whatever else is listed.
    assert_eq!(parse(&["primary", "all", "10.99.0.0/16"]), Ok(NodePortAddresses::All));
    // kube-proxy's tolerant CIDR syntax.
    assert_eq!(parse(&["10.099.0.0/016"]), Ok(NodePortAddresses::Cidrs(vec![cidr("10.99.0.0/16")])));
}

#[test]
fn duplicates_keywords_refused_cidrs_merged() {
    assert_eq!(parse(&["primary", "primary"]), Err(NodePortAddressesError::DuplicateKeyword("primary")));
    assert_eq!(parse(&["all", "10.0.0.0/8", " all"]), Err(NodePortAddressesError::DuplicateKeyword("all")));
    assert_eq!(
        parse(&["10.99.0.0/16", "10.99.1.0/16"]),
        Ok(NodePortAddresses::Cidrs(vec![cidr("10.99.0.0/16")])),
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
    assert_eq!(parse(&["primary", "localhost"]), Err(NodePortAddressesError::Localhost));
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
    let m = model(NodePortAddresses::Primary);
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
    let m = model(NodePortAddresses::All);
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
    let mut m = model(NodePortAddresses::All);
    m.config.families = vec![IpFamily::V4];
    assert_eq!(m.nodeport_all_local_families(), vec![IpFamily::V4]);
}

#[test]
fn only_cidr_selections_read_interfaces() {
    assert!(!NodePortAddresses::Primary.reads_interfaces());
    assert!(!NodePortAddresses::All.reads_interfaces());
    assert!(NodePortAddresses::Cidrs(vec![]).reads_interfaces());
    assert!(NodePortAddresses::PrimaryAndCidrs(vec![]).reads_interfaces());
}
