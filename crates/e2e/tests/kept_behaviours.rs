//! The behaviours of the mode verdict runs in place of (kube-proxy's iptables mode), kept
//! (issue 30), with real packets: NodePorts on an address the node gains later; localhost
//! NodePorts for the node's own connections, and nothing to 127.0.0.0/8 from the network (the
//! CVE-2020-8558 guard); the conntrack-INVALID drop in forward.
//!
//! Topology: node1 (programmed) with pod-a, node2 with pod-b (every Service's endpoint, so
//! answers come back only if node1 masqueraded), the external host on the LAN.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;
use verdict_e2e::fixtures::{self, service, slice};
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::topology::{self, Cluster, ECHO_PORT};
use verdict_e2e::{dataplane, require_kernel};
use verdict_model::{BuildOutput, Cidr, NodePortAddresses, ProxyConfig, build_model, parse_nodeport_addresses};

const T: Duration = Duration::from_secs(1);
const TCP_NODE_PORT: u16 = 30080;
const UDP_NODE_PORT: u16 = 30081;
/// A NodePort without endpoints.
const EMPTY_NODE_PORT: u16 = 30082;
/// A port only a listener bound to 127.0.0.1 on node1 uses.
const LOOPBACK_ONLY_PORT: u16 = 9999;

/// What the agent programs in iptables mode's place (kubeadm's ConfigMap), or not.
#[derive(Clone, Copy)]
struct Kept {
    localhost: bool,
    drop_invalid: bool,
}

const IPTABLES_MODE: Kept = Kept { localhost: true, drop_invalid: true };
/// The same with `localhostNodePorts: false` and `tcpBeLiberal: true`: the controls.
const NONE_KEPT: Kept = Kept { localhost: false, drop_invalid: false };

fn cluster(tag: &str) -> Cluster {
    topology::build(tag, &[&["pod-a"], &["pod-b"]], Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).unwrap()
}

/// Programs node1 as the agent does with `nodePortAddresses` unset in iptables mode's place
/// (the parse is told that mode's default, every local address) and `kept`.
fn program(c: &Cluster, kept: Kept) {
    let node = &c.nodes[0];
    let n = fixtures::node(&[&node.ipv4.to_string(), &node.ipv6.to_string()]);
    let n = verdict_model::source::Node { name: node.name.clone(), ..n };
    let config = ProxyConfig {
        cluster_cidrs: vec![
            Cidr::parse_tolerant(topology::CLUSTER_CIDR_V4).unwrap(),
            Cidr::parse_tolerant(topology::CLUSTER_CIDR_V6).unwrap(),
        ],
        nodeport_addresses: parse_nodeport_addresses(&[], NodePortAddresses::all()).unwrap(),
        localhost_nodeports: kept.localhost,
        drop_ct_invalid: kept.drop_invalid,
        ..ProxyConfig::default()
    };
    let pod_b = c.pod("pod-b");
    let on_b = |svc: &str, family: &str, proto: &str| {
        let ip = pod_b.ip(family == "IPv6").to_string();
        slice("default", svc, family, proto, ECHO_PORT.into(), &[&ip], "node2")
    };
    let services = [
        service("default", "web", &["172.30.0.10", "fd00:10:96::10"], "TCP", 80, Some(TCP_NODE_PORT.into())),
        service("default", "dns", &["172.30.0.11"], "UDP", 53, Some(UDP_NODE_PORT.into())),
        service("default", "empty", &["172.30.0.12"], "TCP", 80, Some(EMPTY_NODE_PORT.into())),
    ];
    let slices = [on_b("web", "IPv4", "TCP"), on_b("web", "IPv6", "TCP"), on_b("dns", "IPv4", "UDP")];
    let BuildOutput { model, problems } = build_model(config, &node.name, Some(&n), &[], &services, &slices);
    assert!(problems.is_empty(), "{problems:?}");
    dataplane::program(&node.ns, &model);
    // What `--init-only` writes when localhost NodePorts are on.
    if kept.localhost {
        node.ns.sysctl("net.ipv4.conf.all.route_localnet", "1").unwrap();
    }
}

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

/// Answered by pod-b on node2, which saw node1's LAN address: masqueraded.
fn answered_by_pod_b_through_node1(c: &Cluster, got: &Outcome) -> bool {
    got.reply().is_some_and(|r| r.backend == "pod-b" && r.peer == IpAddr::V4(c.nodes[0].ipv4))
}

#[test]
fn nodeports_answer_on_an_address_added_later_on_another_interface() {
    require_kernel!();
    let c = cluster("kaddr");
    program(&c, IPTABLES_MODE);
    let node = &c.nodes[0];
    // After the table: a second interface (a veth pair inside the node) with addresses of its
    // own, routed from the LAN.
    node.ns.ip(&["link", "add", "extra0", "type", "veth", "peer", "name", "extra1"]).unwrap();
    node.ns.ip(&["link", "set", "extra1", "up"]).unwrap();
    node.ns.ip(&["link", "set", "extra0", "up"]).unwrap();
    node.ns.ip(&["addr", "add", "192.168.60.11/24", "dev", "extra0"]).unwrap();
    node.ns.ip(&["-6", "addr", "add", "2001:db8:60::11/64", "dev", "extra0", "nodad"]).unwrap();
    c.external.ip(&["route", "add", "192.168.60.0/24", "via", &node.ipv4.to_string()]).unwrap();
    c.external.ip(&["-6", "route", "add", "2001:db8:60::/64", "via", &node.ipv6.to_string()]).unwrap();
    for addr in ["192.168.60.11", "2001:db8:60::11"] {
        let to = SocketAddr::new(addr.parse().unwrap(), TCP_NODE_PORT);
        let got = c.external.run(|| probe::tcp(to, T));
        assert!(got.reply().is_some_and(|r| r.backend == "pod-b"), "NodePort on the late address {to}: {got:?}");
    }
}

#[test]
fn localhost_nodeports_answer_the_nodes_own_connections_masqueraded() {
    require_kernel!();
    let c = cluster("klo");
    program(&c, IPTABLES_MODE);
    let node = &c.nodes[0];
    for port in [TCP_NODE_PORT, UDP_NODE_PORT] {
        for dst in [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 9)] {
            let to = SocketAddr::new(IpAddr::V4(dst), port);
            let got = node.ns.run(|| if port == TCP_NODE_PORT { probe::tcp(to, T) } else { probe::udp(to, T) });
            assert!(answered_by_pod_b_through_node1(&c, &got), "{to}: {got:?}");
        }
    }
    // ::1 is not served (the kernel drops the reply of a connection from ::1 that left).
    let v6 = SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), TCP_NODE_PORT);
    assert_eq!(node.ns.run(|| probe::tcp(v6, T)), Outcome::Refused);
}

#[test]
fn without_localhost_nodeports_loopback_is_not_a_nodeport() {
    require_kernel!();
    let c = cluster("klooff");
    program(&c, NONE_KEPT);
    let node = &c.nodes[0];
    assert_eq!(node.ns.run(|| probe::tcp(localhost(TCP_NODE_PORT), T)), Outcome::Refused);
    let got = node.ns.run(|| probe::tcp(SocketAddr::new(IpAddr::V4(node.ipv4), TCP_NODE_PORT), T));
    assert!(got.reply().is_some_and(|r| r.backend == "pod-b"), "the node's own address still does: {got:?}");
}

/// A TCP listener on node1 that answers with `word`, on `addr`.
fn squatter(c: &Cluster, addr: SocketAddr, word: &'static str) {
    let listener = c.nodes[0].ns.run(|| TcpListener::bind(addr)).unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(word.as_bytes());
        }
    });
}

#[test]
fn a_localhost_nodeport_without_endpoints_is_rejected_even_with_a_local_listener() {
    require_kernel!();
    let c = cluster("kempty");
    program(&c, IPTABLES_MODE);
    // Something on the node holds the port: the no-endpoint check must still reject, as it
    // does on the node's other addresses.
    squatter(&c, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), EMPTY_NODE_PORT), "squatter");
    let node = &c.nodes[0];
    for to in [localhost(EMPTY_NODE_PORT), SocketAddr::new(IpAddr::V4(node.ipv4), EMPTY_NODE_PORT)] {
        assert_eq!(node.ns.run(|| probe::tcp(to, T)), Outcome::Refused, "{to}");
    }
}

/// Lets the external host address 127.0.0.0/8 to node1, as an attacker on the LAN can: no
/// loopback of its own, a route through node1, and loopback sources accepted back.
fn route_loopback_to_node1(c: &Cluster) {
    c.external.ip(&["addr", "del", "127.0.0.1/8", "dev", "lo"]).unwrap();
    c.external.ip(&["route", "add", "127.0.0.0/8", "via", &c.nodes[0].ipv4.to_string()]).unwrap();
    c.external.sysctl("net.ipv4.conf.all.route_localnet", "1").unwrap();
}

/// One TCP connection from the external host: what the peer said, or how it failed.
fn from_outside(c: &Cluster, to: SocketAddr) -> Result<String, Outcome> {
    c.external.run(|| {
        let mut s = std::net::TcpStream::connect_timeout(&to, T).map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Outcome::Refused,
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Outcome::Timeout,
            _ => Outcome::Other(e.to_string()),
        })?;
        s.set_read_timeout(Some(T)).unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        Ok(text)
    })
}

#[test]
fn loopback_from_the_network_reaches_neither_a_nodeport_nor_a_local_socket() {
    require_kernel!();
    let c = cluster("kguard");
    program(&c, IPTABLES_MODE);
    route_loopback_to_node1(&c);
    squatter(&c, localhost(LOOPBACK_ONLY_PORT), "secret");
    assert_eq!(from_outside(&c, localhost(LOOPBACK_ONLY_PORT)), Err(Outcome::Timeout), "the 127.0.0.1 listener");
    assert_eq!(from_outside(&c, localhost(TCP_NODE_PORT)), Err(Outcome::Timeout), "the NodePort on 127.0.0.1");
    // The node's own connections still pass.
    let got = c.nodes[0].ns.run(|| probe::tcp(localhost(TCP_NODE_PORT), T));
    assert!(answered_by_pod_b_through_node1(&c, &got), "{got:?}");
}

#[test]
fn control_without_the_guard_route_localnet_lets_the_network_in() {
    require_kernel!();
    let c = cluster("knoguard");
    program(&c, NONE_KEPT);
    c.nodes[0].ns.sysctl("net.ipv4.conf.all.route_localnet", "1").unwrap();
    route_loopback_to_node1(&c);
    squatter(&c, localhost(LOOPBACK_ONLY_PORT), "secret");
    assert_eq!(from_outside(&c, localhost(LOOPBACK_ONLY_PORT)), Ok("secret".to_string()), "CVE-2020-8558");
    assert_eq!(from_outside(&c, localhost(TCP_NODE_PORT)), Err(Outcome::Refused), "reached node1's stack");
}

/// A TCP segment with SYN and FIN set (a combination conntrack calls INVALID) from `src` to
/// `dst`, header checksum included; the kernel adds the IP header.
fn syn_fin(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    let mut tcp = Vec::with_capacity(20);
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&dport.to_be_bytes());
    tcp.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // sequence
    tcp.extend_from_slice(&0u32.to_be_bytes()); // acknowledgement
    tcp.extend_from_slice(&[5 << 4, 0x03]); // 20-byte header; FIN | SYN
    tcp.extend_from_slice(&64240u16.to_be_bytes()); // window
    tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| bytes.chunks(2).for_each(|w| sum += u32::from(u16::from_be_bytes([w[0], w[1]])));
    add(&src.octets());
    add(&dst.octets());
    add(&[0, 6]);
    add(&(tcp.len() as u16).to_be_bytes());
    add(&tcp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    tcp[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    tcp
}

/// How many SYN+FIN segments pod-a received (a counter before its own conntrack).
fn syn_fins_at_pod_a(c: &Cluster) -> u64 {
    let listed = c.pod("pod-a").ns.check(&["nft", "list", "table", "ip", "seen"]).unwrap();
    let count = listed.split("counter packets ").nth(1).and_then(|rest| rest.split(' ').next());
    count.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no counter in {listed}"))
}

/// Sends three SYN+FIN segments from the external host to pod-a, forwarded by node1.
fn send_invalid_to_pod_a(c: &Cluster) -> u64 {
    let pod_a = c.pod("pod-a");
    pod_a
        .ns
        .nft_stdin(
            &["-f", "-"],
            "table ip seen {\n chain pre {\n  type filter hook prerouting priority -400;\n  \
             tcp flags & (fin | syn) == fin | syn counter\n }\n}\n",
        )
        .unwrap();
    c.external.ip(&["route", "add", "10.244.1.0/24", "via", &c.nodes[0].ipv4.to_string()]).unwrap();
    let segment = syn_fin(topology::EXTERNAL_V4, pod_a.ipv4, 40000, ECHO_PORT);
    c.external.run(|| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::RAW, Some(socket2::Protocol::TCP)).unwrap();
        let to: SocketAddr = SocketAddr::new(IpAddr::V4(pod_a.ipv4), 0);
        for _ in 0..3 {
            s.send_to(&segment, &to.into()).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    syn_fins_at_pod_a(c)
}

#[test]
fn a_forwarded_invalid_segment_is_dropped() {
    require_kernel!();
    let c = cluster("kinv");
    program(&c, IPTABLES_MODE);
    assert_eq!(send_invalid_to_pod_a(&c), 0, "ct state invalid drop in forward");
}

#[test]
fn control_with_tcp_be_liberal_the_invalid_segment_reaches_the_pod() {
    require_kernel!();
    let c = cluster("kinvlib");
    program(&c, Kept { drop_invalid: false, ..IPTABLES_MODE });
    assert_eq!(send_invalid_to_pod_a(&c), 3, "no drop rule: forwarded as the kernel would");
}
