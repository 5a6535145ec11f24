//! `verdict explain --live`: the same answers from the table the kernel holds, and a drifted
//! table is told apart from the desired one. The table is programmed by `verdict run --once`
//! in a network namespace of the test's own.

use std::path::{Path, PathBuf};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/all-features")
}

fn flags() -> Vec<String> {
    std::fs::read_to_string(scenario().join("flags")).unwrap().split_whitespace().map(str::to_string).collect()
}

/// `verdict ARGS... <golden flags>` in `ns`: (success, stdout, stderr).
fn verdict(ns: &Netns, args: &[&str]) -> (bool, String, String) {
    let bin = env!("CARGO_BIN_EXE_verdict");
    let flags = flags();
    let cmd: Vec<&str> =
        [bin].into_iter().chain(args.iter().copied()).chain(flags.iter().map(String::as_str)).collect();
    let out = ns.exec(&cmd).expect("run verdict in the namespace");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn result(text: &str) -> &str {
    text.lines().find_map(|l| l.strip_prefix("result: ")).unwrap_or_else(|| panic!("no result line:\n{text}"))
}

#[test]
fn live_answers_from_the_kernel_and_notices_drift() {
    require_kernel!();
    let ns = Netns::new("explive").unwrap();
    let manifests = scenario().join("manifests");
    let manifests = manifests.to_str().unwrap();

    let (ok, _, err) = verdict(&ns, &["explain", "--live", "--src", "10.0.1.9", "--dst", "172.30.0.41:80"]);
    assert!(!ok && err.contains("has no table inet kube-proxy"), "before any run: {err}");

    let (ok, _, err) = verdict(&ns, &["run", "--manifests", manifests, "--once", "--state-dir", ""]);
    assert!(ok, "verdict run --once: {err}");

    let ask = |dst: &str, with_manifests: bool| {
        let mut args = vec!["explain", "--live", "--src", "10.0.1.9", "--dst", dst];
        if with_manifests {
            args.extend(["--manifests", manifests]);
        }
        let (ok, out, err) = verdict(&ns, &args);
        assert!(ok, "explain --live failed: {err}");
        out
    };
    let live = ask("172.30.0.41:80", true);
    assert_eq!(result(&live), "DNAT to 10.0.1.1:8080, 10.0.2.1:8080 (source kept)", "{live}");
    assert!(live.contains("from the kernel's table inet kube-proxy"), "{live}");
    assert!(live.contains("@service-ips: 172.30.0.41 . tcp . 80 : goto endpoints-2"), "{live}");
    assert!(live.contains("desired table (--manifests): the same answer"), "{live}");
    let udp = ask("172.30.0.42:53/udp", false);
    assert_eq!(result(&udp), "DNAT to 10.0.1.2:53, 10.0.2.3:53 (source kept)", "{udp}");

    // Another program removes the Service's entry: the kernel now answers otherwise.
    ns.check(&["nft", "delete", "element", "inet", "kube-proxy", "service-ips", "{ 172.30.0.41 . tcp . 80 }"])
        .expect("delete the element");
    let drifted = ask("172.30.0.41:80", true);
    assert!(!result(&drifted).starts_with("DNAT"), "the kernel no longer DNATs it: {drifted}");
    assert!(drifted.contains("desired table (--manifests) answers differently: DNAT to 10.0.1.1:8080"), "{drifted}");
    assert!(drifted.contains("drifted"), "{drifted}");
}
