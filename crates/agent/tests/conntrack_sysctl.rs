//! The conntrack sysctls applied for real, from a thread inside a network namespace the test
//! creates: the namespace's own values change, the host's do not, and what the kernel keeps
//! global (nf_conntrack_max, hashsize) is reported as not writable from there instead of
//! failing the rest (root only).

// The module is the binary's; an integration test reaches it by path. Its unit tests come
// along and run here too.
#[path = "../src/conntrack_sysctl.rs"]
mod conntrack_sysctl;

use conntrack_sysctl::{ConntrackSettings, Outcome, SysPaths, apply, log_outcomes};
use std::time::Duration;
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

const NETFILTER: &str = "/proc/sys/net/netfilter";
const HASHSIZE: &str = "/sys/module/nf_conntrack/parameters/hashsize";
const NAMESPACED: [(&str, &str); 5] = [
    ("nf_conntrack_tcp_timeout_established", "7200"),
    ("nf_conntrack_tcp_timeout_close_wait", "120"),
    ("nf_conntrack_tcp_be_liberal", "1"),
    ("nf_conntrack_udp_timeout", "45"),
    ("nf_conntrack_udp_timeout_stream", "150"),
];

/// Non-default values, with an nf_conntrack_max that differs from the host's.
fn settings(max: u64) -> ConntrackSettings {
    ConntrackSettings {
        max_per_core: 1,
        min: u32::try_from(max).unwrap(),
        tcp_established_timeout: Duration::from_secs(7200),
        tcp_close_wait_timeout: Duration::from_secs(120),
        tcp_be_liberal: true,
        udp_timeout: Duration::from_secs(45),
        udp_stream_timeout: Duration::from_secs(150),
        route_localnet: false,
    }
}

fn read(path: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim().parse().unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
}

/// The host's values, read from the namespace this test started in.
fn host() -> Vec<(String, u64)> {
    let mut files: Vec<String> = NAMESPACED.iter().map(|(file, _)| format!("{NETFILTER}/{file}")).collect();
    files.extend([format!("{NETFILTER}/nf_conntrack_max"), HASHSIZE.to_string()]);
    files.into_iter().map(|f| (f.clone(), read(&f))).collect()
}

/// A namespace whose conntrack sysctls exist: a `ct state` rule loads nf_conntrack if the
/// host had not.
fn namespace(tag: &str) -> Netns {
    let ns = Netns::new(tag).unwrap();
    ns.nft_stdin(
        &["-f", "-"],
        "table inet vd_ct { chain c { type filter hook prerouting priority 0; ct state new counter; }; }",
    )
    .unwrap();
    ns
}

/// `apply` on a thread inside `ns`, after checking it is not the namespace the test runs in:
/// the host's values must be out of reach.
fn apply_in(ns: &Netns, settings: &ConntrackSettings) -> Vec<Outcome> {
    let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    ns.run(|| {
        let theirs = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        assert_ne!(ours, theirs, "the thread did not enter the namespace");
        apply(settings, 2, &SysPaths::default())
    })
}

/// The value seen by a process started in the namespace (not by this test's thread).
fn inside(ns: &Netns, file: &str) -> String {
    ns.check(&["cat", &format!("{NETFILTER}/{file}")]).unwrap().trim().to_string()
}

fn name_of(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Written { name, .. }
        | Outcome::AlreadySet { name, .. }
        | Outcome::Failed { name, .. }
        | Outcome::Skipped { name, .. } => name,
    }
}

fn outcome<'a>(outcomes: &'a [Outcome], suffix: &str) -> &'a Outcome {
    outcomes.iter().find(|o| name_of(o).ends_with(suffix)).unwrap_or_else(|| panic!("no {suffix} in {outcomes:?}"))
}

#[test]
fn the_namespace_gets_the_values_and_the_host_keeps_its_own() {
    require_kernel!();
    let ns = namespace("ct");
    let before = host();
    let max = read(&format!("{NETFILTER}/nf_conntrack_max")) + 4;
    let outcomes = apply_in(&ns, &settings(max));
    log_outcomes(&outcomes);

    for (file, value) in NAMESPACED {
        assert!(matches!(outcome(&outcomes, file), Outcome::Written { .. }), "{file}: {outcomes:?}");
        assert_eq!(inside(&ns, file), value, "{file} inside the namespace");
    }
    assert!(
        matches!(outcome(&outcomes, "nf_conntrack_max"), Outcome::Skipped { want, reason, .. }
            if *want == max && reason.contains("initial network namespace")),
        "{outcomes:?}"
    );
    assert_eq!(inside(&ns, "nf_conntrack_max"), (max - 4).to_string());
    assert!(!outcomes.iter().any(|o| matches!(o, Outcome::Failed { .. })), "{outcomes:?}");
    assert_eq!(host(), before, "the host's values changed");
}

#[test]
fn a_second_run_writes_nothing() {
    require_kernel!();
    let ns = namespace("ct-again");
    let max = read(&format!("{NETFILTER}/nf_conntrack_max")) + 4;
    apply_in(&ns, &settings(max));
    let again = apply_in(&ns, &settings(max));
    for (file, value) in NAMESPACED {
        assert_eq!(
            outcome(&again, file),
            &Outcome::AlreadySet { name: name_of(outcome(&again, file)), value: value.parse().unwrap() }
        );
    }
}

#[test]
fn hashsize_cannot_be_raised_outside_the_initial_namespace() {
    require_kernel!();
    let ns = namespace("ct-hash");
    let before = host();
    // A quarter of this is more than the current hashsize: a raise is due, and the kernel
    // refuses it to any namespace but the initial one.
    let max = read(HASHSIZE) * 4 + 4;
    let outcomes = apply_in(&ns, &settings(max));
    log_outcomes(&outcomes);
    assert!(
        matches!(outcome(&outcomes, "hashsize"), Outcome::Skipped { want, reason, .. }
            if *want == max / 4 && reason.contains("initial network namespace")),
        "{outcomes:?}"
    );
    assert!(matches!(outcome(&outcomes, "udp_timeout"), Outcome::Written { to: 45, .. }), "{outcomes:?}");
    assert_eq!(host(), before, "the host's values changed");
}
