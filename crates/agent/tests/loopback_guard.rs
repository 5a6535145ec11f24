//! A node whose `route_localnet` is on (kube-proxy's iptables mode leaves it so) keeps the
//! CVE-2020-8558 guard in verdict's table even in nftables mode, where verdict serves no
//! localhost NodePort; with `route_localnet` off there is no guard. The real binary, `--once`,
//! in a network namespace of its own.

use std::process::Command;
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

const GUARD: &str = "iifname != \"lo\" ip daddr 127.0.0.0/8 drop";

fn table_after_one_sync(route_localnet: &str) -> String {
    let ns = Netns::new("lbguard").unwrap();
    ns.sysctl("net.ipv4.conf.all.route_localnet", route_localnet).unwrap();
    let dir = tempfile::TempDir::with_prefix("verdict-lbguard-").unwrap();
    std::fs::write(
        dir.path().join("node.yaml"),
        "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\nstatus: {addresses: [{type: InternalIP, address: 192.168.50.11}]}\n",
    )
    .unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name(), env!("CARGO_BIN_EXE_verdict"), "run", "--once", "--proxy-mode=nftables"])
        .args(["--hostname-override", "node1", "--state-dir", "", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "verdict run --once: {log}");
    assert_eq!(log.contains("route_localnet is 1"), route_localnet == "1", "the start says why: {log}");
    ns.check(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap()
}

#[test]
fn the_guard_follows_route_localnet_in_nftables_mode() {
    require_kernel!();
    let on = table_after_one_sync("1");
    assert!(on.contains(GUARD), "route_localnet on: the guard\n{on}");
    assert!(
        !on.contains("ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"),
        "no localhost NodePorts\n{on}"
    );
    let off = table_after_one_sync("0");
    assert!(!off.contains(GUARD), "route_localnet off: no guard\n{off}");
}
