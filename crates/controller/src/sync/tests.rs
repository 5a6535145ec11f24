//! The loop's scenarios on a kernel in memory ([`MemoryKernel`]): no CAP_NET_ADMIN needed.
//! The same scenarios run against the real kernel in `crates/e2e/tests/controller_loop.rs`
//! and `faults.rs`.

use super::*;
use crate::event::queue;
use std::collections::BTreeSet;
use std::sync::mpsc::{SyncSender, channel};
use verdict_layout::render;
use verdict_model::source::{EndpointSlice, Service};
use verdict_model::synth;
use verdict_nft::Ruleset;
use verdict_nft::kernel::{MemoryKernel, Refuse};

const TABLE: &str = "kube-proxy";

struct Running {
    tx: SyncSender<Event>,
    reports: std::sync::mpsc::Receiver<SyncReport>,
    thread: Option<std::thread::JoinHandle<Result<(), SyncError>>>,
}

impl Running {
    fn start(kernel: &MemoryKernel, defer_chain_deletion: bool) -> Running {
        Running::start_with(kernel, SyncConfig { defer_chain_deletion, ..quick() })
    }

    fn start_with(kernel: &MemoryKernel, cfg: SyncConfig) -> Running {
        let (tx, rx) = queue();
        let (rtx, reports) = channel();
        let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
        let cache = ModelCache::new(synth::config(), "bench");
        let sync_loop = SyncLoop::new(cache, kernel.clone(), cfg, health).with_reports(rtx);
        let thread = std::thread::spawn(move || sync_loop.run(rx));
        Running { tx, reports, thread: Some(thread) }
    }

    fn next(&self) -> SyncReport {
        self.reports.recv_timeout(Duration::from_secs(10)).expect("a sync within 10 s")
    }

    fn none_within(&self, d: Duration) -> bool {
        self.reports.recv_timeout(d).is_err()
    }

    fn send(&self, ev: Event) {
        self.tx.send(ev).unwrap();
    }

    fn list(&self, services: &[Service], slices: &[EndpointSlice]) {
        self.list_services(services);
        self.send(Event::InitStart(Kind::EndpointSlice));
        for e in slices {
            self.send(Event::Apply(Object::EndpointSlice(e.clone())));
        }
        self.send(Event::InitDone(Kind::EndpointSlice));
        for kind in [Kind::Node, Kind::ServiceCidr] {
            self.send(Event::InitStart(kind));
        }
        self.send(Event::Apply(Object::Node(synth::node())));
        self.send(Event::InitDone(Kind::Node));
        self.send(Event::InitDone(Kind::ServiceCidr));
    }

    fn list_services(&self, services: &[Service]) {
        self.send(Event::InitStart(Kind::Service));
        for s in services {
            self.send(Event::Apply(Object::Service(s.clone())));
        }
        self.send(Event::InitDone(Kind::Service));
    }

    fn stop(mut self) {
        drop(self.tx);
        self.thread.take().unwrap().join().unwrap().unwrap();
    }
}

/// Syncs 20 ms apart, retries within 200 ms.
fn quick() -> SyncConfig {
    SyncConfig {
        min_sync_period: Duration::from_millis(20),
        sync_period: Duration::from_millis(200),
        ..SyncConfig::default()
    }
}

/// Waits up to 5 s for `f` to hold.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rendered(services: &[Service], slices: &[EndpointSlice]) -> Ruleset {
    render(&synth::model(services, slices).model, &RenderOptions::default())
}

fn holds(kernel: &MemoryKernel, services: &[Service], slices: &[EndpointSlice]) -> bool {
    kernel.table(TABLE).is_some_and(|t| t.equivalent(&rendered(services, slices)))
}

#[test]
fn nothing_is_programmed_before_every_kind_is_listed_then_the_whole_table() {
    let kernel = MemoryKernel::new();
    let (services, slices) = synth::cluster(30, 2, 1000);
    let r = Running::start(&kernel, false);
    r.list_services(&services);
    assert!(r.none_within(Duration::from_millis(300)), "no sync before slices, Nodes and ServiceCIDRs are listed");
    assert_eq!(kernel.commits(), 0);
    r.list(&services, &slices);
    let first = r.next();
    assert!(first.full && first.error.is_none() && first.rendered_ports == 30, "{first:?}");
    assert!(holds(&kernel, &services, &slices));
    r.stop();
}

#[test]
fn a_change_renders_only_its_service() {
    let kernel = MemoryKernel::new();
    let (services, mut slices) = synth::cluster(30, 2, 1000);
    let r = Running::start(&kernel, false);
    r.list(&services, &slices);
    assert!(r.next().full);
    slices[7] = synth::slice(7, 2, 1000, 3);
    r.send(Event::Apply(Object::EndpointSlice(slices[7].clone())));
    let change = r.next();
    assert!(!change.full && change.rendered_ports == 1 && change.error.is_none(), "{change:?}");
    assert!(holds(&kernel, &services, &slices));
    r.stop();
}

#[test]
fn a_refused_commit_leaves_the_table_and_the_full_reconcile_after_it_converges() {
    let kernel = MemoryKernel::new();
    let (services, mut slices) = synth::cluster(30, 2, 1000);
    let r = Running::start(&kernel, false);
    r.list(&services, &slices);
    assert!(r.next().error.is_none());
    let old = kernel.table(TABLE).unwrap();
    kernel.refuse(Refuse::Errno(nix::errno::Errno::ENOMEM));
    slices[3] = synth::slice(3, 2, 1000, 5);
    r.send(Event::Apply(Object::EndpointSlice(slices[3].clone())));
    let failed = r.next();
    assert!(failed.error.as_deref().is_some_and(|e| e.contains("ENOMEM")), "{failed:?}");
    assert!(kernel.table(TABLE).unwrap().equivalent(&old), "a refused batch applies nothing");
    let retry = r.next();
    assert!(retry.full && retry.error.is_none(), "the retry reconciles the whole table: {retry:?}");
    assert!(holds(&kernel, &services, &slices));
    r.stop();
}

#[test]
fn another_programs_change_is_repaired_by_a_full_sync_that_reads_the_kernel() {
    let kernel = MemoryKernel::new();
    let (services, slices) = synth::cluster(30, 2, 1000);
    let r = Running::start(&kernel, false);
    r.list(&services, &slices);
    assert!(r.next().error.is_none());
    kernel.edit(TABLE, |t| {
        let set = t.sets.values_mut().find(|s| !s.elements.is_empty()).expect("a set with elements");
        set.elements = Default::default();
    });
    assert!(!holds(&kernel, &services, &slices));
    let edited = kernel.clone().generation().unwrap() as u16;
    let notice = || Event::TableChanged { what: "delete element".into(), generation: Some(edited) };
    r.send(notice());
    let repair = r.next();
    assert!(repair.full && repair.objects > 0 && repair.error.is_none(), "{repair:?}");
    assert!(holds(&kernel, &services, &slices));

    // More notices of the same commit, arriving after the repair read the table (a large
    // change is notified in many datagrams): nothing more to do.
    r.send(notice());
    r.send(notice());
    assert!(r.none_within(Duration::from_millis(300)), "a change the repair had read was repaired again");

    // Another commit, or notices lost, are reconciled again.
    kernel.edit(TABLE, |t| t.sets.values_mut().for_each(|s| s.elements = Default::default()));
    let later = kernel.clone().generation().unwrap() as u16;
    r.send(Event::TableChanged { what: "delete element".into(), generation: Some(later) });
    assert!(r.next().full);
    assert!(holds(&kernel, &services, &slices));
    r.send(Event::TableChanged { what: "notices lost".into(), generation: None });
    assert!(r.next().full);
    r.stop();
}

#[test]
fn a_restart_over_the_table_it_left_writes_nothing() {
    let kernel = MemoryKernel::new();
    let (services, mut slices) = synth::cluster(30, 2, 1000);
    let first = Running::start(&kernel, false);
    first.list(&services, &slices);
    assert!(first.next().objects > 0);
    first.stop();
    let second = Running::start(&kernel, false);
    second.list(&services, &slices);
    let adopted = second.next();
    assert!(adopted.full && adopted.error.is_none() && adopted.objects == 0, "{adopted:?}");
    second.stop();
    // What changed while no agent ran, and only that, is written.
    slices[11] = synth::slice(11, 2, 1000, 7);
    let third = Running::start(&kernel, false);
    third.list(&services, &slices);
    let report = third.next();
    assert!((1..=4).contains(&report.objects), "{report:?}");
    assert!(holds(&kernel, &services, &slices));
    third.stop();
}

#[test]
fn a_commit_by_another_program_between_read_and_commit_makes_the_sync_read_and_plan_again() {
    let kernel = MemoryKernel::new();
    let (services, slices) = synth::cluster(30, 2, 1000);
    kernel.refuse(Refuse::CommitAfterRead);
    let r = Running::start(&kernel, false);
    r.list(&services, &slices);
    let first = r.next();
    assert!(first.full && first.error.is_none(), "planned again after the refusal: {first:?}");
    assert_eq!(kernel.commits(), 1, "one commit: the refused plan applied nothing");
    assert!(holds(&kernel, &services, &slices));
    r.stop();
}

/// Before 6.4 an anonymous vmap's chains stay busy until its rule's set is destroyed after
/// the commit: the loop learns it from the refusal, then flushes chains and deletes them a
/// second later, in a transaction of their own.
#[test]
fn before_6_4_a_chain_out_of_use_is_flushed_then_deleted_a_second_later() {
    let kernel = MemoryKernel::before_6_4();
    let (mut services, mut slices) = synth::cluster(10, 2, 1000);
    services[3].session_affinity = "ClientIP".into();
    let r = Running::start(&kernel, false);
    r.list(&services, &slices);
    assert!(r.next().error.is_none());
    let chains = |k: &MemoryKernel| k.table(TABLE).unwrap().chains.keys().cloned().collect::<BTreeSet<String>>();
    let before = chains(&kernel);

    slices[3] = synth::slice(3, 2, 1000, 9);
    r.send(Event::Apply(Object::EndpointSlice(slices[3].clone())));
    let refused = r.next();
    assert!(refused.error.as_deref().is_some_and(|e| e.contains("EBUSY")), "{refused:?}");
    let retried = r.next();
    assert!(retried.full && retried.error.is_none(), "deferring from now on: {retried:?}");
    let gone: Vec<String> = before.difference(&chains(&kernel)).cloned().collect();
    assert!(gone.is_empty(), "the chain out of use is still there, flushed: {gone:?}");
    let table = kernel.table(TABLE).unwrap();
    assert!(table.chains.values().any(|c| c.rules.is_empty() && c.base.is_none()), "one is flushed");
    let tidied = r.next();
    assert!(tidied.error.is_none() && tidied.objects == 1 && tidied.rendered_ports == 0, "{tidied:?}");
    assert_eq!(before.difference(&chains(&kernel)).count(), 1, "one chain went");
    assert!(holds(&kernel, &services, &slices));
    r.stop();
}

#[test]
fn the_fast_paths_devices_follow_the_interfaces_in_transactions_of_their_own() {
    let kernel = MemoryKernel::new();
    let (services, slices) = synth::cluster(30, 2, 1000);
    let r = Running::start_with(&kernel, SyncConfig { fast_path: true, ..quick() });
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<BTreeSet<String>>();
    let held = || kernel.table(TABLE).and_then(|t| t.flowtables.get(verdict_layout::render::FAST_PATH).cloned());
    // The watcher's first listing may come before the table exists: it is kept until then.
    r.send(Event::FastPathDevices(names(&["br0", "eth0"])));
    r.list(&services, &slices);
    let first = r.next();
    assert!(first.full && first.error.is_none(), "{first:?}");
    eventually("the first devices", || held().is_some_and(|f| f.devices == names(&["br0", "eth0"])));
    let forward = &kernel.table(TABLE).unwrap().chains["filter-forward"];
    assert!(forward.rules.iter().any(|r| r.flowtable_refs().any(|f| f == "fastpath")), "{forward:?}");

    // A pod's veth appears, another interface goes: one small transaction each, no sync.
    let commits = kernel.commits();
    r.send(Event::FastPathDevices(names(&["br0", "eth0", "veth1"])));
    eventually("veth1 joined", || held().is_some_and(|f| f.devices.contains("veth1")));
    r.send(Event::FastPathDevices(names(&["br0", "veth1"])));
    eventually("eth0 removed", || held().is_some_and(|f| f.devices == names(&["br0", "veth1"])));
    assert_eq!(kernel.commits(), commits + 2);
    assert!(r.none_within(Duration::from_millis(100)), "device changes are not syncs");

    // Refused (an interface gone between the listing and the commit): tried again.
    kernel.refuse(Refuse::Errno(nix::errno::Errno::ENOENT));
    r.send(Event::FastPathDevices(names(&["br0", "veth1", "veth2"])));
    eventually("veth2 joined on the retry", || held().is_some_and(|f| f.devices.contains("veth2")));
    assert!(holds_with_fast_path(&kernel, &services, &slices));
    r.stop();
}

#[test]
fn without_the_fast_path_device_listings_change_nothing() {
    let kernel = MemoryKernel::new();
    let (services, slices) = synth::cluster(5, 2, 1000);
    let r = Running::start_with(&kernel, quick());
    r.list(&services, &slices);
    assert!(r.next().error.is_none());
    let commits = kernel.commits();
    r.send(Event::FastPathDevices(["eth0".to_string()].into_iter().collect()));
    assert!(r.none_within(Duration::from_millis(200)));
    assert_eq!(kernel.commits(), commits);
    assert!(kernel.table(TABLE).unwrap().flowtables.is_empty());
    r.stop();
}

fn holds_with_fast_path(kernel: &MemoryKernel, services: &[Service], slices: &[EndpointSlice]) -> bool {
    let opts = RenderOptions { fast_path: true, ..RenderOptions::default() };
    kernel.table(TABLE).is_some_and(|t| t.equivalent(&render(&synth::model(services, slices).model, &opts)))
}

/// Counts the syncs that succeeded.
struct CountSyncs(Arc<std::sync::atomic::AtomicUsize>);

impl AfterSync for CountSyncs {
    fn after_sync(&mut self, _: &verdict_model::ProxyModel, _: bool, _: &[verdict_model::PortChange]) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_quiet_table_is_synced_every_sync_period_and_nothing_is_written() {
    let kernel = MemoryKernel::new();
    let (services, mut slices) = synth::cluster(30, 2, 1000);
    let (tx, rx) = queue();
    let (rtx, reports) = channel();
    let synced = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
    let cfg = SyncConfig { sync_period: Duration::from_millis(150), ..quick() };
    let sync_loop = SyncLoop::new(ModelCache::new(synth::config(), "bench"), kernel.clone(), cfg, health)
        .with_reports(rtx)
        .with_after_sync(CountSyncs(synced.clone()));
    let thread = std::thread::spawn(move || sync_loop.run(rx));
    let r = Running { tx, reports, thread: Some(thread) };
    r.list(&services, &slices);
    assert!(r.next().full);
    let commits = kernel.commits();
    let count = || synced.load(std::sync::atomic::Ordering::SeqCst);
    let after_first = count();
    // About five periods with nothing changed: a sync each, none of them a commit or a report.
    assert!(r.none_within(Duration::from_millis(800)), "a periodic sync with nothing to do is not reported");
    assert!(count() >= after_first + 3, "{} syncs in 800 ms at a 150 ms sync period", count() - after_first);
    assert_eq!(kernel.commits(), commits, "a periodic sync wrote to the kernel");
    assert!(holds(&kernel, &services, &slices));
    // A change still syncs as soon as it may.
    slices[3] = synth::slice(3, 2, 1000, 3);
    r.send(Event::Apply(Object::EndpointSlice(slices[3].clone())));
    let change = r.next();
    assert!(!change.full && change.rendered_ports == 1 && change.objects > 0, "{change:?}");
    assert!(holds(&kernel, &services, &slices));
    r.stop();
}

/// A cold start of a table larger than [`SyncConfig::max_transaction_objects`].
fn split_cold_start() -> (MemoryKernel, Running, Vec<Service>, Vec<EndpointSlice>) {
    let kernel = MemoryKernel::new();
    let (services, slices) = synth::cluster(200, 3, 1000);
    let r = Running::start_with(&kernel, SyncConfig { max_transaction_objects: 300, ..quick() });
    (kernel, r, services, slices)
}

#[test]
fn a_cold_start_is_committed_in_bounded_transactions_and_switched_on_last() {
    let (kernel, r, services, slices) = split_cold_start();
    // Refuse the last transaction (the switch), to see what the ones before it left.
    let want = rendered(&services, &slices);
    let parts = verdict_nft::coldstart::split(verdict_nft::diff(None, &want).transaction, &want, 300).len();
    kernel.refuse_after(parts - 1, nix::errno::Errno::EIO);
    r.list(&services, &slices);
    let failed = r.next();
    assert!(failed.error.is_some(), "{failed:?}");
    let left = kernel.table(TABLE).expect("the parts before the switch were committed");
    assert!(verdict_nft::coldstart::dormant(Some(&left), &want), "no base chain has a rule before the switch");
    assert!(left.sets.values().map(|s| s.elements.len()).sum::<usize>() > 0);
    let retried = r.next();
    assert!(retried.full && retried.error.is_none(), "{retried:?}");
    assert!(holds(&kernel, &services, &slices));
    let sizes = kernel.commit_sizes();
    assert!(sizes.len() > 2, "{sizes:?}");
    assert!(sizes.iter().all(|n| *n <= 300), "{sizes:?}");
    assert_eq!(retried.transactions, 1, "only the switch was left: {retried:?}");
    r.stop();
}

#[test]
fn a_cold_start_interrupted_between_its_transactions_is_finished_by_the_next_start() {
    let (kernel, r, services, slices) = split_cold_start();
    kernel.refuse_after(2, nix::errno::Errno::ENOMEM);
    r.list(&services, &slices);
    let failed = r.next();
    assert!(failed.error.is_some(), "{failed:?}");
    assert_eq!(kernel.commits(), 2);
    // The agent dies here; another starts over what it left.
    drop(r.tx);
    let _ = r.thread.map(|t| t.join());
    let again = Running::start_with(&kernel, SyncConfig { max_transaction_objects: 300, ..quick() });
    again.list(&services, &slices);
    let first = again.next();
    assert!(first.full && first.error.is_none(), "{first:?}");
    assert!(first.transactions > 1, "the rest, in parts again: {first:?}");
    assert!(holds(&kernel, &services, &slices));
    assert!(kernel.commit_sizes().iter().all(|n| *n <= 300), "{:?}", kernel.commit_sizes());
    again.stop();
}
