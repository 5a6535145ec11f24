//! `verdict explain` on the all-features golden scenario: the answers a user gets.

use std::path::Path;
use std::process::Command;

fn explain(src: &str, dst: &str, extra: &[&str]) -> String {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/all-features");
    let flags = std::fs::read_to_string(scenario.join("flags")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["explain", "--manifests"])
        .arg(scenario.join("manifests"))
        .args(flags.split_whitespace())
        .args(["--src", src, "--dst", dst])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "verdict explain failed: {}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn result(text: &str) -> &str {
    text.lines().find_map(|l| l.strip_prefix("result: ")).unwrap_or_else(|| panic!("no result line:\n{text}"))
}

#[test]
fn a_pod_reaches_every_ready_endpoint_of_a_clusterip_unmasqueraded() {
    let out = explain("10.0.1.9", "172.30.0.41:80", &[]);
    assert_eq!(result(&out), "DNAT to 10.0.1.1:8080, 10.0.2.1:8080 (source kept)", "{out}");
    assert!(out.contains("@service-ips: 172.30.0.41 . tcp . 80 : goto endpoints-2"), "the map entry is shown:\n{out}");
}

#[test]
fn external_traffic_local_keeps_the_client_and_uses_the_local_endpoint() {
    let out = explain("203.0.113.2", "1.2.3.4:443", &[]);
    assert_eq!(result(&out), "DNAT to 10.0.1.3:8443 (source kept)", "{out}");
    assert!(out.contains("goto local-VQ2DR6S6-ns2/shop/tcp/https"), "{out}");
}

#[test]
fn a_source_outside_the_ranges_is_dropped_before_dnat() {
    let out = explain("203.0.113.130", "1.2.3.4:443", &[]);
    assert_eq!(result(&out), "DROP", "{out}");
    assert!(out.contains("firewall-VQ2DR6S6-ns2/shop/tcp/https: drop"), "{out}");
}

#[test]
fn the_node_itself_is_masqueraded_to_every_endpoint() {
    let out = explain("192.168.0.2", "1.2.3.4:443", &[]);
    assert_eq!(result(&out), "DNAT to 10.0.1.3:8443, 10.0.2.4:8443 (masqueraded)", "{out}");
    assert!(out.contains("opened by the node"), "{out}");
}

#[test]
fn udp_and_tcp_on_one_port_go_to_their_own_target_ports() {
    assert_eq!(
        result(&explain("10.0.1.9", "172.30.0.42:53/tcp", &[])),
        "DNAT to 10.0.1.2:5353, 10.0.2.3:5353 (source kept)"
    );
    assert_eq!(
        result(&explain("10.0.1.9", "172.30.0.42:53/udp", &[])),
        "DNAT to 10.0.1.2:53, 10.0.2.3:53 (source kept)"
    );
}

#[test]
fn no_endpoints_rejects_and_unallocated_addresses_drop_and_others_pass() {
    assert_eq!(result(&explain("10.0.1.9", "9.10.11.12:80", &[])), "REJECT");
    assert_eq!(result(&explain("10.0.1.9", "172.30.0.99:80", &[])), "DROP");
    assert_eq!(result(&explain("10.0.1.9", "8.8.8.8:53/udp", &[])), "not handled (passes unchanged)");
}

#[test]
fn ipv6_is_explained_too() {
    let out = explain("fd00:10::9", "[fd00:172:30::41]:80", &[]);
    assert_eq!(result(&out), "DNAT to [fd00:10::1]:8080 (source kept)", "{out}");
}

#[test]
fn a_bad_destination_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["explain", "--manifests", ".", "--src", "10.0.0.1", "--dst", "10.0.0.2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not IP:PORT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_replaced_iptables_mode_answers_localhost_nodeports_for_the_node_only() {
    // No --config: iptables mode's place, localhost NodePorts kept.
    let out = explain("127.0.0.1", "127.0.0.1:30053/udp", &[]);
    assert_eq!(result(&out), "DNAT to 10.0.1.2:53, 10.0.2.3:53 (masqueraded)", "{out}");
    assert!(out.contains("opened by the node") && out.contains("nat-output: ip daddr 127.0.0.0/8"), "{out}");
    let out = explain("203.0.113.2", "127.0.0.1:30053/udp", &[]);
    assert_eq!(result(&out), "DROP", "{out}");
    assert!(out.contains("iifname != \"lo\" ip daddr 127.0.0.0/8 drop"), "the guard:\n{out}");
    // An address the Node object does not list still takes NodePorts.
    let out = explain("203.0.113.2", "192.168.77.7:30053/udp", &["--node-address", "192.168.77.7"]);
    assert_eq!(result(&out), "DNAT to 10.0.1.2:53, 10.0.2.3:53 (masqueraded)", "{out}");
}
