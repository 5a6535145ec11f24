//! The two stale-UDP holes upstream kube-proxy closed in 2026, with a one-way sender that never
//! stops (statsd, syslog): every datagram refreshes its conntrack entry, so the entry outlives
//! any change to the ruleset unless the conntrack cleanup deletes it.
//! - kubernetes #139628: a UDP Service scaled to zero serving endpoints kept its flows on the
//!   deleted pod; the sender must meet the reject rule instead.
//! - kubernetes #141371: a deleted UDP Service kept its flows on the old endpoint; the sender
//!   must no longer be DNATed at all.
//!
//! Each test also holds a TCP connection and a UDP flow of another Service, which the cleanup
//! must leave exactly as they were (same conntrack entry ids).

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use verdict_controller::conntrack::ConntrackCleaner;
use verdict_controller::sync::AfterSync;
use verdict_e2e::flows::{self, entry_of, line_of};
use verdict_e2e::require_kernel;
use verdict_e2e::scenario::{Cond, Eps, Lab, Svc};

const STATSD: &str = "172.30.0.61:8125";
const OTHER: &str = "172.30.0.62:53";
const WEB: &str = "172.30.0.63:80";

fn lab(tag: &str) -> Lab {
    Lab::new(tag, Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab")
}

fn statsd() -> Svc {
    Svc::new("statsd", &["172.30.0.61"]).port("statsd", "UDP", 8125)
}

/// The Services whose flows must survive: `other` (UDP, b1) and `web` (TCP, b2).
fn bystanders(lab: &Lab) -> (Vec<Svc>, Vec<Eps>) {
    let services = vec![
        Svc::new("other", &["172.30.0.62"]).port("dns", "UDP", 53),
        Svc::new("web", &["172.30.0.63"]).port("http", "TCP", 80),
    ];
    let slices = vec![
        Eps::v4("other").port("dns", "UDP", 8080).pod(lab, "b1", Cond::Ready),
        Eps::v4("web").port("http", "TCP", 8080).pod(lab, "b2", Cond::Ready),
    ];
    (services, slices)
}

/// A client in pod c1 that sends a datagram every 20 ms on one socket (one conntrack entry)
/// and never waits for an answer. Whatever comes back (the echo servers answer with their
/// name; a reject comes back as ECONNREFUSED) is recorded, in order, so the test can see
/// where the datagrams went.
struct OneWaySender {
    local: SocketAddr,
    heard: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OneWaySender {
    fn start(lab: &Lab, to: &str) -> OneWaySender {
        let c1 = lab.cluster.pod("c1");
        let to: SocketAddr = to.parse().unwrap();
        let socket = c1.ns.run(|| {
            let s = UdpSocket::bind((c1.ipv4, 0)).unwrap();
            s.connect(to).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        });
        let local = socket.local_addr().unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (heard, stop) = (heard.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    let note = |what: String| heard.lock().unwrap().push(what);
                    if let Err(e) = socket.send(b"metric:1|c") {
                        note(kind(&e));
                    }
                    loop {
                        match socket.recv(&mut buf) {
                            Ok(n) => note(backend(&buf[..n])),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(e) => note(kind(&e)),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        OneWaySender { local, heard, stop, thread: Some(thread) }
    }

    /// What was heard from now on, waiting until `done` says enough (at most 10 s).
    fn hear_until(&self, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let start = self.heard.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now: Vec<String> = self.heard.lock().unwrap()[start..].to_vec();
            if done(&now) || Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OneWaySender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn backend(reply: &[u8]) -> String {
    verdict_e2e::probe::parse_reply(&String::from_utf8_lossy(reply)).map_or_else(|| "garbage".into(), |r| r.backend)
}

fn kind(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "refused".into(),
        _ => format!("error: {e}"),
    }
}

/// Node1's conntrack entries.
fn conntrack(lab: &Lab) -> Vec<String> {
    flows::entries(&lab.cluster.nodes[0].ns)
}

/// Programs `before`, starts the sender to statsd and the bystander flows, programs `after`,
/// shows that the sender still reaches a1, runs the cleanup, and returns the sender, what it
/// heard after the cleanup (until `done`), and the bystanders' entries before and after.
fn scenario(lab: &Lab, after_statsd: Option<Eps>, done: impl Fn(&[String]) -> bool) -> (OneWaySender, Vec<String>) {
    let (mut services, mut slices) = bystanders(lab);
    let before = {
        let mut s = services.clone();
        s.push(statsd());
        let mut e = slices.clone();
        e.push(Eps::v4("statsd").port("statsd", "UDP", 8080).pod(lab, "a1", Cond::Ready));
        lab.model(lab.config(), &s, &e)
    };
    lab.program(&before);

    let sender = OneWaySender::start(lab, STATSD);
    let heard = sender.hear_until(|h| h.iter().filter(|b| *b == "a1").count() >= 3);
    assert!(heard.iter().filter(|b| *b == "a1").count() >= 3, "the sender reaches a1 at first: {heard:?}");
    let other = OneWaySender::start(lab, OTHER);
    let heard = other.hear_until(|h| h.iter().any(|b| b == "b1"));
    assert!(heard.iter().any(|b| b == "b1"), "the other Service answers: {heard:?}");
    let c1 = lab.cluster.pod("c1");
    let tcp = c1.ns.run(|| TcpStream::connect_timeout(&WEB.parse().unwrap(), Duration::from_secs(2)).expect("web"));
    let tcp_port = tcp.local_addr().unwrap().port();

    if let Some(slice) = after_statsd {
        services.push(statsd());
        slices.push(slice);
    }
    let after = lab.model(lab.config(), &services, &slices);
    lab.program(&after);
    let heard = sender.hear_until(|h| h.iter().filter(|b| *b == "a1").count() >= 5);
    assert!(
        heard.iter().all(|b| b == "a1") && heard.len() >= 5,
        "without the cleanup the sender's entry keeps it on a1, whatever the ruleset says: {heard:?}"
    );

    let entries = conntrack(lab);
    let kept: Vec<Option<String>> =
        [other.local.port(), tcp_port].iter().map(|&port| entry_of(&entries, port)).collect();
    assert!(kept.iter().all(Option::is_some), "the bystanders' entries exist: {entries:#?}");

    let changes = flows::changes(&before, &after);
    lab.cluster.nodes[0].ns.run(|| ConntrackCleaner::new().after_sync(&after, false, &changes));

    let heard = sender.hear_until(done);
    let entries = conntrack(lab);
    let now: Vec<Option<String>> =
        [other.local.port(), tcp_port].iter().map(|&port| entry_of(&entries, port)).collect();
    assert_eq!(now, kept, "the other Service's UDP flow and the TCP connection are untouched");
    drop(other);
    drop(tcp);
    (sender, heard)
}

#[test]
fn a_udp_service_scaled_to_zero_rejects_a_sender_that_never_stops() {
    require_kernel!();
    let lab = lab("udp0");
    let empty = Eps::v4("statsd").port("statsd", "UDP", 8080);
    let (sender, heard) = scenario(&lab, Some(empty), |h| h.iter().filter(|b| *b == "refused").count() >= 3);
    assert!(heard.iter().any(|b| b == "refused"), "the sender is never rejected: {heard:?}");
    // An answer a1 gave before the cleanup may still wait in the socket behind the reject's
    // error, which a read reports first; a second later none is left, and none comes.
    let since = Instant::now();
    let late = sender.hear_until(|_| since.elapsed() > Duration::from_secs(1));
    assert!(
        late.iter().any(|b| b == "refused") && !late.iter().any(|b| b == "a1"),
        "once rejected, the sender stays rejected and nothing reaches a1: {heard:?} then {late:?}"
    );
    let entry = line_of(&conntrack(&lab), sender.local.port());
    let a1 = format!("src={} ", lab.cluster.pod("a1").ipv4);
    assert!(!entry.as_deref().unwrap_or("").contains(&a1), "no entry of the sender is DNATed to a1: {entry:?}");
}

#[test]
fn a_deleted_udp_service_no_longer_reaches_its_old_endpoint() {
    require_kernel!();
    let lab = lab("udpdel");
    // The sender's entry is deleted; its next datagrams are not handled (no DNAT): no answer.
    let a1 = format!("src={} ", lab.cluster.pod("a1").ipv4);
    let (sender, heard) = scenario(&lab, None, |h| h.len() >= 20 || h.iter().any(|b| b != "a1"));
    std::thread::sleep(Duration::from_millis(500));
    let second = Instant::now();
    let late = sender.hear_until(|_| second.elapsed() > Duration::from_secs(1));
    assert!(
        late.iter().all(|b| b != "a1"),
        "half a second after the cleanup the sender still reaches a1: {heard:?} then {late:?}"
    );
    // If the datagrams are routed anywhere, their entry is not DNATed.
    let entry = line_of(&conntrack(&lab), sender.local.port());
    assert!(!entry.as_deref().unwrap_or("").contains(&a1), "the sender's entry is not DNATed to a1: {entry:?}");
}
