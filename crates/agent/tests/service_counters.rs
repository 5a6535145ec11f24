//! `--service-counters`: real connections through the agent's table are counted in the kernel
//! and read from the agent's `/metrics` (the real binary against the test API server), one
//! test per outcome: accepted (a DNATed connection counts once, however many packets it
//! carries), rejected (a Service without endpoints) and firewalled (a load balancer IP
//! reached from outside `loadBalancerSourceRanges`). Only labelled Services are counted, and
//! counters survive an agent restart, the warm one through `--state-dir` included, which
//! writes nothing (root only).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use verdict_e2e::agent_process::AgentProcess;
use verdict_e2e::apilab::{ApiLab, labelled, load_balancer, node, service, slice};
use verdict_e2e::endtoend::agent::{self, saved_state};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

const ENDPOINTS: [&str; 2] = ["10.0.1.1", "10.0.1.2"];
const METRICS: &str = "127.0.0.1:10249";
const LABEL: (&str, &str) = ("verdict.dev/count", "yes");

/// The agent (killed by its own PID when dropped), counting labelled Services; with `state`,
/// it saves the table's state there on SIGTERM and adopts it at start.
fn start(lab: &ApiLab, dir: &Path, state: Option<&Path>) -> AgentProcess {
    let kubeconfig = dir.join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig).unwrap();
    let state = state.map(|p| p.display().to_string()).unwrap_or_default();
    let selector = format!("{}={}", LABEL.0, LABEL.1);
    let args = [
        "--min-sync-period",
        "50ms",
        "--cleanup-leftovers=false",
        "--state-dir",
        &state,
        "--service-counters",
        "labelled",
        "--service-counters-selector",
        &selector,
        "--service-counters-period",
        "100ms",
    ];
    agent::start(&lab.ns, Path::new(env!("CARGO_BIN_EXE_verdict")), &kubeconfig, "n1", &args).unwrap()
}

/// Endpoints on the node's loopback, answering with their address after reading one line.
fn endpoints(ns: &Netns) {
    for ep in ENDPOINTS {
        ns.ip(&["addr", "add", &format!("{ep}/32"), "dev", "lo"]).unwrap();
        let listener = ns.run(|| TcpListener::bind(format!("{ep}:8080"))).unwrap();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut line = [0u8; 64];
                let _ = conn.read(&mut line);
                let _ = conn.write_all(ep.as_bytes());
            }
        });
    }
}

/// What a connection attempt met.
#[derive(Debug, PartialEq)]
enum Met {
    Answer(String),
    Refused,
    TimedOut,
}

/// One connection from inside the namespace; a connected one sends a line and reads the
/// answer (several packets each way).
fn connect(ns: &Netns, dst: &str, timeout: Duration) -> Met {
    let addr: SocketAddr = dst.parse().unwrap();
    ns.run(|| match TcpStream::connect_timeout(&addr, timeout) {
        Ok(mut s) => {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            s.write_all(b"hello\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).expect("the endpoint's answer");
            Met::Answer(out)
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Met::Refused,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Met::TimedOut,
        Err(e) => panic!("connect to {dst}: {e}"),
    })
}

/// The agent's `/metrics`, fetched from inside the namespace.
fn scrape(ns: &Netns) -> Option<String> {
    ns.run(|| {
        let mut s = TcpStream::connect_timeout(&METRICS.parse().unwrap(), Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    })
}

/// The `verdict_service_connections_total` samples: (namespace/service:port outcome, value).
fn samples(metrics: &str) -> Vec<(String, u64)> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("verdict_service_connections_total{"))
        .map(|l| {
            let (labels, value) = l.rsplit_once("} ").expect("a sample");
            let label = |k: &str| {
                let start = labels.find(&format!("{k}=\"")).expect(k) + k.len() + 2;
                labels[start..].split('"').next().unwrap().to_string()
            };
            let id = format!("{}/{}:{} {}", label("namespace"), label("service"), label("port"), label("outcome"));
            (id, value.trim().parse().expect("a number"))
        })
        .collect()
}

/// The counters of a reading the agent took after this call: what every connection made
/// before it did to them (the agent reads in the background).
fn fresh(lab: &ApiLab, agent: &AgentProcess) -> Vec<(String, u64)> {
    let asked = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = scrape(&lab.ns).unwrap_or_default();
        let read_at = metrics
            .lines()
            .find_map(|l| l.strip_prefix("verdict_service_counters_read_timestamp_seconds "))
            .map(|v| v.trim().parse::<f64>().expect("a timestamp"));
        if read_at.is_some_and(|t| t >= asked) {
            return samples(&metrics);
        }
        assert!(Instant::now() < deadline, "no reading after {asked}: {read_at:?}\n{}", agent.log_tail(50));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn value(samples: &[(String, u64)], id: &str) -> Option<u64> {
    samples.iter().find(|(k, _)| k == id).map(|(_, v)| *v)
}

/// Waits until the agent serves the counters of the three counted Services.
fn wait_for_series(lab: &ApiLab, agent: &AgentProcess) -> Vec<(String, u64)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = scrape(&lab.ns).map(|m| samples(&m)).unwrap_or_default();
        if ["ns1/web:http accepted", "ns1/empty:http rejected", "ns1/lb:http firewalled"]
            .iter()
            .all(|id| value(&s, id).is_some())
        {
            return s;
        }
        assert!(Instant::now() < deadline, "no counters on /metrics: {s:?}\n{}\n{}", agent.log_tail(50), lab.table());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lab (a node and a client): `web` (2 endpoints), `empty` (none), `lb` (a load balancer open to
/// 203.0.113.0/25 only), all counted, and `plain` (endpoints, not labelled).
fn lab(tag: &str) -> (ApiLab, Netns, TempDir) {
    let lab = ApiLab::new(tag).unwrap();
    endpoints(&lab.ns);
    let client = client(&lab.ns, tag);
    let counted = |svc| labelled(svc, LABEL.0, LABEL.1);
    let eps = ENDPOINTS.map(String::from);
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(counted(service("ns1", "web", "172.30.0.10", 80)));
    lab.server.apply(slice("ns1", "web", &eps, None));
    lab.server.apply(counted(service("ns1", "empty", "172.30.0.11", 80)));
    lab.server.apply(counted(load_balancer(service("ns1", "lb", "172.30.0.12", 80), "5.6.7.8", &["203.0.113.0/25"])));
    lab.server.apply(slice("ns1", "lb", &eps, None));
    lab.server.apply(service("ns1", "plain", "172.30.0.13", 80));
    lab.server.apply(slice("ns1", "plain", &eps, None));
    let dir = TempDir::with_prefix(format!("verdict-counters-{tag}-")).unwrap();
    (lab, client, dir)
}

/// A client host routed through the node (10.0.2.2 behind a veth), so that its connections
/// take the paths traffic from elsewhere takes: nat prerouting, filter forward or input.
/// (The node's own connections are rejected by the output hook, whose ICMP error a socket
/// on the same host does not see, so they would retry instead of being refused.)
///
/// The node routes what it does not DNAT back out of the client's link, so it would send the
/// client an ICMP redirect first, and the redirect resets the kernel's per-host ICMP rate
/// limit: the reject's port-unreachable that follows is suppressed (`IcmpOutRateLimitHost`)
/// and the client times out instead of being refused. Redirects are off, as on the cluster
/// topology's nodes.
fn client(node: &Netns, tag: &str) -> Netns {
    let client = Netns::new(&format!("{tag}c")).unwrap();
    node.ip(&["link", "add", "vcn0", "type", "veth", "peer", "name", "vcn1", "netns", client.name()]).unwrap();
    node.ip(&["addr", "add", "10.0.2.1/24", "dev", "vcn0"]).unwrap();
    node.ip(&["link", "set", "vcn0", "up"]).unwrap();
    node.sysctl("net.ipv4.conf.all.send_redirects", "0").unwrap();
    node.sysctl("net.ipv4.conf.vcn0.send_redirects", "0").unwrap();
    client.ip(&["addr", "add", "10.0.2.2/24", "dev", "vcn1"]).unwrap();
    client.ip(&["link", "set", "vcn1", "up"]).unwrap();
    client.ip(&["route", "add", "default", "via", "10.0.2.1"]).unwrap();
    node.sysctl("net.ipv4.ip_forward", "1").unwrap();
    // A node's default route (here: back to the client), so that traffic to a Service that
    // is not DNATed is forwarded and meets the filter chains, rather than being unroutable.
    node.ip(&["route", "add", "default", "via", "10.0.2.2"]).unwrap();
    client
}

#[test]
fn accepted_connections_are_counted_once_each_and_survive_a_restart() {
    require_kernel!();
    let (lab, client, dir) = lab("cnt-acc");
    let agent = start(&lab, dir.path(), None);
    let before = wait_for_series(&lab, &agent);
    assert_eq!(value(&before, "ns1/web:http accepted"), Some(0), "{before:?}");
    for _ in 0..3 {
        let met = connect(&client, "172.30.0.10:80", Duration::from_secs(2));
        assert!(matches!(&met, Met::Answer(a) if ENDPOINTS.contains(&a.as_str())), "{met:?}");
    }
    // An uncounted Service passes through the same class chain without being counted.
    assert!(matches!(connect(&client, "172.30.0.13:80", Duration::from_secs(2)), Met::Answer(_)));
    let after = fresh(&lab, &agent);
    assert_eq!(value(&after, "ns1/web:http accepted"), Some(3), "3 connections of several packets each: {after:?}");
    assert_eq!(value(&after, "ns1/web:http rejected"), Some(0), "{after:?}");
    assert!(after.iter().all(|(id, _)| !id.starts_with("ns1/plain")), "an unlabelled Service was counted: {after:?}");
    // Bounded: at most 3 outcomes for each of the 3 counted ports.
    assert!(after.len() <= 9, "{after:?}");

    // A restarted agent adopts the table without rewriting the counting sets.
    drop(agent);
    let agent = start(&lab, dir.path(), None);
    let restarted = wait_for_series(&lab, &agent);
    assert_eq!(value(&restarted, "ns1/web:http accepted"), Some(3), "counters reset by a restart: {restarted:?}");
}

#[test]
fn connections_to_a_service_without_endpoints_are_counted_as_rejected() {
    require_kernel!();
    let (lab, client, dir) = lab("cnt-rej");
    let agent = start(&lab, dir.path(), None);
    let before = wait_for_series(&lab, &agent);
    assert_eq!(value(&before, "ns1/empty:http rejected"), Some(0), "{before:?}");
    // Refused at once: each attempt is one SYN (a SYN the node rejected leaves no confirmed
    // conntrack entry, so a retransmission would be a new attempt, counted again).
    for _ in 0..2 {
        assert_eq!(connect(&client, "172.30.0.11:80", Duration::from_secs(3)), Met::Refused);
    }
    let after = fresh(&lab, &agent);
    assert_eq!(value(&after, "ns1/empty:http rejected"), Some(2), "{after:?}");
    assert_eq!(value(&after, "ns1/empty:http accepted"), Some(0), "{after:?}");
    assert_eq!(value(&after, "ns1/web:http rejected"), Some(0), "{after:?}");
    drop(agent);
}

#[test]
fn connections_from_outside_the_source_ranges_are_counted_as_firewalled() {
    require_kernel!();
    let (lab, client, dir) = lab("cnt-fw");
    let agent = start(&lab, dir.path(), None);
    let before = wait_for_series(&lab, &agent);
    assert_eq!(value(&before, "ns1/lb:http firewalled"), Some(0), "{before:?}");
    // The client's address is outside 203.0.113.0/25: the SYN is dropped. A short
    // timeout keeps it to one SYN (a retransmitted SYN of a dropped connection is a new
    // attempt to conntrack, and would be counted again).
    assert_eq!(connect(&client, "5.6.7.8:80", Duration::from_millis(500)), Met::TimedOut);
    let after = fresh(&lab, &agent);
    assert_eq!(value(&after, "ns1/lb:http firewalled"), Some(1), "{after:?}");
    assert_eq!(value(&after, "ns1/lb:http accepted"), Some(0), "{after:?}");
    // Its ClusterIP is not firewalled, and is counted as accepted.
    assert!(matches!(connect(&client, "172.30.0.12:80", Duration::from_secs(2)), Met::Answer(_)));
    let last = fresh(&lab, &agent);
    assert_eq!(value(&last, "ns1/lb:http accepted"), Some(1), "{last:?}");
    assert_eq!(value(&last, "ns1/lb:http firewalled"), Some(1), "{last:?}");
    drop(agent);
}

#[test]
fn counters_survive_a_warm_restart_through_the_state_dir_which_writes_nothing() {
    require_kernel!();
    let (lab, client, dir) = lab("cnt-warm");
    let state = dir.path().join("state");
    let first = start(&lab, dir.path(), Some(&state));
    agent::wait_synced(&first, Duration::from_secs(20), |s| s.full).unwrap();
    wait_for_series(&lab, &first);
    for _ in 0..2 {
        assert!(matches!(connect(&client, "172.30.0.10:80", Duration::from_secs(2)), Met::Answer(_)));
    }
    assert_eq!(connect(&client, "172.30.0.11:80", Duration::from_secs(3)), Met::Refused);
    assert_eq!(connect(&client, "5.6.7.8:80", Duration::from_millis(500)), Met::TimedOut);
    let before = fresh(&lab, &first);
    for (id, n) in [("ns1/web:http accepted", 2), ("ns1/empty:http rejected", 1), ("ns1/lb:http firewalled", 1)] {
        assert_eq!(value(&before, id), Some(n), "{id}: {before:?}");
    }
    first.terminate(Duration::from_secs(20)).unwrap();
    let log = first.log_tail(200);
    assert!(saved_state(&log).is_some(), "no state saved at SIGTERM:\n{log}");

    let second = start(&lab, dir.path(), Some(&state));
    let warm = agent::wait_synced(&second, Duration::from_secs(20), |s| s.full).unwrap();
    let log = second.log_tail(200);
    assert_eq!(warm.objects, 0, "the warm restart wrote {} objects:\n{log}", warm.objects);
    assert!(log.contains("adopting the table state saved at the last stop"), "no warm restart:\n{log}");
    let after = wait_for_series(&lab, &second);
    assert_eq!(after, before, "counters changed across the warm restart");
    // And they go on counting.
    assert!(matches!(connect(&client, "172.30.0.10:80", Duration::from_secs(2)), Met::Answer(_)));
    let last = fresh(&lab, &second);
    assert_eq!(value(&last, "ns1/web:http accepted"), Some(3), "{last:?}");
    drop(second);
}

/// Waits until `id`'s series is `want` (`None`: absent).
fn wait_for_value(lab: &ApiLab, agent: &AgentProcess, id: &str, want: Option<u64>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = scrape(&lab.ns).map(|m| samples(&m)).unwrap_or_default();
        if value(&s, id) == want {
            return;
        }
        assert!(Instant::now() < deadline, "{id} is not {want:?}: {s:?}\n{}", agent.log_tail(50));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn series_follow_services_added_relabelled_and_deleted_while_running() {
    require_kernel!();
    let (lab, client, dir) = lab("cnt-chg");
    let agent = start(&lab, dir.path(), None);
    wait_for_series(&lab, &agent);
    // Added while the agent runs (a partial sync), endpoints first so that its first sync
    // DNATs: counted from its first connection.
    lab.server.apply(slice("ns1", "late", &ENDPOINTS.map(String::from), None));
    lab.server.apply(labelled(service("ns1", "late", "172.30.0.20", 80), LABEL.0, LABEL.1));
    wait_for_value(&lab, &agent, "ns1/late:http accepted", Some(0));
    assert!(matches!(connect(&client, "172.30.0.20:80", Duration::from_secs(2)), Met::Answer(_)));
    wait_for_value(&lab, &agent, "ns1/late:http accepted", Some(1));
    // Labelled now: counted from here on.
    lab.server.apply(labelled(service("ns1", "plain", "172.30.0.13", 80), LABEL.0, LABEL.1));
    wait_for_value(&lab, &agent, "ns1/plain:http accepted", Some(0));
    assert!(matches!(connect(&client, "172.30.0.13:80", Duration::from_secs(2)), Met::Answer(_)));
    wait_for_value(&lab, &agent, "ns1/plain:http accepted", Some(1));
    // Deleted, or no longer labelled: its series leave /metrics.
    lab.server.delete::<k8s_openapi::api::core::v1::Service>(Some("ns1"), "late");
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    wait_for_value(&lab, &agent, "ns1/late:http accepted", None);
    wait_for_value(&lab, &agent, "ns1/web:http accepted", None);
    wait_for_value(&lab, &agent, "ns1/web:http rejected", None);
    drop(agent);
}
