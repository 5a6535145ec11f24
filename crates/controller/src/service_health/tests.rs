//! The listeners over real TCP on 127.0.0.1.

use super::*;
use crate::health::ProxyHealth;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

fn healthy() -> Arc<ProxyHealth> {
    Arc::new(ProxyHealth::new(Duration::from_secs(60)))
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// Distinct ports nobody listens on right now.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind((LOCALHOST, 0)).unwrap()).collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

fn target(ns: &str, name: &str, port: u16, local_endpoints: usize) -> HealthTarget {
    HealthTarget { namespace: ns.into(), name: name.into(), port, local_endpoints }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

fn try_get(port: u16, path: &str) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::new(LOCALHOST, port), Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete HTTP answer");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    Ok(Answer { status, headers, body: body.to_string() })
}

fn get(port: u16) -> Answer {
    try_get(port, "/").unwrap_or_else(|e| panic!("GET 127.0.0.1:{port}: {e}"))
}

fn refused(port: u16) -> bool {
    matches!(TcpStream::connect((LOCALHOST, port)), Err(e) if e.kind() == ErrorKind::ConnectionRefused)
}

#[test]
fn a_service_with_a_local_ready_endpoint_answers_200() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let port = free_port();
    server.sync(&[target("default", "web", port, 1)], &[LOCALHOST]);
    assert_eq!(server.listening(), vec![(LOCALHOST, port)]);

    for path in ["/", "/healthz", "/anything/else?x=1"] {
        let a = try_get(port, path).unwrap();
        assert_eq!(a.status, 200, "{path}: {a:?}");
        assert_eq!(a.header("Content-Type"), Some("application/json"));
        assert_eq!(a.header("X-Content-Type-Options"), Some("nosniff"));
        assert_eq!(a.header("X-Load-Balancing-Endpoint-Weight"), Some("1"));
        assert_eq!(
            a.body,
            r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":1,"serviceProxyHealthy":true}"#
        );
    }
}

#[test]
fn a_service_without_local_endpoints_answers_503() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let port = free_port();
    server.sync(&[target("default", "web", port, 0)], &[LOCALHOST]);
    let a = get(port);
    assert_eq!(a.status, 503);
    assert_eq!(a.header("X-Load-Balancing-Endpoint-Weight"), Some("0"));
    assert_eq!(
        a.body,
        r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":0,"serviceProxyHealthy":true}"#
    );
}

#[test]
fn an_unhealthy_proxy_answers_503_even_with_local_endpoints() {
    let rt = runtime();
    let proxy = Arc::new(ProxyHealth::new(Duration::from_millis(1)));
    let server = ServiceHealthServer::new(rt.handle().clone(), proxy.clone());
    let port = free_port();
    server.sync(&[target("default", "web", port, 2)], &[LOCALHOST]);
    proxy.queued();
    std::thread::sleep(Duration::from_millis(20));
    let a = get(port);
    assert_eq!(a.status, 503);
    assert_eq!(a.header("X-Load-Balancing-Endpoint-Weight"), Some("2"));
    assert_eq!(
        a.body,
        r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":2,"serviceProxyHealthy":false}"#
    );
    proxy.updated();
    assert_eq!(get(port).status, 200, "healthy again");
}

#[test]
fn counts_change_on_sync_without_reopening() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let port = free_port();
    server.sync(&[target("default", "web", port, 1)], &[LOCALHOST]);
    assert_eq!(get(port).status, 200);
    server.sync(&[target("default", "web", port, 0)], &[LOCALHOST]);
    let a = get(port);
    assert_eq!((a.status, a.header("X-Load-Balancing-Endpoint-Weight")), (503, Some("0")));
    server.sync(&[target("default", "web", port, 3)], &[LOCALHOST]);
    let a = get(port);
    assert_eq!((a.status, a.header("X-Load-Balancing-Endpoint-Weight")), (200, Some("3")));
    assert_eq!(server.listening(), vec![(LOCALHOST, port)]);
}

#[test]
fn the_listener_closes_when_the_target_disappears() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let [p1, p2] = free_ports();
    server.sync(&[target("default", "a", p1, 1), target("default", "b", p2, 1)], &[LOCALHOST]);
    assert_eq!(get(p1).status, 200);
    assert_eq!(get(p2).status, 200);

    server.sync(&[target("default", "b", p2, 1)], &[LOCALHOST]);
    assert!(refused(p1), "127.0.0.1:{p1} still accepts connections");
    assert_eq!(get(p2).status, 200, "the other Service is untouched");
    assert_eq!(server.listening(), vec![(LOCALHOST, p2)]);

    server.sync(&[], &[LOCALHOST]);
    assert!(refused(p2));
    assert_eq!(server.listening(), vec![]);
}

#[test]
fn a_port_change_moves_the_listener() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let [old, new] = free_ports();
    server.sync(&[target("default", "web", old, 1)], &[LOCALHOST]);
    assert_eq!(get(old).status, 200);
    server.sync(&[target("default", "web", new, 1)], &[LOCALHOST]);
    assert!(refused(old));
    assert_eq!(get(new).status, 200);
    assert_eq!(server.listening(), vec![(LOCALHOST, new)]);
}

#[test]
fn a_port_handed_from_one_service_to_another_in_one_sync_is_reopened() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let port = free_port();
    server.sync(&[target("default", "old", port, 1)], &[LOCALHOST]);
    assert!(get(port).body.contains(r#""name":"old""#));
    server.sync(&[target("default", "new", port, 1)], &[LOCALHOST]);
    assert!(get(port).body.contains(r#""name":"new""#));
}

#[test]
fn a_busy_port_does_not_stop_the_others_and_is_retried_on_a_later_sync() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let busy = TcpListener::bind((LOCALHOST, 0)).unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let other = free_port();
    let targets = [target("default", "busy", busy_port, 1), target("default", "other", other, 1)];

    server.sync(&targets, &[LOCALHOST]);
    assert_eq!(server.listening(), vec![(LOCALHOST, other)]);
    assert_eq!(get(other).status, 200);

    server.sync(&targets, &[LOCALHOST]);
    assert_eq!(server.listening(), vec![(LOCALHOST, other)], "still busy");

    drop(busy);
    server.sync(&targets, &[LOCALHOST]);
    let mut expected = vec![(LOCALHOST, busy_port), (LOCALHOST, other)];
    expected.sort();
    assert_eq!(server.listening(), expected);
    let a = get(busy_port);
    assert_eq!(a.status, 200);
    assert!(a.body.contains(r#""name":"busy""#), "{}", a.body);
    assert_eq!(get(other).status, 200);
}

#[test]
fn a_busy_port_is_announced_once_per_distinct_failure() {
    let rt = runtime();
    let (tx, rx) = std::sync::mpsc::channel();
    let server =
        ServiceHealthServer::new(rt.handle().clone(), healthy()).with_notices("node-a", move |n| tx.send(n).unwrap());
    let busy = TcpListener::bind((LOCALHOST, 0)).unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let also_busy = TcpListener::bind((LOCALHOST, 0)).unwrap();
    let also_busy_port = also_busy.local_addr().unwrap().port();

    for _ in 0..3 {
        server.sync(&[target("default", "web", busy_port, 1)], &[LOCALHOST]);
    }
    let notices: Vec<_> = rx.try_iter().collect();
    assert_eq!(notices.len(), 1, "three failed syncs, one announcement: {notices:?}");
    let p = &notices[0].problems[0];
    assert_eq!((p.reason, p.object.to_string()), (FAILED_TO_START, "Service default/web".to_string()));
    assert!(
        p.message
            .starts_with(&format!("node node-a failed to start healthcheck \"default/web\" on port {busy_port}: ")),
        "{}",
        p.message
    );

    // Another port, busy too: a different failure, announced.
    server.sync(&[target("default", "web", also_busy_port, 1)], &[LOCALHOST]);
    let notices: Vec<_> = rx.try_iter().collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].problems[0].message.contains(&also_busy_port.to_string()), "{notices:?}");

    // Freed: it opens, and nothing is announced.
    drop(also_busy);
    server.sync(&[target("default", "web", also_busy_port, 1)], &[LOCALHOST]);
    assert_eq!(get(also_busy_port).status, 200);
    assert_eq!(rx.try_iter().count(), 0);
    drop(busy);
}

#[test]
fn no_bind_addresses_listens_on_every_address() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let port = free_port();
    server.sync(&[target("default", "web", port, 1)], &[]);
    let listening = server.listening();
    assert!(listening.contains(&(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)), "{listening:?}");
    assert_eq!(get(port).status, 200);
    drop(server);
}

#[test]
fn dropping_the_server_closes_its_listeners() {
    let rt = runtime();
    let server = ServiceHealthServer::new(rt.handle().clone(), healthy());
    let port = free_port();
    server.sync(&[target("default", "web", port, 1)], &[LOCALHOST]);
    assert_eq!(get(port).status, 200);
    drop(server);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !refused(port) {
        assert!(std::time::Instant::now() < deadline, "127.0.0.1:{port} still open");
        std::thread::sleep(Duration::from_millis(5));
    }
}
