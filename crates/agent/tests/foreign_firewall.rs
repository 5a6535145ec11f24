//! A default-drop firewall in another table drops Service traffic that verdict accepted (an
//! accept in one table does not override a drop in another): the agent says so once, as a log
//! line naming the table and chain, the `verdict_foreign_drop_chains` gauge and a Warning
//! Event on its Node, and says when it is gone. Real packets, the real binary, the test API
//! server (root only).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent::{self, node_events, series};
use verdict_e2e::require_kernel;

const ENDPOINT: &str = "10.0.1.1";
const CLUSTER_IP: &str = "172.30.0.10";
/// An input chain that drops everything but loopback addresses (the API server and the
/// metrics endpoint live on 127.0.0.1): the endpoint, a host-network address, is cut off.
const FIREWALL: &str = "table inet hostfw {
    chain input {
        type filter hook input priority 0; policy drop;
        ip daddr 127.0.0.0/8 accept
    }
}";

/// Connects to the ClusterIP from inside the namespace; the answer, or `None` on a timeout.
fn ask(lab: &ApiLab) -> Option<String> {
    let addr: SocketAddr = format!("{CLUSTER_IP}:80").parse().unwrap();
    lab.ns.run(|| {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(700)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    })
}

#[test]
fn a_default_drop_table_elsewhere_is_reported_and_its_drop_is_real() {
    require_kernel!();
    let lab = ApiLab::new("fwdrop").unwrap();
    lab.ns.ip(&["addr", "add", &format!("{ENDPOINT}/32"), "dev", "lo"]).unwrap();
    // A route for the ClusterIP, as a node has (its default route): without one, a connection
    // fails before the output hook could DNAT it.
    lab.ns.ip(&["route", "add", "172.30.0.0/16", "dev", "lo"]).unwrap();
    let listener = lab.ns.run(|| TcpListener::bind(format!("{ENDPOINT}:8080"))).unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(b"endpoint");
        }
    });
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", CLUSTER_IP, 80));
    lab.server.apply(slice("ns1", "web", &[ENDPOINT.to_string()], None));
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "fw",
        // nftables mode: `primary` NodePorts, so that the IPv6 family without a node address
        // is announced (iptables mode's default takes every address).
        &["--min-sync-period", "50ms", "--cleanup-leftovers=false", "--proxy-mode=nftables"],
    )
    .unwrap();
    agent.wait("web programmed", || lab.table().contains(&format!("{CLUSTER_IP} . tcp . 80")));
    agent.wait("the gauge at 0", || series(&lab, "verdict_foreign_drop_chains") == Some(0.0));
    assert_eq!(ask(&lab).as_deref(), Some("endpoint"), "the Service answers before the firewall");
    // The Node lists an IPv4 address only; the kernel has both families (issue: dual-stack as
    // upstream): said once each.
    let log = agent.log();
    assert_eq!(log.matches("running in dual-stack mode").count(), 1, "{log}");
    assert_eq!(log.matches("no node address of this family accepts NodePorts").count(), 1, "{log}");
    assert!(log.contains("family=IPv6"), "{log}");

    let status = Command::new("ip").args(["netns", "exec", lab.ns.name(), "nft", FIREWALL]).status().expect("nft");
    assert!(status.success(), "loading the firewall table");
    agent.wait("the warning", || {
        agent.log().contains("table inet hostfw, chain input (hook input, priority 0) has policy drop")
    });
    agent.wait("the gauge at 1", || series(&lab, "verdict_foreign_drop_chains") == Some(1.0));
    agent.wait("a Warning Event on the Node", || !node_events(&lab, "n1").is_empty());
    let events = node_events(&lab, "n1");
    assert!(events[0].contains("Warning") && events[0].contains("DropInOtherTable"), "{events:?}");
    assert!(events[0].contains("table inet hostfw, chain input"), "{events:?}");
    assert_eq!(ask(&lab), None, "the other table drops what verdict DNATed");
    assert!(lab.table().contains(&format!("{CLUSTER_IP} . tcp . 80")), "verdict's table is untouched");

    // Said once, not on every sync: more changes, no new Event and one warning line.
    for k in 2..5 {
        let ips = [ENDPOINT.to_string(), format!("10.0.2.{k}")];
        lab.server.apply(slice("ns1", "web", &ips, None));
        agent.wait("the change programmed", || lab.table().contains(&format!("10.0.2.{k} . 8080")));
    }
    assert_eq!(node_events(&lab, "n1").len(), 1, "{:?}", node_events(&lab, "n1"));
    assert_eq!(agent.log().matches("has policy drop").count(), 1, "{}", agent.log());

    let status = Command::new("ip")
        .args(["netns", "exec", lab.ns.name(), "nft", "delete", "table", "inet", "hostfw"])
        .status()
        .expect("nft");
    assert!(status.success());
    agent.wait("the gauge back at 0", || series(&lab, "verdict_foreign_drop_chains") == Some(0.0));
    agent.wait("resolved in the log", || agent.log().contains("Node n1: its problems are resolved"));
    lab.server.apply(slice("ns1", "web", &[ENDPOINT.to_string()], None));
    agent.wait("back to one endpoint", || !lab.table().contains("10.0.2.4 . 8080"));
    assert_eq!(ask(&lab).as_deref(), Some("endpoint"), "the Service answers again");
}
