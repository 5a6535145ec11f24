//! The steady-traffic harness against real packets: a static DNAT on node1 (a "Service"
//! 172.30.0.10:80 and node1's NodePort 30080, each to pod-a or pod-b at random) and a client
//! pod beside them. Left alone, 5 s of traffic show no disruption; with the DNAT deleted (and
//! the conntrack table flushed, as a careless proxy switch would) mid-run, the harness sees
//! failed new connections, stalled or reset long-lived connections and silent UDP flows, and
//! none before the deletion.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use verdict_e2e::require_kernel;
use verdict_e2e::steady::{Config, Steady, Summary, Target};
use verdict_e2e::topology::{self, Cluster, SESSION_PORT};

const VIP: &str = "172.30.0.10";
const NODE_PORT: u16 = 30080;

fn cluster(tag: &str) -> Cluster {
    let echo = Path::new(env!("CARGO_BIN_EXE_verdict-echo"));
    let c = topology::build(tag, &[&["pod-a", "pod-b", "client"]], echo).expect("topology");
    let node = &c.nodes[0];
    let (a, b) = (c.pod("pod-a").ipv4, c.pod("pod-b").ipv4);
    let table = format!(
        "table ip vd_steady {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr {VIP} meta l4proto {{ tcp, udp }} th dport 80 jump pick
    ip daddr {node_ip} meta l4proto {{ tcp, udp }} th dport {NODE_PORT} jump pick
  }}
  chain pick {{ numgen random mod 2 vmap {{ 0 : jump to-a, 1 : jump to-b }}; }}
  chain to-a {{ meta l4proto {{ tcp, udp }} dnat to {a}:{SESSION_PORT}; }}
  chain to-b {{ meta l4proto {{ tcp, udp }} dnat to {b}:{SESSION_PORT}; }}
}}
",
        node_ip = node.ipv4
    );
    node.ns.nft_stdin(&["-f", "-"], &table).expect("the static DNAT");
    c
}

fn targets(c: &Cluster) -> Vec<Target> {
    let vip = SocketAddr::new(VIP.parse::<IpAddr>().unwrap(), 80);
    let node_port = SocketAddr::new(IpAddr::V4(c.nodes[0].ipv4), NODE_PORT);
    [vip, node_port].into_iter().map(|a| Target::new(a).answered_by(&["pod-a", "pod-b"])).collect()
}

fn start(c: &Cluster) -> Steady {
    let t = targets(c);
    Steady::start(Some(c.pod("client").ns.name()), Config::new(t.clone(), t)).expect("the harness")
}

fn brief(s: &Summary) -> String {
    let mut short = s.clone();
    short.long_lived.each.truncate(3);
    short.new_connections.failures.truncate(5);
    serde_json::to_string_pretty(&short).unwrap()
}

#[test]
fn five_seconds_of_undisturbed_traffic_show_no_disruption() {
    require_kernel!();
    let c = cluster("steady-ok");
    let steady = start(&c);
    std::thread::sleep(Duration::from_secs(5));
    let s = steady.stop();
    eprintln!("{}", brief(&s));
    assert_eq!(s.disruptions(), Vec::<String>::new(), "{}", brief(&s));
    let n = &s.new_connections;
    // 20 a second for 5 s and the start-up.
    assert!(n.attempted >= 90, "{} new connections", n.attempted);
    assert_eq!(n.answers_by_pod.len(), 2, "both pods answer new connections: {:?}", n.answers_by_pod);
    let l = &s.long_lived;
    assert_eq!((l.connections, l.alive_at_end), (20, 20));
    for conn in &l.each {
        assert!(conn.flow.answered >= 40, "a request every 100 ms: {conn:?}");
    }
    let u = &s.udp;
    assert_eq!(u.flows, 3);
    assert!(u.longest_gap_s < 0.5, "longest UDP gap {:.3} s", u.longest_gap_s);
    let ports: Vec<u16> = u.each.iter().map(|f| f.source_port).collect();
    assert_eq!(ports, [47000, 47001, 47002], "fixed source ports");
}

#[test]
fn deleting_the_dnat_mid_run_is_detected() {
    require_kernel!();
    let c = cluster("steady-cut");
    let steady = start(&c);
    std::thread::sleep(Duration::from_secs(2));
    steady.mark("deleted");
    let node = &c.nodes[0].ns;
    node.check(&["nft", "delete", "table", "ip", "vd_steady"]).expect("delete the DNAT");
    let _ = node.exec(&["conntrack", "-F"]);
    std::thread::sleep(Duration::from_secs(3));
    let s = steady.stop();
    eprintln!("{}", brief(&s));
    assert!(s.failures_between(None, Some("deleted")).is_empty(), "failures before the deletion: {}", brief(&s));
    let after = s.failures_between(Some("deleted"), None);
    assert!(after.len() >= 20, "new connections after the deletion must fail: {} did", after.len());
    let l = &s.long_lived;
    assert!(l.stalled + l.reset + l.closed >= 10, "long-lived connections must stall or break: {}", brief(&s));
    assert!(l.stalled > 0, "the ClusterIP's long-lived connections stall: {}", brief(&s));
    assert!(s.udp.stalled > 0 && s.udp.longest_gap_s > 1.0, "UDP flows go silent: {}", brief(&s));
    let lines = s.disruptions();
    assert!(lines.iter().any(|l| l.contains("new connections failed")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains("long-lived connections stalled")), "{lines:#?}");
}
