//! NodePorts on every local address (`--nodeport-addresses all`) and on loopback (localhost
//! NodePorts) as the interpreter sees them.
//!
//! These build a model, so they live here and not in verdict-nft (which knows no Services):
//! the interpreter itself is `verdict_nft::explain`.

use verdict_layout::render::{RenderOptions, render};
use verdict_model::Protocol;
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{BuildOutput, NodePortAddresses, ProxyConfig, build_model};
use verdict_nft::explain::{Explanation, Host, Packet, Summary, explain};
use verdict_nft::ruleset::Ruleset;
use verdict_nft::text;

/// A NodePort Service (30080) with one endpoint (or none), on a node whose Node object lists
/// only 192.168.0.2 and fd00::2.
fn table(nodeport_addresses: &[&str], endpoints: bool) -> Ruleset {
    let config =
        ProxyConfig { nodeport_addresses: NodePortAddresses::parse(nodeport_addresses).unwrap(), ..Default::default() };
    table_with(config, endpoints)
}

/// [`table`] with a configuration of its own.
fn table_with(config: ProxyConfig, endpoints: bool) -> Ruleset {
    let node = Node {
        name: "n1".into(),
        addresses: vec![("InternalIP".into(), "192.168.0.2".into()), ("InternalIP".into(), "fd00::2".into())],
        ..Node::default()
    };
    let svc = Service {
        namespace: "ns".into(),
        name: "np".into(),
        service_type: "NodePort".into(),
        cluster_ips: vec!["172.30.0.42".into(), "fd00:96::42".into()],
        ports: vec![ServicePortSpec { name: "http".into(), protocol: "TCP".into(), port: 80, node_port: Some(30080) }],
        ..Service::default()
    };
    let slice = |family: &str, addr: &str| EndpointSlice {
        namespace: "ns".into(),
        name: format!("np-{family}"),
        service_name: "np".into(),
        address_type: family.into(),
        ports: vec![EndpointPort { name: "http".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: vec![Endpoint { addresses: vec![addr.into()], ..Endpoint::default() }],
        trigger_time: None,
    };
    let slices = if endpoints { vec![slice("IPv4", "10.180.0.2"), slice("IPv6", "fd00:180::2")] } else { vec![] };
    let BuildOutput { model, problems } = build_model(config, "n1", Some(&node), &[], &[svc], &slices);
    assert!(problems.is_empty(), "{problems:?}");
    render(&model, &RenderOptions::default())
}

/// The node's addresses include ones its Node object does not list (added after the table was
/// written).
fn host() -> Host {
    let local = ["192.168.0.2", "192.168.9.9", "127.0.0.1", "fd00::2", "2001:db8::9", "::1"];
    Host { local_addresses: local.iter().map(|a| a.parse().unwrap()).collect() }
}

fn to(rs: &Ruleset, dst: &str) -> Summary {
    let src = if dst.contains(':') { "2001:db8:50::100" } else { "203.0.113.7" };
    from(rs, src, dst).summary()
}

fn dnat_to(ep: &str) -> Summary {
    Summary::Endpoints { endpoints: [ep.parse().unwrap()].into(), masquerade: [true].into() }
}

#[test]
fn all_answers_on_every_local_address_of_both_families() {
    assert_eq!(NodePortAddresses::parse(&["all"]), Ok(NodePortAddresses::all()));
    let rs = table(&["all"], true);
    for dst in ["192.168.0.2", "192.168.9.9"] {
        assert_eq!(to(&rs, dst), dnat_to("10.180.0.2:8080"), "{dst}");
    }
    for dst in ["fd00::2", "2001:db8::9"] {
        assert_eq!(to(&rs, dst), dnat_to("[fd00:180::2]:8080"), "{dst}");
    }
    // Not on loopback, and not on an address that is not the node's.
    assert_eq!(to(&rs, "127.0.0.1"), Summary::NotHandled { masquerade: false });
    assert_eq!(to(&rs, "198.51.100.1"), Summary::NotHandled { masquerade: false });
}

#[test]
fn all_without_endpoints_rejects_on_every_local_address() {
    let rs = table(&["all"], false);
    assert_eq!(to(&rs, "192.168.9.9"), Summary::Reject);
    assert_eq!(to(&rs, "2001:db8::9"), Summary::Reject);
}

#[test]
fn a_family_wide_cidr_covers_its_family_only() {
    let rs = table(&["0.0.0.0/0", "primary"], true);
    assert_eq!(to(&rs, "192.168.9.9"), dnat_to("10.180.0.2:8080"));
    assert_eq!(to(&rs, "fd00::2"), dnat_to("[fd00:180::2]:8080"), "IPv6 keeps the primary IP");
    assert_eq!(to(&rs, "2001:db8::9"), Summary::NotHandled { masquerade: false });
}

#[test]
fn primary_does_not_answer_on_other_local_addresses() {
    let rs = table(&["primary"], true);
    assert_eq!(to(&rs, "192.168.0.2"), dnat_to("10.180.0.2:8080"));
    assert_eq!(to(&rs, "192.168.9.9"), Summary::NotHandled { masquerade: false });
}

#[test]
fn with_the_fast_path_a_forwarded_service_connection_is_offloaded_once_established() {
    let mut rs = table(&["primary"], true);
    assert!(rs.flowtables.is_empty());
    let packet = |dst: &str, protocol| Packet {
        src: "203.0.113.7".parse().unwrap(),
        dst: dst.parse().unwrap(),
        protocol,
        dport: 30080,
        in_interface: None,
    };
    let offload = |rs: &Ruleset, p: &Packet| {
        let e = explain(rs, p, &host());
        let found: Vec<_> = e.branches.iter().map(|b| b.offload.clone()).collect();
        (e.summary(), found, e.to_string())
    };
    let (summary, found, _) = offload(&rs, &packet("192.168.0.2", Protocol::Tcp));
    assert_eq!(summary, dnat_to("10.180.0.2:8080"));
    assert!(found.iter().all(Option::is_none), "no fast path without the option");

    let mut with = render(&synth_free_model(), &RenderOptions { fast_path: true, ..Default::default() });
    with.flowtables.get_mut("fastpath").unwrap().devices = ["eth0".to_string()].into_iter().collect();
    rs.flowtables = with.flowtables.clone();
    rs.chains.insert("filter-forward".into(), with.chains["filter-forward"].clone());
    let (summary, found, text) = offload(&rs, &packet("192.168.0.2", Protocol::Tcp));
    assert_eq!(summary, dnat_to("10.180.0.2:8080"), "the first packet's fate is unchanged");
    let o = found[0].clone().expect("offloaded once established");
    assert_eq!((o.flowtable.as_str(), o.devices.as_slice()), ("fastpath", ["eth0".to_string()].as_slice()));
    assert!(text.contains("once established: offloaded to flowtable @fastpath"), "{text}");

    // SCTP is not something the kernel's flowtable forwards: not offloaded.
    let (_, found, _) = offload(&rs, &packet("192.168.0.2", Protocol::Sctp));
    assert!(found.iter().all(Option::is_none));
}

/// A model without Services: only the scaffold (and the fast path's flowtable and rule).
fn synth_free_model() -> verdict_model::ProxyModel {
    build_model(ProxyConfig::default(), "n1", None, &[], &[], &[]).model
}

/// iptables mode's defaults kept: every local address, localhost NodePorts, the INVALID drop.
fn iptables_mode(endpoints: bool) -> Ruleset {
    let config = ProxyConfig {
        nodeport_addresses: NodePortAddresses::all(),
        localhost_nodeports: true,
        drop_ct_invalid: true,
        ..Default::default()
    };
    table_with(config, endpoints)
}

fn from(rs: &Ruleset, src: &str, dst: &str) -> Explanation {
    let packet = Packet {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        protocol: Protocol::Tcp,
        dport: 30080,
        in_interface: None,
    };
    explain(rs, &packet, &host())
}

#[test]
fn localhost_nodeports_answer_the_nodes_own_connections_masqueraded() {
    let rs = iptables_mode(true);
    for src in ["127.0.0.1", "192.168.0.2"] {
        let e = from(&rs, src, "127.0.0.1");
        assert!(e.from_node, "{src}: the node's own connection");
        assert_eq!(e.summary(), dnat_to("10.180.0.2:8080"), "{src}:\n{e}");
        assert!(e.to_string().contains("nat-output: ip daddr 127.0.0.0/8"), "the output hook's rule acts:\n{e}");
    }
    assert_eq!(from(&rs, "127.0.0.1", "127.0.0.9").summary(), dnat_to("10.180.0.2:8080"), "all of 127.0.0.0/8");
    // The other node addresses still answer, from anywhere.
    assert_eq!(to(&rs, "192.168.9.9"), dnat_to("10.180.0.2:8080"));
}

#[test]
fn loopback_from_the_network_is_dropped_before_dnat() {
    let rs = iptables_mode(true);
    let e = from(&rs, "203.0.113.7", "127.0.0.1");
    assert_eq!(e.summary(), Summary::Drop, "{e}");
    assert!(e.to_string().contains("filter-prerouting-pre-dnat: iifname != \"lo\" ip daddr 127.0.0.0/8 drop"), "{e}");
    // Without localhost NodePorts there is no guard, and nothing answers there either.
    assert_eq!(to(&table(&["all"], true), "127.0.0.1"), Summary::NotHandled { masquerade: false });
}

#[test]
fn a_localhost_nodeport_without_endpoints_is_rejected_as_on_other_addresses() {
    let rs = iptables_mode(false);
    assert_eq!(from(&rs, "127.0.0.1", "127.0.0.1").summary(), Summary::Reject);
    assert_eq!(from(&rs, "192.168.0.2", "192.168.9.9").summary(), Summary::Reject, "the node to its own address");
    assert_eq!(to(&rs, "192.168.9.9"), Summary::Reject);
    // No localhost NodePorts: loopback is left alone.
    let off = table(&["all"], false);
    assert_eq!(from(&off, "127.0.0.1", "127.0.0.1").summary(), Summary::NotHandled { masquerade: false });
}

#[test]
fn the_invalid_drop_leaves_new_connections_alone() {
    let rs = iptables_mode(true);
    assert!(text::listing(&rs).contains("ct state invalid drop comment"), "the rule is there");
    assert_eq!(to(&rs, "192.168.0.2"), dnat_to("10.180.0.2:8080"), "a forwarded first packet is not INVALID");
}
