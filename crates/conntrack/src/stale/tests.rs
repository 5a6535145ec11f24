//! The selection rule, case by case.

use super::{UdpTarget, stale_entries};
use crate::entry::{Entry, Family, IPPROTO_TCP, IPPROTO_UDP};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ips(a: &[&str]) -> Vec<IpAddr> {
    a.iter().map(|s| ip(s)).collect()
}

/// A flow `client:sport -> dst:dport` whose reply comes from `endpoint:5353`.
fn flow(protocol: u8, client: &str, sport: u16, dst: &str, dport: u16, endpoint: &str) -> Entry {
    let family = if client.contains(':') { Family::V6 } else { Family::V4 };
    Entry {
        family,
        protocol,
        orig_src: ip(client),
        orig_dst: ip(dst),
        orig_sport: sport,
        orig_dport: dport,
        reply_src: ip(endpoint),
        reply_dst: ip(client),
        reply_sport: if endpoint == dst { dport } else { 5353 },
        reply_dport: sport,
        zone: 0,
    }
}

fn udp(sport: u16, dst: &str, dport: u16, endpoint: &str) -> Entry {
    let client = if dst.contains(':') { "fd00:10::1" } else { "10.0.0.1" };
    flow(IPPROTO_UDP, client, sport, dst, dport, endpoint)
}

/// kube-system/kube-dns:dns: ClusterIP 10.96.0.10, external IP 192.0.2.10, LB IP 198.51.100.10,
/// port 53, NodePort 30053, serving endpoint 10.244.0.6 only (10.244.0.5 was removed).
fn dns() -> UdpTarget {
    UdpTarget {
        addresses: ips(&["10.96.0.10", "192.0.2.10", "198.51.100.10"]),
        port: 53,
        node_port: Some(30053),
        serving_endpoints: ips(&["10.244.0.6"]),
    }
}

const NODE: &[&str] = &["10.0.0.1", "fd00::1"];

/// Which of `entries` are stale, by index.
fn stale(entries: &[Entry], targets: &[UdpTarget]) -> Vec<usize> {
    let picked = stale_entries(entries, targets, &ips(NODE));
    entries.iter().enumerate().filter(|(_, e)| picked.iter().any(|p| std::ptr::eq(*p, *e))).map(|(i, _)| i).collect()
}

#[test]
fn cluster_ip_flow_to_a_removed_endpoint_is_stale() {
    let entries = [udp(40001, "10.96.0.10", 53, "10.244.0.5")];
    assert_eq!(stale(&entries, &[dns()]), [0]);
}

#[test]
fn cluster_ip_flow_to_a_serving_endpoint_is_kept() {
    let entries = [udp(40002, "10.96.0.10", 53, "10.244.0.6")];
    assert_eq!(stale(&entries, &[dns()]), [] as [usize; 0]);
}

#[test]
fn external_and_load_balancer_ips_are_service_addresses_too() {
    let entries = [
        udp(40001, "192.0.2.10", 53, "10.244.0.5"),
        udp(40002, "198.51.100.10", 53, "10.244.0.5"),
        udp(40003, "192.0.2.10", 53, "10.244.0.6"),
        udp(40004, "198.51.100.10", 53, "10.244.0.6"),
    ];
    assert_eq!(stale(&entries, &[dns()]), [0, 1]);
}

#[test]
fn node_port_flow_is_matched_by_node_port_on_a_node_address() {
    let entries = [
        udp(40001, "10.0.0.1", 30053, "10.244.0.5"),     // stale
        udp(40002, "10.0.0.1", 30053, "10.244.0.6"),     // serving endpoint
        udp(40003, "10.0.0.1", 53, "10.244.0.5"),        // node address, but the Service port is not a NodePort
        udp(40004, "203.0.113.7", 30053, "203.0.113.7"), // a NodePort number to a non-node address
    ];
    assert_eq!(stale(&entries, &[dns()]), [0]);
}

#[test]
fn node_port_needs_a_node_address() {
    let entries = [udp(40001, "10.0.0.1", 30053, "10.244.0.5")];
    assert_eq!(stale_entries(&entries, &[dns()], &[]).len(), 0);
    assert_eq!(stale_entries(&entries, &[dns()], &ips(&["10.0.0.1"])).len(), 1);
}

#[test]
fn tcp_and_sctp_entries_are_never_stale() {
    let entries = [
        flow(IPPROTO_TCP, "10.0.0.1", 40001, "10.96.0.10", 53, "10.244.0.5"),
        flow(132, "10.0.0.1", 40002, "10.96.0.10", 53, "10.244.0.5"),
        flow(IPPROTO_TCP, "10.0.0.1", 40003, "10.0.0.1", 30053, "10.244.0.5"),
    ];
    assert_eq!(stale(&entries, &[dns()]), [] as [usize; 0]);
}

#[test]
fn entry_never_dnated_is_stale_once_there_are_endpoints() {
    // Created while the Service had no endpoints: the reply comes from the ClusterIP itself.
    let entries = [udp(40001, "10.96.0.10", 53, "10.96.0.10"), udp(40002, "10.0.0.1", 30053, "10.0.0.1")];
    assert_eq!(stale(&entries, &[dns()]), [0, 1]);
}

#[test]
fn other_service_port_is_kept() {
    let entries = [
        udp(40001, "10.96.0.10", 54, "10.244.0.5"),  // same IP, another port
        udp(40002, "10.96.0.11", 53, "10.244.0.5"),  // another Service's IP, same port
        udp(40003, "10.0.0.1", 30054, "10.244.0.5"), // another NodePort
    ];
    assert_eq!(stale(&entries, &[dns()]), [] as [usize; 0]);
}

#[test]
fn each_target_is_judged_by_its_own_endpoints() {
    let other = UdpTarget {
        addresses: ips(&["10.96.0.11"]),
        port: 53,
        node_port: Some(30054),
        serving_endpoints: ips(&["10.244.0.5"]),
    };
    let entries = [
        udp(40001, "10.96.0.10", 53, "10.244.0.5"), // dns: 0.5 is not serving -> stale
        udp(40002, "10.96.0.11", 53, "10.244.0.5"), // other: 0.5 is serving -> kept
        udp(40003, "10.96.0.11", 53, "10.244.0.6"), // other: 0.6 is not serving -> stale
        udp(40004, "10.0.0.1", 30054, "10.244.0.5"), // other's NodePort, serving -> kept
        udp(40005, "10.0.0.1", 30054, "10.244.0.6"), // other's NodePort, not serving -> stale
    ];
    assert_eq!(stale(&entries, &[dns(), other]), [0, 2, 4]);
}

#[test]
fn target_without_serving_endpoints_selects_every_flow_to_it() {
    // Scaled to zero, or deleted: a sender that never stops must not keep its DNAT.
    let mut t = dns();
    t.serving_endpoints.clear();
    let entries = [
        udp(40001, "10.96.0.10", 53, "10.244.0.5"),
        udp(40002, "10.0.0.1", 30053, "10.244.0.5"),
        udp(40003, "10.96.0.10", 54, "10.244.0.5"), // another port of the address: kept
        flow(IPPROTO_TCP, "10.0.0.1", 40004, "10.96.0.10", 53, "10.244.0.5"), // TCP: kept
    ];
    assert_eq!(stale(&entries, &[t]), [0, 1]);
}

#[test]
fn no_targets_select_nothing() {
    let entries = [udp(40001, "10.96.0.10", 53, "10.244.0.5")];
    assert_eq!(stale(&entries, &[]), [] as [usize; 0]);
}

#[test]
fn ipv6_flows() {
    let t = UdpTarget {
        addresses: ips(&["fd00:96::10"]),
        port: 53,
        node_port: Some(30053),
        serving_endpoints: ips(&["fd00:244::6"]),
    };
    let entries = [
        udp(40001, "fd00:96::10", 53, "fd00:244::5"), // removed endpoint -> stale
        udp(40002, "fd00:96::10", 53, "fd00:244::6"), // serving -> kept
        udp(40003, "fd00::1", 30053, "fd00:244::5"),  // NodePort on the node's IPv6 address -> stale
        udp(40004, "10.96.0.10", 53, "10.244.0.5"),   // IPv4 flow, IPv6-only target -> kept
    ];
    assert_eq!(stale(&entries, &[t]), [0, 2]);
}

#[test]
fn dual_stack_target_matches_each_family() {
    let t = UdpTarget {
        addresses: ips(&["10.96.0.10", "fd00:96::10"]),
        port: 53,
        node_port: None,
        serving_endpoints: ips(&["10.244.0.6", "fd00:244::6"]),
    };
    let entries = [
        udp(40001, "10.96.0.10", 53, "10.244.0.5"),
        udp(40002, "10.96.0.10", 53, "10.244.0.6"),
        udp(40003, "fd00:96::10", 53, "fd00:244::5"),
        udp(40004, "fd00:96::10", 53, "fd00:244::6"),
    ];
    assert_eq!(stale(&entries, &[t]), [0, 2]);
}

#[test]
fn ipv4_mapped_addresses_compare_equal_to_ipv4() {
    let mut t = dns();
    t.serving_endpoints = ips(&["::ffff:10.244.0.6"]);
    let entries = [udp(40001, "10.96.0.10", 53, "10.244.0.6"), udp(40002, "10.96.0.10", 53, "10.244.0.5")];
    assert_eq!(stale(&entries, &[t]), [1]);
}

#[test]
fn zones_do_not_change_the_verdict() {
    let mut e = udp(40001, "10.96.0.10", 53, "10.244.0.5");
    e.zone = 7;
    assert_eq!(stale(&[e], &[dns()]), [0]);
}

#[test]
fn duplicate_frontends_keep_an_entry_served_by_either() {
    let mut twin = dns();
    twin.serving_endpoints = ips(&["10.244.0.5"]);
    let entries = [udp(40001, "10.96.0.10", 53, "10.244.0.5"), udp(40002, "10.96.0.10", 53, "10.244.0.7")];
    assert_eq!(stale(&entries, &[dns(), twin]), [1]);
}

#[test]
fn a_node_port_is_matched_only_in_the_targets_families() {
    // An IPv4-only Service has no NodePort in IPv6: a flow to the node's IPv6 address on
    // that port is someone else's (a host socket, another proxy) and is kept.
    let entries = [
        udp(40001, "10.0.0.1", 30053, "10.244.0.5"), // IPv4 NodePort, not serving -> stale
        udp(40002, "fd00::1", 30053, "fd00:244::5"), // IPv6, where dns is not programmed -> kept
    ];
    assert_eq!(stale(&entries, &[dns()]), [0]);
    let mut dual = dns();
    dual.addresses.push(ip("fd00:96::10"));
    assert_eq!(stale(&entries, &[dual]), [0, 1]);
}
