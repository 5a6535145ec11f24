//! The fast path in the kernel: the flowtable and its rule read back as nft lists them, an
//! established Service connection is offloaded (conntrack marks it `[OFFLOAD]`) and keeps
//! carrying data both ways, same-node and cross-node, masqueraded or not; a connection that
//! is not DNATed is never offloaded; and an endpoint's removal ends or keeps its offloaded
//! flows exactly as it does without the fast path (the conntrack cleanup deletes offloaded
//! entries too).
//!
//! The scenario suites (`scenarios`, `stale_udp`, `hostile`, `packets_core`) run a second time
//! with every table programmed this way (`VERDICT_FAST_PATH=1`, from `cargo xtask test`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;
use verdict_controller::conntrack::ConntrackCleaner;
use verdict_controller::sync::AfterSync;
use verdict_e2e::flows::{self, line_of};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_flowtable;
use verdict_e2e::scenario::{Cond, Eps, Lab, Svc};
use verdict_nft::text;

/// Where the stream servers listen in the pods: a port the echo servers do not hold (8080,
/// 9090 and their sessions port).
const STREAM_PORT: u16 = 7171;
const _: () = assert!(STREAM_PORT != verdict_e2e::topology::SESSION_PORT);

fn lab(tag: &str) -> Lab {
    let mut lab = Lab::new(tag, Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab");
    lab.fast_path = true;
    lab
}

/// A server in `ns` that echoes back whatever each connection sends, until it closes.
fn stream_server(ns: &Netns) {
    let listener = ns.run(|| TcpListener::bind(("0.0.0.0", STREAM_PORT)).expect("bind the stream server"));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

/// Sends `rounds` chunks of 256 KiB over `conn` and checks each comes back unchanged.
fn exchange(conn: &mut TcpStream, rounds: usize) {
    let mut back = vec![0u8; 256 * 1024];
    for round in 0..rounds {
        let chunk: Vec<u8> = (0..back.len()).map(|i| (i * 31 + round) as u8).collect();
        conn.write_all(&chunk).expect("send");
        conn.read_exact(&mut back).expect("the chunk comes back");
        assert!(back == chunk, "round {round}: the data came back changed");
    }
}

fn services(lab: &Lab) -> (Vec<Svc>, Vec<Eps>) {
    let services = vec![
        Svc::new("near", &["172.30.0.71"]).port("s", "TCP", 80),
        Svc::new("far", &["172.30.0.72"]).port("s", "TCP", 80),
        Svc::new("dns", &["172.30.0.73"]).port("dns", "UDP", 53),
    ];
    let slices = vec![
        Eps::v4("near").port("s", "TCP", STREAM_PORT).pod(lab, "a1", Cond::Ready),
        Eps::v4("far").port("s", "TCP", STREAM_PORT).pod(lab, "b1", Cond::Ready),
        Eps::v4("dns").port("dns", "UDP", 8080).pod(lab, "a2", Cond::Ready),
    ];
    (services, slices)
}

#[test]
fn the_flowtable_and_its_rule_read_back_as_nft_lists_them() {
    require_flowtable!();
    let lab = lab("fplist");
    let (s, e) = services(&lab);
    let rs = lab.program_objects(&s, &e);
    let ft = &rs.flowtables["fastpath"];
    assert!(ft.devices.contains("br0") && ft.devices.contains("eth0"), "node1's links joined: {ft:?}");
    let node = &lab.cluster.nodes[0].ns;
    let listed = node.check(&["nft", "list", "table", "inet", "kube-proxy"]).expect("nft list");
    assert_eq!(listed, text::listing(&rs), "nft lists the table as verdict wrote it");
    assert!(listed.contains("flow add @fastpath"), "{listed}");

    // Read back over netlink (as a restart adopts it): the same table, devices included.
    let observed = node
        .run(|| {
            let mut nl = verdict_nft::netlink::Netlink::open().unwrap();
            verdict_nft::observe::observe(&mut nl, "kube-proxy").unwrap()
        })
        .expect("the table exists");
    assert_eq!(observed.ruleset.flowtables, rs.flowtables);
    let again = verdict_nft::diff(Some(&observed.ruleset), &rs);
    assert!(again.transaction.is_empty(), "nothing to change: {}", again.transaction);

    // A device that leaves the wanted set is removed; the kernel holds exactly the rest.
    let fewer: Vec<&str> = ft.devices.iter().map(String::as_str).filter(|d| *d != "eth0").collect();
    let model = lab.model(lab.config(), &s, &e);
    let opts = verdict_layout::RenderOptions { fast_path: true, ..Default::default() };
    let rs = verdict_e2e::dataplane::program_with(node, &model, &opts, Some(&fewer));
    let listed = node.check(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();
    assert_eq!(listed, text::listing(&rs));
    assert!(!rs.flowtables["fastpath"].devices.contains("eth0"));
}

#[test]
fn established_service_connections_are_offloaded_and_carry_data() {
    require_flowtable!();
    let lab = lab("fpdata");
    stream_server(&lab.cluster.pod("a1").ns);
    stream_server(&lab.cluster.pod("b1").ns);
    let (s, e) = services(&lab);
    lab.program_objects(&s, &e);
    let node = &lab.cluster.nodes[0].ns;
    let c1 = lab.cluster.pod("c1");

    for (what, vip) in [("same node", "172.30.0.71:80"), ("cross-node", "172.30.0.72:80")] {
        let vip: SocketAddr = vip.parse().unwrap();
        let mut conn = c1.ns.run(|| TcpStream::connect_timeout(&vip, Duration::from_secs(2))).expect(what);
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        exchange(&mut conn, 4);
        let port = conn.local_addr().unwrap().port();
        let entry = line_of(&flows::entries(node), port).unwrap_or_default();
        assert!(entry.contains("[OFFLOAD]"), "{what}: the established connection is offloaded: {entry}");
        // Offloaded, it still carries data both ways.
        exchange(&mut conn, 16);
    }

    // Not DNATed (the pod's own address): never offloaded.
    let a1 = SocketAddr::new(lab.cluster.pod("a1").ipv4.into(), STREAM_PORT);
    let mut direct = c1.ns.run(|| TcpStream::connect_timeout(&a1, Duration::from_secs(2))).expect("direct");
    direct.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    exchange(&mut direct, 4);
    let entry = line_of(&flows::entries(node), direct.local_addr().unwrap().port()).unwrap_or_default();
    assert!(
        !entry.is_empty() && !entry.contains("[OFFLOAD]"),
        "a connection without DNAT stays on the slow path: {entry}"
    );

    // From outside the cluster (masqueraded to the node): offloaded too, and carries data.
    let ext = &lab.cluster.external;
    let vip: SocketAddr = "172.30.0.72:80".parse().unwrap();
    let mut conn = ext.run(|| TcpStream::connect_timeout(&vip, Duration::from_secs(2))).expect("from outside");
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    exchange(&mut conn, 4);
    let entry = line_of(&flows::entries(node), conn.local_addr().unwrap().port()).unwrap_or_default();
    assert!(entry.contains("[OFFLOAD]"), "the masqueraded connection is offloaded: {entry}");
    exchange(&mut conn, 8);
}

/// What happens to a TCP connection and a UDP flow, both established to a1, once a1 leaves
/// its Service and the conntrack cleanup has run: (the TCP connection still carries data, the
/// UDP flow's entry is still there, who answers the next datagram).
fn endpoint_removed(fast_path: bool) -> (bool, bool, String) {
    let mut lab = lab(if fast_path { "fpgone" } else { "fpgone0" });
    lab.fast_path = fast_path;
    stream_server(&lab.cluster.pod("a1").ns);
    let services = vec![
        Svc::new("near", &["172.30.0.71"]).port("s", "TCP", 80),
        Svc::new("dns", &["172.30.0.73"]).port("dns", "UDP", 53),
    ];
    let slices = |endpoint: &str| {
        vec![
            Eps::v4("near").port("s", "TCP", STREAM_PORT).pod(&lab, "a1", Cond::Ready),
            Eps::v4("dns").port("dns", "UDP", 8080).pod(&lab, endpoint, Cond::Ready),
        ]
    };
    let before = lab.model(lab.config(), &services, &slices("a1"));
    lab.program(&before);
    let node = &lab.cluster.nodes[0].ns;
    let c1 = lab.cluster.pod("c1");
    let vip: SocketAddr = "172.30.0.71:80".parse().unwrap();
    let mut conn = c1.ns.run(|| TcpStream::connect_timeout(&vip, Duration::from_secs(2))).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    exchange(&mut conn, 2);
    let dns = c1.ns.run(|| {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect("172.30.0.73:53").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        s
    });
    let ask = |s: &UdpSocket| -> String {
        let mut buf = [0u8; 256];
        let _ = s.send(b"q");
        s.recv(&mut buf).map_or_else(|e| e.kind().to_string(), |n| backend(&buf[..n]))
    };
    for _ in 0..5 {
        assert_eq!(ask(&dns), "a1");
    }
    let (tcp_port, udp_port) = (conn.local_addr().unwrap().port(), dns.local_addr().unwrap().port());
    let entries = flows::entries(node);
    for port in [tcp_port, udp_port] {
        let entry = line_of(&entries, port).unwrap_or_default();
        assert_eq!(entry.contains("[OFFLOAD]"), fast_path, "fast path {fast_path}: {entry}");
    }

    // a1 leaves the UDP Service for a2; the cleanup deletes the UDP flows that went to a1.
    let after = lab.model(lab.config(), &services, &slices("a2"));
    lab.program(&after);
    let changes = flows::changes(&before, &after);
    node.run(|| ConntrackCleaner::new().after_sync(&after, false, &changes));
    let udp_entry_kept = line_of(&flows::entries(node), udp_port).is_some_and(|e| e.contains("sport=8080"));
    // The flowtable lets go of a deleted entry's flow within its garbage collection (a second).
    std::thread::sleep(Duration::from_millis(1500));
    let answered_by = ask(&dns);
    let tcp_alive = conn.write_all(&[7u8; 1024]).is_ok() && {
        let mut back = [0u8; 1024];
        conn.read_exact(&mut back).is_ok()
    };
    (tcp_alive, udp_entry_kept, answered_by)
}

fn backend(reply: &[u8]) -> String {
    verdict_e2e::probe::parse_reply(&String::from_utf8_lossy(reply)).map_or_else(|| "garbage".into(), |r| r.backend)
}

#[test]
fn an_endpoint_removed_ends_or_keeps_offloaded_flows_exactly_as_without_the_fast_path() {
    require_flowtable!();
    let without = endpoint_removed(false);
    let with = endpoint_removed(true);
    // Upstream's contract: an established TCP connection is left to its endpoint (it ends
    // when the pod does); a UDP flow is moved by the cleanup to the Service's new endpoint.
    assert_eq!(without, (true, false, "a2".to_string()), "without the fast path");
    assert_eq!(with, without, "with the fast path, the same");
}
