//! Injected kernel failures (`verdict_nft::netlink::fault`, test builds only) against the real
//! kernel, in a namespace of the test's own. For each fault: the kernel's table afterwards is
//! exactly the old one (a refused transaction applies nothing) or exactly the new one (the
//! kernel committed, but its replies were lost, so verdict believes it failed); the sync loop
//! counts the failure in `kubeproxy_sync_proxy_rules_nftables_sync_failures_total`, retries
//! with a full reconcile that reads the kernel, backs off, and converges. `/healthz` turns 503
//! only after twice the sync period without success, and recovers.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};
use verdict_controller::event::{Event, Kind, Object};
use verdict_controller::health::ProxyHealth;
use verdict_controller::metrics::SYNC_FAILURES;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_e2e::netns::Netns;
use verdict_e2e::{require_kernel, synth};
use verdict_layout::{RenderOptions, render};
use verdict_model::ModelCache;
use verdict_model::source::{EndpointSlice, Service};
use verdict_nft::netlink::fault::{Fault, Faults};
use verdict_nft::netlink::{Netlink, kernel_acks_batch_end};
use verdict_nft::observe::observe;
use verdict_nft::{Ruleset, diff};

const POOL: usize = 5000;

/// A sync loop in a namespace, with a fault plan, its metrics and its health.
struct Loop {
    tx: Sender<Event>,
    reports: Receiver<SyncReport>,
    faults: Faults,
    health: Arc<ProxyHealth>,
    metrics: PrometheusHandle,
}

impl Loop {
    /// Starts a loop whose netlink socket lives in `ns`. Health times out after twice the sync
    /// period, as in `verdict run`.
    fn start(ns: &Netns, min_sync_period: Duration, sync_period: Duration) -> Loop {
        let (tx, rx) = channel();
        let (rtx, reports) = channel();
        let faults = Faults::new();
        let health = Arc::new(ProxyHealth::new(sync_period * 2));
        // The exporter `/metrics` serves, installed for the loop's thread only (tests run in
        // parallel in one process).
        let recorder = PrometheusBuilder::new().build_recorder();
        let metrics = recorder.handle();
        let (f, h) = (faults.clone(), health.clone());
        let path = format!("/run/netns/{}", ns.name());
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("namespace");
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            metrics::with_local_recorder(&recorder, || {
                verdict_controller::metrics::describe();
                let cfg = SyncConfig { min_sync_period, sync_period, ..SyncConfig::default() };
                let nl = Netlink::open().expect("netlink").with_faults(f);
                let cache = ModelCache::new(synth::config(), "bench");
                // The per-family series start at zero, as `verdict run` registers them.
                verdict_controller::family_metrics::register(&cache.model().families());
                let _ = SyncLoop::new(cache, nl, cfg, h).with_reports(rtx).run(rx);
            });
        });
        Loop { tx, reports, faults, health, metrics }
    }

    fn next(&self) -> SyncReport {
        self.reports.recv_timeout(Duration::from_secs(30)).expect("a sync within 30 s")
    }

    /// The failure counter as `/metrics` shows it: one series per IP family, each counting
    /// every failed transaction (the one `inet` table serves both).
    fn failures(&self) -> u64 {
        let text = self.metrics.render();
        let counts: Vec<u64> = text
            .lines()
            .filter(|l| l.split(['{', ' ']).next() == Some(SYNC_FAILURES))
            .map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a count"))
            .collect();
        assert!(!counts.is_empty(), "no {SYNC_FAILURES}:\n{text}");
        assert!(counts.windows(2).all(|w| w[0] == w[1]), "the families disagree: {counts:?}");
        counts[0]
    }

    fn list(&self, services: &[Service], slices: &[EndpointSlice]) {
        for k in Kind::ALL {
            self.tx.send(Event::InitStart(k)).unwrap();
        }
        self.apply(services, slices);
        self.tx.send(Event::Apply(Object::Node(synth::node()))).unwrap();
        for k in Kind::ALL {
            self.tx.send(Event::InitDone(k)).unwrap();
        }
    }

    fn send_all(&self, events: Vec<Event>) {
        for e in events {
            self.tx.send(e).unwrap();
        }
    }

    fn apply(&self, services: &[Service], slices: &[EndpointSlice]) {
        for s in services {
            self.tx.send(Event::Apply(Object::Service(s.clone()))).unwrap();
        }
        for e in slices {
            self.tx.send(Event::Apply(Object::EndpointSlice(e.clone()))).unwrap();
        }
    }
}

fn kernel(ns: &Netns) -> Ruleset {
    ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("the table exists").ruleset
}

fn rendered(services: &[Service], slices: &[EndpointSlice]) -> Ruleset {
    render(&synth::model(services, slices).model, &RenderOptions::default())
}

type Objects = (Vec<Service>, Vec<EndpointSlice>);

/// 300 Services, then a change of many messages: 60 new Services and 30 replaced endpoints.
fn cluster_and_change() -> (Objects, Objects) {
    let before = synth::cluster(300, 3, POOL);
    let mut after = before.clone();
    for i in 300..360 {
        after.0.push(synth::service(i));
        after.1.push(synth::slice(i, 3, POOL, 0));
    }
    for i in (0..300).step_by(10) {
        after.1[i] = synth::slice(i, 3, POOL, 1 + i);
    }
    (before, after)
}

/// The shortest time between two syncs in the tests that inject a fault into one change: the
/// change must reach the loop whole within it. With 50 ms, under software emulation (TCG, in
/// `cargo xtask kernels`) the loop started a sync on the change's first Service alone, and the
/// fault hit that two-object batch instead of the change (5.10, 6.1 and 6.12, 2026-11-25).
const CHANGE_GAP: Duration = Duration::from_secs(2);

/// The events of a change, made before they are needed so that sending them takes no time.
fn change_events(services: &[Service], slices: &[EndpointSlice]) -> Vec<Event> {
    let services = services.iter().map(|s| Event::Apply(Object::Service(s.clone())));
    services.chain(slices.iter().map(|e| Event::Apply(Object::EndpointSlice(e.clone())))).collect()
}

/// What the kernel holds after a fault.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Leaves {
    /// The transaction was refused: nothing applied.
    Old,
    /// The transaction committed; only its replies were lost.
    New,
}

/// One fault, injected into every transaction from the change on until the test clears it.
fn fault_then_converge(fault: Fault, tag: &str, error: &str, leaves: Leaves, sends_per_sync: usize) {
    let ns = Netns::new(tag).unwrap();
    let ((services, slices), (services2, slices2)) = cluster_and_change();
    let old = rendered(&services, &slices);
    let new = rendered(&services2, &slices2);
    assert!(!old.equivalent(&new));
    let change = change_events(&services2[300..], &slices2);
    let l = Loop::start(&ns, CHANGE_GAP, CHANGE_GAP * 2);
    l.list(&services, &slices);
    let first = l.next();
    assert!(first.full && first.error.is_none(), "{first:?}");
    l.faults.fail(fault, 0, u64::MAX);
    l.send_all(change);
    assert_eq!(l.failures(), 0);

    let failed = l.next();
    assert_eq!(failed.rendered_ports, 60 + 30, "{fault:?}: the whole change in one sync: {failed:?}");
    let text = failed.error.clone().unwrap_or_else(|| panic!("{fault:?}: the sync did not fail: {failed:?}"));
    assert!(text.contains(error), "{fault:?}: {text}");
    let after_failure = kernel(&ns);
    match leaves {
        Leaves::Old => assert!(after_failure.equivalent(&old), "{fault:?}: a refused transaction changed the table"),
        Leaves::New => assert!(after_failure.equivalent(&new), "{fault:?}: the committed table is not the new one"),
    }
    assert_eq!(l.failures(), 1, "{fault:?}: the failure is counted");

    // The retry is a full reconcile against what the kernel holds, still under the fault.
    let retry = l.next();
    assert!(retry.full, "{fault:?}: the retry after a failure reads the kernel: {retry:?}");
    let mut failures = 1;
    match leaves {
        Leaves::Old => {
            assert!(retry.error.is_some(), "{fault:?}: {retry:?}");
            failures += 1;
            assert!(kernel(&ns).equivalent(&old), "{fault:?}: the failed retry changed the table");
        }
        // The kernel already has the new table: the retry finds nothing to write, so sends
        // nothing the fault could hit, and succeeds.
        Leaves::New => assert!(retry.error.is_none() && retry.objects == 0, "{fault:?}: {retry:?}"),
    }
    assert_eq!(l.failures(), failures, "{fault:?}: every failed sync is counted, and only those");
    assert_eq!(l.faults.injected().len(), failures as usize * sends_per_sync, "{fault:?}: {:?}", l.faults.injected());

    l.faults.clear();
    if leaves == Leaves::Old {
        let mut healed = l.next();
        while healed.error.is_some() {
            // A retry already under way when the fault was cleared may still have failed.
            failures += 1;
            healed = l.next();
        }
        assert!(healed.full, "{healed:?}");
    }
    assert!(kernel(&ns).equivalent(&new), "{fault:?}: the table did not converge");
    assert_eq!(l.failures(), failures);

    // Later changes go through partial syncs again.
    let mut slices3 = slices2.clone();
    slices3[5] = synth::slice(5, 3, POOL, 4000);
    l.apply(&[], &slices3[5..6]);
    let later = l.next();
    assert!(!later.full && later.error.is_none(), "{later:?}");
    assert!(kernel(&ns).equivalent(&rendered(&services2, &slices3)));
}

#[test]
fn ebusy_leaves_the_old_table() {
    require_kernel!();
    fault_then_converge(Fault::Busy, "f-busy", "EBUSY", Leaves::Old, 1);
}

#[test]
fn enomem_leaves_the_old_table() {
    require_kernel!();
    fault_then_converge(Fault::NoMemory, "f-nomem", "ENOMEM", Leaves::Old, 1);
}

#[test]
fn a_generation_that_keeps_moving_leaves_the_old_table() {
    require_kernel!();
    // Each sync tries 8 times before it gives up.
    fault_then_converge(Fault::Restart, "f-restart", "generation id moved", Leaves::Old, 8);
}

#[test]
fn enobufs_after_a_commit_leaves_the_new_table() {
    require_kernel!();
    fault_then_converge(Fault::NoBuffers, "f-nobufs", "receive queue overflowed", Leaves::New, 1);
}

#[test]
fn a_short_read_after_a_commit_leaves_the_new_table() {
    require_kernel!();
    if kernel_acks_batch_end(&release()) {
        fault_then_converge(Fault::ShortRead, "f-short", "cut short", Leaves::New, 1);
    } else {
        a_commit_that_draws_no_reply_has_nothing_to_cut_short();
    }
}

/// Kernels before 6.10 ignore the ACK flag verdict sets on the batch end, and verdict sets it
/// on nothing else, so a batch that commits draws no reply at all: a short read loses nothing
/// and the sync is (rightly) a success. What a short read does to a reply that does come is
/// `a_short_read_of_a_refusal_is_not_taken_for_a_commit`.
fn a_commit_that_draws_no_reply_has_nothing_to_cut_short() {
    let ns = Netns::new("f-short0").unwrap();
    let ((services, slices), (services2, slices2)) = cluster_and_change();
    let change = change_events(&services2[300..], &slices2);
    let l = Loop::start(&ns, CHANGE_GAP, CHANGE_GAP * 2);
    l.list(&services, &slices);
    assert!(l.next().error.is_none());
    l.faults.fail(Fault::ShortRead, 0, 1);
    l.send_all(change);
    let report = l.next();
    assert!(report.error.is_none() && !report.full && report.rendered_ports == 90, "kernel {}: {report:?}", release());
    assert_eq!(l.faults.injected().len(), 1, "the commit was read through the 8-byte buffer");
    assert_eq!(l.failures(), 0);
    assert!(kernel(&ns).equivalent(&rendered(&services2, &slices2)), "the change committed");
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string()
}

#[test]
fn a_moved_generation_is_retried_inside_the_commit() {
    require_kernel!();
    let ns = Netns::new("f-moved").unwrap();
    let ((services, slices), (services2, slices2)) = cluster_and_change();
    let change = change_events(&services2[300..], &slices2);
    let l = Loop::start(&ns, CHANGE_GAP, CHANGE_GAP * 2);
    l.list(&services, &slices);
    assert!(l.next().error.is_none());
    l.faults.fail(Fault::Restart, 0, 3);
    l.send_all(change);
    let report = l.next();
    assert_eq!(report.rendered_ports, 60 + 30, "the whole change in one sync: {report:?}");
    assert!(report.error.is_none() && !report.full, "three ERESTARTs are retried at once: {report:?}");
    assert_eq!(l.faults.injected().len(), 3);
    assert_eq!(l.failures(), 0, "a retried ERESTART is not a failed sync");
    assert!(kernel(&ns).equivalent(&rendered(&services2, &slices2)));
}

#[test]
fn a_short_read_of_a_refusal_is_not_taken_for_a_commit() {
    require_kernel!();
    // A change planned against a table this namespace does not have: the kernel refuses it.
    let ns = Netns::new("f-refused").unwrap();
    let ((services, slices), (services2, slices2)) = cluster_and_change();
    let plan = diff(Some(&rendered(&services, &slices)), &rendered(&services2, &slices2));
    let faults = Faults::new();
    let result = ns.run(|| {
        let mut nl = Netlink::open().unwrap().with_faults(faults.clone());
        let refused = nl.commit(&plan.transaction);
        faults.fail(Fault::ShortRead, 0, 1);
        (refused, nl.commit(&plan.transaction))
    });
    assert!(matches!(result.0, Err(verdict_nft::netlink::NetlinkError::Rejected { .. })), "{:?}", result.0);
    match result.1 {
        Err(verdict_nft::netlink::NetlinkError::LostReplies(_)) => {}
        other => panic!("a refusal read short must be a lost reply, not {other:?}"),
    }
    assert_eq!(faults.injected().len(), 1);
    let left = ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap());
    assert!(left.is_none(), "the refused transactions created the table");
}

/// Persistent EBUSY after a queued change: retries back off (doubling from the minimum up to
/// the sync period), `/healthz` stays 200 until twice the sync period has passed since the
/// change was queued, then 503; it recovers with the first successful sync.
#[test]
fn retries_back_off_and_healthz_fails_only_after_twice_the_sync_period() {
    require_kernel!();
    let ns = Netns::new("f-health").unwrap();
    let (min_sync, sync_period) = (Duration::from_millis(100), Duration::from_secs(1));
    let l = Loop::start(&ns, min_sync, sync_period);
    let ((services, slices), (services2, slices2)) = cluster_and_change();
    l.list(&services, &slices);
    assert!(l.next().error.is_none());
    assert_eq!(l.health.healthz().code, 200);

    l.faults.fail(Fault::Busy, 0, u64::MAX);
    let queued = Instant::now();
    l.apply(&services2[300..], &slices2);
    let red = wait_for_503(&l, sync_period * 6).expect("healthz never turned 503 while every sync failed");
    assert!(
        red.duration_since(queued) >= sync_period * 2,
        "healthz turned 503 {:?} after the change was queued, before twice the sync period",
        red.duration_since(queued)
    );
    // Let a few more retries fail, until the backoff has reached its cap (the 6th failure).
    let enough = (l.faults.injected().len() + 2).max(6);
    while l.faults.injected().len() < enough {
        let r = l.next();
        assert!(r.error.is_some(), "{r:?}");
    }
    l.faults.clear();
    let mut healed = l.next();
    while healed.error.is_some() {
        healed = l.next();
    }
    assert_eq!(l.health.healthz().code, 200, "healthz recovers with the first successful sync");
    assert!(kernel(&ns).equivalent(&rendered(&services2, &slices2)));

    let injected = l.faults.injected();
    assert_eq!(l.failures(), injected.len() as u64, "one failed sync per injected fault");
    // Backoff: retry k starts at least min(100 ms x 2^k, sync period) after failure k.
    let mut backoff = min_sync;
    for pair in injected.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(gap >= backoff, "retry after {gap:?}, sooner than the backoff {backoff:?}: {injected:?}");
        backoff = (backoff * 2).min(sync_period);
    }
    assert!(backoff == sync_period, "the backoff reached the sync period: {} failures", injected.len());
}

/// A full reconcile that keeps failing with nothing queued (here: repairing another program's
/// change) must also turn `/healthz` red: the kernel is not what verdict wants.
#[test]
fn a_failing_repair_with_nothing_queued_turns_healthz_red() {
    require_kernel!();
    let ns = Netns::new("f-repair").unwrap();
    let sync_period = Duration::from_millis(500);
    let l = Loop::start(&ns, Duration::from_millis(100), sync_period);
    let (services, slices) = synth::cluster(300, 3, POOL);
    l.list(&services, &slices);
    assert!(l.next().error.is_none());

    l.faults.fail(Fault::Busy, 0, u64::MAX);
    ns.check(&["nft", "flush", "chain", "inet", "kube-proxy", "services"]).unwrap();
    l.tx.send(Event::TableChanged { what: "a test flushed a chain".into(), generation: None }).unwrap();
    let failed = l.next();
    assert!(failed.full && failed.error.is_some(), "{failed:?}");
    wait_for_503(&l, sync_period * 8).expect("healthz stayed 200 while the repair kept failing");
    l.faults.clear();
    let mut healed = l.next();
    while healed.error.is_some() {
        healed = l.next();
    }
    assert_eq!(l.health.healthz().code, 200);
    assert!(kernel(&ns).equivalent(&rendered(&services, &slices)));
}

/// Polls `/healthz` (draining reports) until it answers 503; when it did.
fn wait_for_503(l: &Loop, within: Duration) -> Option<Instant> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if l.health.healthz().code == 503 {
            return Some(Instant::now());
        }
        if let Ok(r) = l.reports.recv_timeout(Duration::from_millis(20)) {
            assert!(r.error.is_some(), "a sync succeeded under a persistent fault: {r:?}");
        }
    }
    None
}
