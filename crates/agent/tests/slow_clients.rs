//! Clients cannot wear the HTTP servers down (root only, each in a network namespace of its
//! own): 300 clients (from 300 addresses) that send half a request line and stop hold neither
//! `/healthz` nor a Service's health check port, and are closed after the header-read timeout; at its cap the
//! shared serve path closes the least recently active connection for a new one (never the new
//! one), and refuses oversized heads. `connection_flood.rs` holds more than any cap.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming};
use socket2::{Domain, Socket, Type};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use verdict_controller::http_serve::{self, Caps, Connections, Handler, Limits};
use verdict_e2e::agent_process::{AgentLaunch, AgentProcess};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

/// The agent's header-read timeout (`Limits::default()`).
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const HEALTH_CHECK_PORT: u16 = 30999;
/// The node's address, where health check ports listen.
const NODE_IP: [u8; 4] = [192, 168, 50, 11];
const LOCALHOST: [u8; 4] = [127, 0, 0, 1];

/// The agent in manifests mode, with one eTP=Local Service whose endpoint is on this node.
fn start_agent(ns: &Netns, scratch: &TempDir) -> AgentProcess {
    let dir = scratch.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("objects.yaml"),
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node1}}\nstatus: {{addresses: [{{type: InternalIP, address: 192.168.50.11}}]}}\n\
             ---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: demo}}\n\
             spec: {{type: LoadBalancer, clusterIP: 172.30.0.10, externalTrafficPolicy: Local, healthCheckNodePort: {HEALTH_CHECK_PORT}, \
             ports: [{{name: http, port: 80, nodePort: 30080}}]}}\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: web-1, namespace: demo, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\n\
             ports: [{{name: http, port: 8080}}]\nendpoints: [{{addresses: [10.244.1.10], nodeName: node1, conditions: {{ready: true}}}}]\n"
        ),
    )
    .unwrap();
    AgentLaunch::new(ns, env!("CARGO_BIN_EXE_verdict"), "slow-clients")
        .unwrap()
        .arg("run")
        .arg("--manifests")
        .arg(&dir)
        .args(["--hostname-override", "node1", "--cluster-cidr", "10.244.0.0/16"])
        .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "0.0.0.0:10256"])
        .args(["--min-sync-period", "100ms", "--sync-period", "1s", "--state-dir"])
        .arg(scratch.path().join("state"))
        .spawn()
        .unwrap()
}

/// GET `path` on `ip`:`port` (call inside the namespace): the status, if an answer came.
fn status(ip: [u8; 4], port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// `n` clients that send half a request line to `ip`:`port` and never finish it, from `n`
/// addresses of 10.77.0.0/16 (one place each: no client's share is exceeded).
fn slow_clients(ip: [u8; 4], port: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let source = std::net::Ipv4Addr::new(10, 77, (i / 250) as u8, 1 + (i % 250) as u8);
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket.bind(&std::net::SocketAddr::from((source, 0)).into()).unwrap();
            socket
                .connect(&std::net::SocketAddr::from((ip, port)).into())
                .unwrap_or_else(|e| panic!("slow client {i}: {e}"));
            let mut s: TcpStream = socket.into();
            s.write_all(b"GET /heal").unwrap();
            s
        })
        .collect()
}

/// Whether the server closed `s`: a read ends (EOF, a reset, or a 408 then EOF) instead of
/// waiting.
fn closed_by_server(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = Vec::new();
    match s.read_to_end(&mut buf) {
        Ok(_) => true,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

/// Asserts that `port` answers `path` with 200 within two seconds.
fn answers_quickly(ip: [u8; 4], port: u16, path: &str) {
    let start = Instant::now();
    assert_eq!(status(ip, port, path), Some(200), "{path} on port {port} while 300 slow clients hold it");
    assert!(start.elapsed() < Duration::from_secs(2), "{path} on port {port} took {:?}", start.elapsed());
}

#[test]
fn three_hundred_slow_clients_hold_neither_healthz_nor_a_health_check_port() {
    require_kernel!();
    let ns = Netns::new("slow").unwrap();
    ns.ip(&["addr", "add", "192.168.50.11/32", "dev", "lo"]).unwrap();
    ns.ip(&["route", "add", "local", "10.77.0.0/16", "dev", "lo"]).unwrap();
    let scratch = TempDir::with_prefix("verdict-slow-clients-").unwrap();
    let agent = start_agent(&ns, &scratch);
    agent.wait("/healthz and the health check port", || {
        ns.run(|| {
            status(LOCALHOST, 10256, "/healthz") == Some(200) && status(NODE_IP, HEALTH_CHECK_PORT, "/") == Some(200)
        })
    });

    let opened = Instant::now();
    let mut held = ns.run(|| {
        let mut held = slow_clients(NODE_IP, 10256, 300);
        answers_quickly(LOCALHOST, 10256, "/healthz");
        held.extend(slow_clients(NODE_IP, HEALTH_CHECK_PORT, 300));
        answers_quickly(NODE_IP, HEALTH_CHECK_PORT, "/");
        answers_quickly(LOCALHOST, 10256, "/healthz");
        held
    });
    // Before the timeout they are still open: what closes them is the timer, nothing else.
    assert!(!closed_by_server(&mut held[0], Duration::from_millis(200)), "closed before the timeout");
    let closed_by = opened + HEADER_TIMEOUT + Duration::from_secs(3);
    for (i, s) in held.iter_mut().enumerate() {
        let wait = closed_by.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        assert!(closed_by_server(s, wait), "slow client {i} still open {:?} after it connected", opened.elapsed());
    }
}

/// The shared serve path itself, with small limits, on a runtime of a thread in `ns`.
fn serve_in(ns: &Netns, limits: Limits, caps: Caps, f: impl FnOnce(u16) + Send) {
    ns.run(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let handler: Handler = Arc::new(|_req: &Request<Incoming>| Response::new(Full::new(Bytes::from("ok"))));
        let server = rt.spawn(http_serve::serve(listener, limits, Connections::new(caps), handler));
        f(port);
        server.abort();
    });
}

#[test]
fn at_the_cap_a_new_connection_takes_the_oldest_place_and_heads_are_bounded() {
    require_kernel!();
    let ns = Netns::new("cap").unwrap();
    ns.ip(&["route", "add", "local", "10.77.0.0/16", "dev", "lo"]).unwrap();
    let limits = Limits { header_read_timeout: Duration::from_secs(1), max_header_bytes: 1024 };
    let caps = Caps { total: 3, per_source: 3, own: 3, files: None };
    serve_in(&ns, limits, caps, |port| {
        let mut held = slow_clients(LOCALHOST, port, 3);
        // Let the server take the three before the fourth comes.
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        // The fourth is served, at once; the oldest held one made room for it.
        assert_eq!(status(LOCALHOST, port, "/"), Some(200));
        assert!(start.elapsed() < Duration::from_millis(500), "took {:?}", start.elapsed());
        assert!(closed_by_server(&mut held[0], Duration::from_millis(500)), "the oldest held connection is open");
        assert!(!closed_by_server(&mut held[2], Duration::from_millis(100)), "a newer held connection was closed");

        // The timeout closes the others.
        for s in &mut held[1..] {
            assert!(closed_by_server(s, Duration::from_secs(3)), "a slow client outlived the header timeout");
        }
        assert_eq!(status(LOCALHOST, port, "/"), Some(200));

        // A head over the limit is refused, not buffered.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let big = "a".repeat(4096);
        let _ = write!(s, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        assert!(text.starts_with("HTTP/1.1 431"), "an oversized head got: {text:?}");
    });
}
