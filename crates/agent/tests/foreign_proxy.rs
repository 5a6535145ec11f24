//! Upstream kube-proxy's nftables table appearing while verdict runs (a `kubeadm upgrade
//! apply` that re-applied kube-proxy): the agent says so once, as a log line naming the
//! table, `verdict_foreign_proxy_detected{what="nftables ip kube-proxy"}` and a Warning Event
//! on its Node, and the gauge returns to 0 when the table goes. The real binary and the test
//! API server, in a network namespace of its own (root only).

use std::process::Command;
use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent::{self, node_events, series};
use verdict_e2e::require_kernel;

const WHAT: &str = "verdict_foreign_proxy_detected{what=\"nftables ip kube-proxy\"}";
const WARNING: &str = "another proxy programs Services on this node (nftables ip kube-proxy)";

fn nft(lab: &ApiLab, args: &[&str]) {
    let status = Command::new("ip").args(["netns", "exec", lab.ns.name(), "nft"]).args(args).status().expect("nft");
    assert!(status.success(), "nft {args:?}");
}

#[test]
fn upstreams_table_appearing_is_reported_once_and_its_removal_seen() {
    require_kernel!();
    let lab = ApiLab::new("fproxy").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    let agent =
        lab_agent::start(&lab, env!("CARGO_BIN_EXE_verdict"), "foreign-proxy", &["--min-sync-period", "50ms"]).unwrap();
    agent
        .wait_until("web programmed", Duration::from_secs(20), || lab.table().contains("172.30.0.10 . tcp . 80"))
        .unwrap();
    agent.wait_until("the gauge at 0", Duration::from_secs(5), || series(&lab, WHAT) == Some(0.0)).unwrap();

    nft(&lab, &["table ip kube-proxy {\n    chain services {\n    }\n}"]);
    // A notice of the new table, not a periodic look: well within a sync period.
    agent.wait_until("the warning", Duration::from_secs(5), || agent.log().contains(WARNING)).unwrap();
    agent.wait_until("the gauge at 1", Duration::from_secs(5), || series(&lab, WHAT) == Some(1.0)).unwrap();
    agent
        .wait_until("a Warning Event on the Node", Duration::from_secs(10), || !node_events(&lab, "n1").is_empty())
        .unwrap();
    let events = node_events(&lab, "n1");
    assert!(events[0].contains("Warning") && events[0].contains("ForeignProxy"), "{events:?}");
    assert!(events[0].contains("skip-phases=addon/kube-proxy"), "it says what to do: {events:?}");

    // Once: more changes to the other table and to Services bring no new line nor Event.
    nft(&lab, &["add chain ip kube-proxy nat-prerouting"]);
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string(), "10.0.1.2".to_string()], None));
    agent
        .wait_until("the change programmed", Duration::from_secs(10), || lab.table().contains("10.0.1.2 . 8080"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(agent.log().matches(WARNING).count(), 1, "{}", agent.log());
    assert_eq!(node_events(&lab, "n1").len(), 1, "{:?}", node_events(&lab, "n1"));
    assert_eq!(series(&lab, WHAT), Some(1.0));

    nft(&lab, &["delete table ip kube-proxy"]);
    agent.wait_until("the gauge back at 0", Duration::from_secs(5), || series(&lab, WHAT) == Some(0.0)).unwrap();
    agent
        .wait_until("resolved in the log", Duration::from_secs(5), || {
            agent.log().contains("Node n1: its problems are resolved")
        })
        .unwrap();
}
