//! A tiny echo server for test pods: every TCP, UDP and SCTP request is answered with
//! `<name> peer=<source address>:<source port>`, so a test sees which backend answered and
//! whether the source was masqueraded.
//!
//! Usage: verdict-echo NAME PORT [PORT...] [--sessions PORT]
//!          each PORT is served over TCP, UDP and SCTP, on IPv4 and IPv6: a TCP connection
//!          gets its one line at once and is closed;
//!          the `--sessions` port is served over TCP and UDP: a TCP connection stays open and
//!          every line the client sends is answered with one line, until the client closes
//!          (the steady-traffic harness's long-lived connections, `verdict_e2e::steady`)
//!        verdict-echo probe IP:PORT [...]    (the client side, see `verdict_e2e::probe_cli`)

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::thread;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("probe") {
        if let Err(e) = verdict_e2e::probe_cli::run(&args[2..]) {
            eprintln!("verdict-echo probe: FAILED: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if args.len() < 3 {
        eprintln!("usage: verdict-echo NAME PORT [PORT...] [--sessions PORT]");
        std::process::exit(64);
    }
    let name = args[1].clone();
    let (mut ports, mut sessions) = (Vec::new(), Vec::new());
    let mut rest = args[2..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--sessions" => sessions.push(port_arg(rest.next().map_or("(missing)", String::as_str))),
            port => ports.push(port_arg(port)),
        }
    }
    let mut handles = Vec::new();
    for ip in [std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), std::net::IpAddr::V6(Ipv6Addr::UNSPECIFIED)] {
        for &port in &ports {
            let addr = SocketAddr::new(ip, port);
            handles.push(serve_tcp(name.clone(), addr));
            handles.push(serve_udp(name.clone(), addr));
            if let Some(h) = serve_sctp(name.clone(), addr) {
                handles.push(h);
            }
        }
        for &port in &sessions {
            let addr = SocketAddr::new(ip, port);
            handles.push(serve_sessions(name.clone(), addr));
            handles.push(serve_udp(name.clone(), addr));
        }
    }
    for h in handles {
        let _ = h.join();
    }
}

fn port_arg(arg: &str) -> u16 {
    arg.parse().unwrap_or_else(|_| {
        eprintln!("verdict-echo: {arg:?} is not a port");
        std::process::exit(64)
    })
}

fn v6only(addr: &SocketAddr) -> socket2::Socket {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, None).expect("socket");
    if addr.is_ipv6() {
        s.set_only_v6(true).expect("IPV6_V6ONLY");
    }
    s
}

fn serve_tcp(name: String, addr: SocketAddr) -> thread::JoinHandle<()> {
    let s = v6only(&addr);
    s.set_reuse_address(true).expect("SO_REUSEADDR");
    s.bind(&addr.into()).unwrap_or_else(|e| panic!("bind tcp {addr}: {e}"));
    s.listen(1024).expect("listen");
    let listener: TcpListener = s.into();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let peer = conn.peer_addr().map(|p| p.to_string()).unwrap_or_default();
            let mut conn = conn;
            let _ = writeln!(conn, "{name} peer={}", bare(&peer));
        }
    })
}

/// Long-lived connections: each on a thread of its own, every line read answered with one
/// line, closed when the client closes (or resets).
fn serve_sessions(name: String, addr: SocketAddr) -> thread::JoinHandle<()> {
    let s = v6only(&addr);
    s.set_reuse_address(true).expect("SO_REUSEADDR");
    s.bind(&addr.into()).unwrap_or_else(|e| panic!("bind tcp {addr}: {e}"));
    s.listen(1024).expect("listen");
    let listener: TcpListener = s.into();
    thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let name = name.clone();
            thread::spawn(move || session(&name, conn));
        }
    })
}

fn session(name: &str, conn: std::net::TcpStream) {
    use std::io::BufRead;
    let peer = conn.peer_addr().map(|p| p.to_string()).unwrap_or_default();
    let reply = format!("{name} peer={}\n", bare(&peer));
    let Ok(mut writer) = conn.try_clone() else { return };
    let mut reader = std::io::BufReader::new(conn);
    let mut line = String::new();
    while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
        if writer.write_all(reply.as_bytes()).is_err() {
            break;
        }
        line.clear();
    }
}

fn serve_udp(name: String, addr: SocketAddr) -> thread::JoinHandle<()> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, None).expect("socket");
    if addr.is_ipv6() {
        s.set_only_v6(true).expect("IPV6_V6ONLY");
    }
    s.bind(&addr.into()).unwrap_or_else(|e| panic!("bind udp {addr}: {e}"));
    let sock: UdpSocket = s.into();
    thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((_, peer)) = sock.recv_from(&mut buf) {
            let reply = format!("{name} peer={}\n", bare(&peer.to_string()));
            let _ = sock.send_to(reply.as_bytes(), peer);
        }
    })
}

/// SCTP one-to-one sockets; `None` when the kernel has no SCTP.
fn serve_sctp(name: String, addr: SocketAddr) -> Option<thread::JoinHandle<()>> {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::from(132))).ok()?;
    if addr.is_ipv6() {
        s.set_only_v6(true).ok()?;
    }
    s.set_reuse_address(true).ok()?;
    s.bind(&addr.into()).ok()?;
    s.listen(128).ok()?;
    Some(thread::spawn(move || {
        loop {
            let Ok((conn, peer)) = s.accept() else { break };
            let peer = peer.as_socket().map(|p| p.to_string()).unwrap_or_default();
            let reply = format!("{name} peer={}\n", bare(&peer));
            let _ = (&conn).write(reply.as_bytes());
            // Let the client read before the association goes away.
            let mut buf = [0u8; 16];
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let _ = std::io::Read::read(&mut (&conn), &mut buf);
        }
    }))
}

/// `ip:port` without IPv6 brackets; the port is split off at the last colon.
fn bare(peer: &str) -> String {
    match peer.parse::<SocketAddr>() {
        Ok(sa) => format!("{}:{}", sa.ip(), sa.port()),
        Err(_) => peer.to_string(),
    }
}
