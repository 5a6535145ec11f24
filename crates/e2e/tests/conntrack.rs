//! Stale UDP conntrack cleanup against the real kernel, in a namespace of its own.
//!
//! Topology: one namespace ("the node") with the client address 10.0.0.1 / fd00::1 and two
//! endpoint addresses per family on `lo`; the Service addresses 10.96.0.10 and fd00:96::10
//! are routed to `lo`. DNAT rules in our own tables `ip ct-test` / `ip6 ct-test` pin each
//! client port to one endpoint, so every flow's endpoint is known. Endpoint A
//! (10.244.0.5, fd00:244::5) is "removed", endpoint B (10.244.0.6, fd00:244::6) serves.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;
use verdict_conntrack::{Conntrack, Entry, Family, IPPROTO_TCP, UdpTarget, reconcile, stale_entries};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

const RULES: &str = r#"
table ip ct-test {
    chain raw {
        type filter hook output priority raw; policy accept;
        udp sport 40003 ct zone set 7
        udp dport 40003 ct zone set 7
    }
    chain out {
        type nat hook output priority -100; policy accept;
        ip daddr 10.96.0.10 udp dport 53 udp sport 40001 dnat to 10.244.0.5:5353
        ip daddr 10.96.0.10 udp dport 53 udp sport 40002 dnat to 10.244.0.6:5353
        ip daddr 10.96.0.10 udp dport 53 udp sport 40003 dnat to 10.244.0.5:5353
        ip daddr 10.96.0.10 udp dport 54 dnat to 10.244.0.5:5353
        ip daddr 10.0.0.1 udp dport 30053 dnat to 10.244.0.5:5353
        ip daddr 10.96.0.10 tcp dport 53 dnat to 10.244.0.5:5353
        ip daddr 10.96.0.20 udp dport 53 dnat to 10.244.0.5:5353
    }
}
table ip6 ct-test {
    chain out {
        type nat hook output priority -100; policy accept;
        ip6 daddr fd00:96::10 udp dport 53 udp sport 40011 dnat to [fd00:244::5]:5353
        ip6 daddr fd00:96::10 udp dport 53 udp sport 40012 dnat to [fd00:244::6]:5353
    }
}
"#;

const T: Duration = Duration::from_secs(2);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The node namespace with its addresses, routes and DNAT rules.
fn node(tag: &str) -> Netns {
    let ns = Netns::new(tag).unwrap();
    for addr in ["10.0.0.1/32", "10.244.0.5/32", "10.244.0.6/32", "fd00::1/128", "fd00:244::5/128", "fd00:244::6/128"] {
        // `nodad`: under load an IPv6 address could still be tentative when the route below
        // names it as its source ("Invalid source address").
        let v6 = if addr.contains(':') { &["nodad"][..] } else { &[] };
        ns.ip(&[&["addr", "add", addr, "dev", "lo"][..], v6].concat()).unwrap();
    }
    ns.ip(&["route", "add", "10.96.0.0/16", "dev", "lo", "src", "10.0.0.1"]).unwrap();
    ns.ip(&["-6", "route", "add", "fd00:96::/64", "dev", "lo", "src", "fd00::1"]).unwrap();
    ns.nft_stdin(&["-f", "-"], RULES).unwrap();
    ns
}

/// Sends one datagram from `from` to `to` and, if `echo` is set, has that endpoint socket
/// answer it, so the entry sees traffic both ways.
fn udp_flow(from: &str, to: &str, echo: Option<&UdpSocket>) {
    let client = UdpSocket::bind(sa(from)).unwrap();
    client.set_read_timeout(Some(T)).unwrap();
    client.send_to(b"ping", sa(to)).unwrap();
    if let Some(server) = echo {
        let mut buf = [0u8; 16];
        let (n, peer) = server.recv_from(&mut buf).unwrap();
        server.send_to(&buf[..n], peer).unwrap();
        let (_, answered_by) = client.recv_from(&mut buf).unwrap();
        assert_eq!(answered_by, sa(to), "the reply is un-DNATed to the address the client used");
    }
}

/// The source ports (original direction) of the entries `conntrack -L <args>` lists.
fn conntrack_sports(ns: &Netns, args: &[&str]) -> BTreeSet<u16> {
    let mut cmd = vec!["conntrack", "-L"];
    cmd.extend_from_slice(args);
    let out = ns.check(&cmd).unwrap();
    out.lines()
        .map(|line| {
            let sport = line.split_whitespace().find_map(|w| w.strip_prefix("sport=")).expect("sport= in conntrack -L");
            sport.parse().unwrap()
        })
        .collect()
}

fn sports(entries: &[Entry]) -> BTreeSet<u16> {
    entries.iter().map(|e| e.orig_sport).collect()
}

fn set(ports: &[u16]) -> BTreeSet<u16> {
    ports.iter().copied().collect()
}

#[test]
fn reconcile_deletes_exactly_the_udp_flows_to_removed_endpoints() {
    require_kernel!();
    let ns = node("ct");

    // Real traffic: UDP to the ClusterIP (to A, to B, to A in zone 7), to another port of the
    // same address, to the NodePort, over IPv6 (to A, to B), and one TCP connection to A.
    let tcp = ns.run(|| {
        let a = UdpSocket::bind(sa("10.244.0.5:5353")).unwrap();
        let b = UdpSocket::bind(sa("10.244.0.6:5353")).unwrap();
        let a6 = UdpSocket::bind(sa("[fd00:244::5]:5353")).unwrap();
        let b6 = UdpSocket::bind(sa("[fd00:244::6]:5353")).unwrap();
        for s in [&a, &b, &a6, &b6] {
            s.set_read_timeout(Some(T)).unwrap();
        }
        udp_flow("10.0.0.1:40001", "10.96.0.10:53", Some(&a));
        udp_flow("10.0.0.1:40002", "10.96.0.10:53", Some(&b));
        udp_flow("10.0.0.1:40003", "10.96.0.10:53", Some(&a));
        udp_flow("10.0.0.1:40004", "10.96.0.10:54", Some(&a));
        udp_flow("10.0.0.1:40005", "10.0.0.1:30053", Some(&a));
        udp_flow("[fd00::1]:40011", "[fd00:96::10]:53", Some(&a6));
        udp_flow("[fd00::1]:40012", "[fd00:96::10]:53", Some(&b6));
        let listener = TcpListener::bind(sa("10.244.0.5:5353")).unwrap();
        let client = TcpStream::connect_timeout(&sa("10.96.0.10:53"), T).unwrap();
        let (server, _) = listener.accept().unwrap();
        (listener, client, server)
    });

    // The socket is opened in the namespace and used from this thread.
    let mut ct = ns.run(|| Conntrack::open().expect("ctnetlink socket"));

    let v4 = ct.udp_entries(Family::V4).unwrap();
    let v6 = ct.udp_entries(Family::V6).unwrap();
    assert_eq!(sports(&v4), set(&[40001, 40002, 40003, 40004, 40005]), "{v4:#?}");
    assert_eq!(sports(&v6), set(&[40011, 40012]), "{v6:#?}");
    let zoned = v4.iter().find(|e| e.orig_sport == 40003).unwrap();
    assert_eq!(zoned.zone, 7, "entries of other zones are listed, with their zone");
    let to_a = v4.iter().find(|e| e.orig_sport == 40001).unwrap();
    assert_eq!(
        (to_a.orig_dst, to_a.orig_dport, to_a.reply_src, to_a.reply_sport),
        (ip("10.96.0.10"), 53, ip("10.244.0.5"), 5353)
    );
    let all_v4 = ct.entries(Family::V4).unwrap();
    let tcp_entry = *all_v4.iter().find(|e| e.protocol == IPPROTO_TCP).expect("the TCP flow is tracked");
    assert_eq!((tcp_entry.orig_dst, tcp_entry.reply_src), (ip("10.96.0.10"), ip("10.244.0.5")));
    ct.udp_entries(Family::V4).unwrap();
    assert_eq!(ct.last_dump_size(), 5, "the kernel filtered the dump by protocol (CTA_FILTER)");

    let targets = [UdpTarget {
        addresses: vec![ip("10.96.0.10"), ip("fd00:96::10")],
        port: 53,
        node_port: Some(30053),
        serving_endpoints: vec![ip("10.244.0.6"), ip("fd00:244::6")],
    }];
    let node_addresses = [ip("10.0.0.1"), ip("fd00::1")];
    let expected_stale: Vec<Entry> = [&v4[..], &v6[..]]
        .concat()
        .iter()
        .filter(|e| [40001, 40003, 40005, 40011].contains(&e.orig_sport))
        .copied()
        .collect();
    let mut selected: Vec<Entry> =
        stale_entries(&[&v4[..], &v6[..]].concat(), &targets, &node_addresses).into_iter().copied().collect();
    selected.sort_by_key(|e| e.orig_sport);
    let mut expected_sorted = expected_stale.clone();
    expected_sorted.sort_by_key(|e| e.orig_sport);
    assert_eq!(selected, expected_sorted);

    let report = reconcile(&mut ct, &targets, &node_addresses).unwrap();
    assert_eq!(report.deleted, 4, "{report:?}");
    assert_eq!(report.examined, 7, "{report:?}");
    assert_eq!(report.deleted_by_family, [3, 1], "IPv4 then IPv6: {report:?}");

    // What is left, seen by our own dump ...
    assert_eq!(sports(&ct.udp_entries(Family::V4).unwrap()), set(&[40002, 40004]));
    assert_eq!(sports(&ct.udp_entries(Family::V6).unwrap()), set(&[40012]));
    assert!(ct.entries(Family::V4).unwrap().contains(&tcp_entry), "the TCP entry is untouched");
    // ... and by the conntrack binary.
    assert_eq!(conntrack_sports(&ns, &["-f", "ipv4", "-p", "udp"]), set(&[40002, 40004]));
    assert_eq!(conntrack_sports(&ns, &["-f", "ipv6", "-p", "udp"]), set(&[40012]));
    assert_eq!(conntrack_sports(&ns, &["-f", "ipv4", "-p", "tcp"]), set(&[tcp_entry.orig_sport]));

    // Deleting entries that are already gone is not an error, and deletes nothing.
    assert_eq!(ct.delete(&expected_stale).unwrap(), 0);
    // A second pass finds nothing more to do.
    let again = reconcile(&mut ct, &targets, &node_addresses).unwrap();
    assert_eq!((again.deleted, again.examined), (0, 3));
    assert_eq!(conntrack_sports(&ns, &["-f", "ipv4", "-p", "udp"]), set(&[40002, 40004]));
    drop(tcp);
}

#[test]
fn reconcile_deletes_hundreds_of_stale_flows_in_batches() {
    require_kernel!();
    let ns = node("ctmany");
    const FLOWS: u16 = 300;
    ns.run(|| {
        for port in 41000..41000 + FLOWS {
            udp_flow(&format!("10.0.0.1:{port}"), "10.96.0.20:53", None);
        }
        // One flow that must stay: another Service port.
        udp_flow("10.0.0.1:40004", "10.96.0.10:54", None);
    });
    let mut ct = ns.run(|| Conntrack::open().unwrap());
    assert_eq!(ct.udp_entries(Family::V4).unwrap().len(), usize::from(FLOWS) + 1);

    let targets = [UdpTarget {
        addresses: vec![ip("10.96.0.20")],
        port: 53,
        node_port: None,
        serving_endpoints: vec![ip("10.244.0.6")],
    }];
    let report = reconcile(&mut ct, &targets, &[]).unwrap();
    assert_eq!((report.deleted, report.examined), (usize::from(FLOWS), usize::from(FLOWS) + 1));
    assert_eq!(conntrack_sports(&ns, &["-f", "ipv4", "-p", "udp"]), set(&[40004]));
}

#[test]
fn a_service_without_serving_endpoints_loses_its_flows() {
    require_kernel!();
    let ns = node("ctnone");
    ns.run(|| {
        udp_flow("10.0.0.1:40001", "10.96.0.10:53", None);
        udp_flow("10.0.0.1:40004", "10.96.0.10:54", None);
    });
    let mut ct = ns.run(|| Conntrack::open().unwrap());
    let targets =
        [UdpTarget { addresses: vec![ip("10.96.0.10")], port: 53, node_port: Some(30053), serving_endpoints: vec![] }];
    let report = reconcile(&mut ct, &targets, &[ip("10.0.0.1")]).unwrap();
    assert_eq!((report.deleted, report.examined), (1, 2), "scaled to zero: every flow to the port is stale");
    assert_eq!(conntrack_sports(&ns, &["-f", "ipv4", "-p", "udp"]), set(&[40004]), "another port is kept");
}
