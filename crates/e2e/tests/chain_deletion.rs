//! Deleting a Service deletes its map element and its chains in one transaction. Kernels without
//! mainline 628bd3e49cba (6.4; stable 6.1.36, 5.10.188) refuse that with `EBUSY`: the elements
//! of the Service chain's anonymous vmap hold their endpoint chains until the set is destroyed,
//! after the commit. verdict then defers chain deletions (`stale_chains.rs`).
//!
//! Whether this kernel has that bug is asked first, with `nft` rather than verdict, in the shape
//! the pull request that carried the fix names (`flush chain` of a rule whose vmap jumps to a
//! chain, then `delete chain` of that chain, in one transaction). Then, without the deferral, verdict's deletion must
//! be refused with `EBUSY` exactly where the probe was, after which the loop defers by itself;
//! with it, every kernel must accept each sync. Debian's current 5.10 and 6.1 have the fix; the
//! bug is seen on 6.1 with the fix taken out (`cargo xtask kernels --build-unfixed-6.1`,
//! docs/testing.md).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;
use verdict_controller::event::{Event, Kind, Object};
use verdict_controller::health::ProxyHealth;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_e2e::netns::Netns;
use verdict_e2e::{require_kernel, synth};
use verdict_model::source::{EndpointSlice, Service};
use verdict_model::{Cidr, ModelCache, ProxyConfig};
use verdict_nft::netlink::Netlink;
use verdict_nft::transaction::kernel_needs_deferred_chain_deletion;

/// A sync loop in `ns`, with chain deletions deferred from the start or not.
fn start(ns: &Netns, defer_chain_deletion: bool) -> (Sender<Event>, Receiver<SyncReport>) {
    let (tx, rx) = channel();
    let (rtx, reports) = channel();
    let path = format!("/run/netns/{}", ns.name());
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let cfg = SyncConfig {
            min_sync_period: Duration::from_millis(50),
            sync_period: Duration::from_secs(30),
            defer_chain_deletion,
            ..SyncConfig::default()
        };
        let config =
            ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() };
        let health = Arc::new(ProxyHealth::new(Duration::from_secs(600)));
        let l = SyncLoop::new(ModelCache::new(config, "bench"), Netlink::open().unwrap(), cfg, health);
        let _ = l.with_reports(rtx).run(rx);
    });
    (tx, reports)
}

/// Lists every kind, with `services` and their slices, as the watchers' first lists do.
fn list(tx: &Sender<Event>, services: &[Service], slices: &[EndpointSlice]) {
    for k in Kind::ALL {
        tx.send(Event::InitStart(k)).unwrap();
    }
    for s in services {
        tx.send(Event::Apply(Object::Service(s.clone()))).unwrap();
    }
    for e in slices {
        tx.send(Event::Apply(Object::EndpointSlice(e.clone()))).unwrap();
    }
    for k in Kind::ALL {
        tx.send(Event::InitDone(k)).unwrap();
    }
}

fn next(reports: &Receiver<SyncReport>) -> SyncReport {
    // Generous: under software emulation (TCG) a sync of 20 Services takes seconds.
    reports.recv_timeout(Duration::from_secs(120)).expect("a sync within 120 s")
}

/// The names of the table's per-Service chains (upstream names them `...-ns/name/proto/port...`).
fn service_chains(ns: &Netns) -> BTreeSet<String> {
    let out = ns.exec(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("chain "))
        .map(|c| c.trim_end_matches('{').trim().trim_matches('"').to_string())
        .filter(|c| c.contains('/'))
        .collect()
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string()
}

/// A table with 20 Services, Service 3 with ClientIP affinity (per-endpoint chains too), then
/// Service 3 deleted; returns the first sync report after the deletion and its chains.
fn delete_service(ns: &Netns, defer: bool) -> (Sender<Event>, Receiver<SyncReport>, SyncReport, BTreeSet<String>) {
    let (mut services, slices) = synth::cluster(20, 2, 1000);
    services[3].session_affinity = "ClientIP".into();
    let (tx, reports) = start(ns, defer);
    list(&tx, &services, &slices);
    let first = next(&reports);
    assert!(first.full && first.error.is_none(), "{first:?}");
    let before = service_chains(ns);
    let own: BTreeSet<String> = before.iter().filter(|c| c.contains("bench/svc-3/")).cloned().collect();
    assert!(own.len() >= 2, "Service 3 has a service chain and endpoint chains: {before:?}");
    tx.send(Event::Delete { kind: Kind::Service, namespace: "bench".into(), name: "svc-3".into() }).unwrap();
    let deleted = next(&reports);
    (tx, reports, deleted, own)
}

/// `(major, minor)` of the running kernel.
fn version() -> (u32, u32) {
    let release = release();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse().unwrap_or(0));
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
}

/// Whether this kernel refuses, with `EBUSY`, to delete a chain in the transaction that flushes
/// the rule whose anonymous vmap jumps to it. Asked with `nft` in a namespace of its own.
fn kernel_has_the_bug() -> bool {
    const TABLE: &str = "
table inet probe {
    chain w {
    }
    chain y {
        numgen random mod 2 vmap { 0 : goto w, 1 : goto w }
    }
}
";
    let ns = Netns::new("probe").unwrap();
    ns.nft_stdin(&["-f", "-"], TABLE).unwrap();
    match ns.nft_stdin(&["-f", "-"], "flush chain inet probe y\ndelete chain inet probe w\n") {
        Ok(_) => false,
        Err(e) => {
            let e = format!("{e:#}");
            assert!(e.contains("Device or resource busy"), "kernel {}: only EBUSY is expected: {e}", release());
            true
        }
    }
}

#[test]
fn only_kernels_the_version_test_defers_on_have_the_bug() {
    require_kernel!();
    let bug = kernel_has_the_bug();
    // Every mainline release from 6.4 on has the fix, and every kernel with the bug must be one
    // the agent defers on from the start (else its first Service deletion fails once).
    assert!(!(bug && version() >= (6, 4)), "kernel {}: 6.4 or later, yet the probe got EBUSY", release());
    assert!(!bug || old_kernel(), "kernel {} has the bug, but the agent would not defer from the start", release());
}

#[test]
fn without_deferral_the_deletion_is_refused_exactly_where_the_kernel_has_the_bug() {
    require_kernel!();
    let bug = kernel_has_the_bug();
    let ns = Netns::new("ebusy").unwrap();
    let (_tx, reports, deleted, own) = delete_service(&ns, false);
    if !bug {
        assert!(deleted.error.is_none(), "kernel {} (no bug): {deleted:?}", release());
        let left: Vec<String> = service_chains(&ns).intersection(&own).cloned().collect();
        assert!(left.is_empty(), "kernel {}: deleted by the Service's own sync: {left:?}", release());
        eprintln!("kernel {}: no bug; Service 3's {} chains deleted in its own sync", release(), own.len());
        return;
    }
    let error = deleted.error.as_deref().unwrap_or_else(|| {
        panic!("kernel {}: the probe got EBUSY, verdict's deletion was accepted: {deleted:?}", release())
    });
    assert!(error.contains("EBUSY") && error.contains("delete chain"), "kernel {}: {error}", release());
    assert!(own.is_subset(&service_chains(&ns)), "kernel {}: the refused transaction changed nothing", release());
    // The refusal switched deferring on: the retry (a full reconcile) flushes the chains and is
    // accepted; had it not, the retry would hold the same deletions and be refused again.
    let retry = next(&reports);
    assert!(retry.full && retry.error.is_none(), "kernel {}: the retry, deferring: {retry:?}", release());
    let tidied = next(&reports);
    assert!(tidied.error.is_none(), "kernel {}: the deferred deletion: {tidied:?}", release());
    assert_eq!(tidied.objects, own.len(), "kernel {}: a transaction deleting exactly Service 3's chains", release());
    let left: Vec<String> = service_chains(&ns).intersection(&own).cloned().collect();
    assert!(left.is_empty(), "kernel {}: Service 3's chains are gone at the end: {left:?}", release());
    eprintln!(
        "kernel {}: bug; EBUSY without deferral ({error}), then {} chains deleted deferred",
        release(),
        own.len()
    );
}

fn old_kernel() -> bool {
    kernel_needs_deferred_chain_deletion(&release())
}

#[test]
fn with_deferral_every_kernel_accepts_each_sync_and_the_chains_go() {
    require_kernel!();
    let ns = Netns::new("defer").unwrap();
    let (_tx, reports, deleted, own) = delete_service(&ns, true);
    assert!(deleted.error.is_none(), "kernel {}: {deleted:?}", release());
    // Flushed first, kept until a transaction of their own. Listing the table can take longer
    // than the deferral (1 s) under software emulation (found on 5.10 under TCG), so the chains
    // may already be gone here; then only that later sync may have deleted them: had the
    // Service's own sync deleted them, nothing would be left to tidy and no sync would follow.
    let kept = own.is_subset(&service_chains(&ns));
    let tidied = next(&reports);
    assert!(tidied.error.is_none(), "kernel {}: the deferred deletion is accepted: {tidied:?}", release());
    assert_eq!(tidied.objects, own.len(), "kernel {}: the deferred deletion deletes the chains: {tidied:?}", release());
    eprintln!("kernel {}: chains still listed after the Service's own sync: {kept}", release());
    let left: Vec<String> = service_chains(&ns).intersection(&own).cloned().collect();
    assert!(left.is_empty(), "kernel {}: deleted a second later: {left:?}", release());
}

/// The harness's own check (`cargo xtask kernels --self-test` runs ignored tests): it demands
/// the `nf_hooks_lwtunnel` sysctl, which kernels have from 5.15 on, so on 5.10 it must be
/// reported as FAILED (and pass on 6.1 and 6.12).
#[test]
#[ignore = "harness self-test: fails on kernels before 5.15 by design (cargo xtask kernels --self-test)"]
fn self_test_the_kernel_has_the_5_15_nf_hooks_lwtunnel_sysctl() {
    require_kernel!();
    let ns = Netns::new("selftest").unwrap();
    // Netfilter sysctls are per namespace: a fresh one shows what the kernel itself offers.
    let out = ns.exec(&["sysctl", "-n", "net.netfilter.nf_hooks_lwtunnel"]).unwrap();
    assert!(
        out.status.success(),
        "kernel {}: no net.netfilter.nf_hooks_lwtunnel: {}",
        release(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}
