//! `verdict run --flowtable-interfaces`: where the kernel has software flowtables, the table
//! gets the flowtable and the interfaces that match join it as they appear (and leave it when
//! they are deleted); where it has none, the agent says so, sets
//! `verdict_fast_path_unavailable` and programs the table without the fast path instead of
//! failing every sync. Which of the two this kernel is, the test asks the kernel first: both
//! branches assert. The real binary and the test API server, in a network namespace of its own.

use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent::{self, series};
use verdict_e2e::require_kernel;
use verdict_nft::netlink::Netlink;

const UNAVAILABLE: &str = "verdict_fast_path_unavailable";

#[test]
fn the_fast_path_follows_the_interfaces_where_the_kernel_has_flowtables_and_is_left_out_where_not() {
    require_kernel!();
    let lab = ApiLab::new("fpagent").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    lab.ns.ip(&["link", "add", "fpa", "type", "veth", "peer", "name", "fpb"]).unwrap();
    lab.ns.ip(&["link", "add", "other0", "type", "veth", "peer", "name", "other1"]).unwrap();
    let supported = lab.ns.run(|| Netlink::open().and_then(|mut nl| nl.supports_flowtables())).unwrap();
    let args = ["--min-sync-period", "50ms", "--flowtable-interfaces", "fp*,eth9"];
    let agent = lab_agent::start(&lab, env!("CARGO_BIN_EXE_verdict"), "fast-path", &args).unwrap();
    agent
        .wait_until("web programmed", Duration::from_secs(20), || lab.table().contains("172.30.0.10 . tcp . 80"))
        .unwrap();

    if !supported {
        agent
            .wait_until("the error", Duration::from_secs(5), || agent.log().contains("has no software flowtables"))
            .unwrap();
        agent.wait_until("the gauge at 1", Duration::from_secs(5), || series(&lab, UNAVAILABLE) == Some(1.0)).unwrap();
        let table = lab.table();
        assert!(!table.contains("flowtable") && !table.contains("flow add"), "{table}");
        eprintln!("this kernel has no flowtables: checked that the agent runs without the fast path");
        return;
    }

    let devices = |want: &str| lab.table().contains(&format!("devices = {{ {want} }}"));
    agent.wait_until("fpa and fpb joined", Duration::from_secs(10), || devices("fpa, fpb")).unwrap();
    assert_eq!(series(&lab, UNAVAILABLE), Some(0.0));
    assert!(lab.table().contains("flow add @fastpath"), "{}", lab.table());

    // A pod's veth appears: it joins; one goes: the kernel unhooks it, and the agent does not
    // fight that.
    lab.ns.ip(&["link", "add", "fpc", "type", "veth", "peer", "name", "fpd"]).unwrap();
    agent.wait_until("fpc and fpd joined", Duration::from_secs(10), || devices("fpa, fpb, fpc, fpd")).unwrap();
    lab.ns.ip(&["link", "del", "fpa"]).unwrap();
    agent.wait_until("fpa and fpb gone", Duration::from_secs(10), || devices("fpc, fpd")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(devices("fpc, fpd"), "{}", lab.table());
    assert_eq!(series(&lab, "verdict_fast_path_devices"), Some(2.0));
    assert!(!agent.log().contains("refused"), "{}", agent.log());
}
