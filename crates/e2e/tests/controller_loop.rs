//! The sync loop against the real kernel, fed through its event channel.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, channel};
use std::time::Duration;
use verdict_controller::event::{Event, Kind, Object};
use verdict_controller::health::ProxyHealth;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_e2e::netns::Netns;
use verdict_e2e::{require_kernel, synth};
use verdict_layout::{RenderOptions, render};
use verdict_model::source::{EndpointSlice, Node, Service};
use verdict_model::{Cidr, ModelCache, ProxyConfig};
use verdict_nft::Kernel;
use verdict_nft::netlink::Netlink;
use verdict_nft::netlink::monitor::{TableMonitor, TableNotice};
use verdict_nft::observe::observe;

struct Running {
    tx: SyncSender<Event>,
    reports: Receiver<SyncReport>,
    /// How often the loop asked for freed memory to be returned.
    releases: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn next(&self) -> SyncReport {
        self.reports.recv_timeout(Duration::from_secs(20)).expect("a sync within 20 s")
    }
    fn none_within(&self, d: Duration) -> bool {
        self.reports.recv_timeout(d).is_err()
    }
    fn stop(mut self) {
        drop(self.tx);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn config() -> ProxyConfig {
    ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() }
}

/// Starts a sync loop whose netlink socket lives in `ns`.
fn start(ns: &Netns) -> Running {
    start_with(ns, false)
}

/// Starts a sync loop that deletes unused chains at once, or (as before kernel 6.4) later.
fn start_with(ns: &Netns, defer_chain_deletion: bool) -> Running {
    start_loop(ns, defer_chain_deletion, false)
}

/// Starts a sync loop, optionally watching its table for other programs' changes. (A watched
/// loop never ends: the monitor thread keeps its channel open. Do not `stop` it.)
fn start_loop(ns: &Netns, defer_chain_deletion: bool, watched: bool) -> Running {
    start_configured(ns, defer_chain_deletion, watched, SyncConfig::default().release_before_objects)
}

/// Starts a sync loop that asks for freed memory to be returned before a transaction of
/// `release_before` objects or more.
fn start_configured(ns: &Netns, defer_chain_deletion: bool, watched: bool, release_before: usize) -> Running {
    let cfg = SyncConfig { defer_chain_deletion, release_before_objects: release_before, ..SyncConfig::default() };
    start_loop_with(ns, cfg, watched)
}

/// Starts a watched sync loop that saves its table's state in `state_dir` at
/// [`Event::Shutdown`] and adopts it at start, with a periodic full sync every `full_every`.
fn start_stateful(ns: &Netns, state_dir: &std::path::Path, full_every: Duration) -> Running {
    let cfg =
        SyncConfig { full_sync_period: full_every, state_dir: Some(state_dir.to_path_buf()), ..SyncConfig::default() };
    start_loop_with(ns, cfg, true)
}

/// Starts a sync loop configured as `cfg` (with short sync periods), its netlink socket in `ns`.
fn start_loop_with(ns: &Netns, cfg: SyncConfig, watched: bool) -> Running {
    let (tx, rx) = verdict_controller::event::queue();
    let monitor_tx = watched.then(|| tx.clone());
    let (rtx, reports) = channel();
    let path = format!("/run/netns/{}", ns.name());
    let releases = Arc::new(AtomicUsize::new(0));
    let counted = releases.clone();
    let thread = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let cfg =
            SyncConfig { min_sync_period: Duration::from_millis(50), sync_period: Duration::from_millis(400), ..cfg };
        let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
        let mut l = SyncLoop::new(ModelCache::new(config(), "bench"), Netlink::open().unwrap(), cfg, health)
            .with_reports(rtx)
            .with_memory_release(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            });
        if let Some(monitor_tx) = monitor_tx {
            l = l.with_monitor(verdict_controller::drift::watch_table("kube-proxy", monitor_tx).unwrap());
        }
        l.run(rx).unwrap();
    });
    Running { tx, reports, releases, thread: Some(thread) }
}

impl Running {
    /// Asks a stateful loop to save its state and waits for it to end.
    fn shut_down(mut self) {
        self.tx.send(Event::Shutdown).unwrap();
        self.thread.take().unwrap().join().unwrap();
    }
}

/// Makes the state file in `dir` claim the namespace's current generation, as if nothing had
/// been committed since it was saved (a generation that comes again: a namespace inode
/// reused, a node rebooted into the same sequence of commits).
fn claim_current_generation(ns: &Netns, dir: &std::path::Path) {
    use verdict_nft::ruleset::{KeySpec, Ruleset, Set, SetDecl, Table};
    use verdict_nft::snapshot::{decode, encode};
    let file =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).find(|p| p.extension() == Some("state".as_ref()));
    let file = file.expect("a saved state");
    let (mut stamp, snapshot) = decode(&std::fs::read(&file).unwrap()).unwrap();
    stamp.genid = ns.run(|| Netlink::open().unwrap().genid().unwrap());
    let mut elements = Ruleset::new(Table::default());
    for (name, set) in snapshot.sets {
        let mut s = Set::new(SetDecl::set(&name, KeySpec::Type(Vec::new())));
        s.elements = set;
        elements.sets.insert(name, s);
    }
    std::fs::write(&file, encode(&stamp, &elements)).unwrap();
}

fn node() -> Node {
    Node { name: "bench".into(), addresses: vec![("InternalIP".into(), "192.168.0.2".into())], ..Node::default() }
}

fn list(r: &Running, services: &[Service], slices: &[EndpointSlice], with_node: bool) {
    for k in Kind::ALL {
        r.tx.send(Event::InitStart(k)).unwrap();
    }
    for s in services {
        r.tx.send(Event::Apply(Object::Service(s.clone()))).unwrap();
    }
    r.tx.send(Event::InitDone(Kind::Service)).unwrap();
    for e in slices {
        r.tx.send(Event::Apply(Object::EndpointSlice(e.clone()))).unwrap();
    }
    r.tx.send(Event::InitDone(Kind::EndpointSlice)).unwrap();
    if with_node {
        r.tx.send(Event::Apply(Object::Node(node()))).unwrap();
        r.tx.send(Event::InitDone(Kind::Node)).unwrap();
    }
}

fn kernel_matches(ns: &Netns, services: &[Service], slices: &[EndpointSlice]) {
    let want = render(&synth::model(services, slices).model, &RenderOptions::default());
    let have = ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("table exists");
    assert!(have.ruleset.equivalent(&want), "the kernel's table is not the rendered one");
}

fn table_exists(ns: &Netns) -> bool {
    ns.exec(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap().status.success()
}

#[test]
fn nothing_is_programmed_before_every_kind_is_listed() {
    require_kernel!();
    let ns = Netns::new("gate").unwrap();
    let (services, slices) = synth::cluster(20, 2, 100);
    let r = start(&ns);
    list(&r, &services, &slices, false);
    assert!(r.none_within(Duration::from_millis(400)), "synced before the Node was listed");
    assert!(!table_exists(&ns), "a table was written before every kind was listed");
    r.tx.send(Event::Apply(Object::Node(node()))).unwrap();
    r.tx.send(Event::InitDone(Kind::Node)).unwrap();
    let first = r.next();
    assert!(first.error.is_none() && first.full);
    kernel_matches(&ns, &services, &slices);
    r.stop();
}

#[test]
fn freed_memory_is_returned_before_a_large_batch_and_only_then() {
    require_kernel!();
    let ns = Netns::new("release").unwrap();
    let (services, mut slices) = synth::cluster(300, 4, 10_000);
    let r = start_configured(&ns, false, false, 1_000);
    list(&r, &services, &slices, true);
    let first = r.next();
    assert!(first.full && first.error.is_none() && first.objects >= 1_000, "{first:?}");
    assert_eq!(r.releases.load(Ordering::SeqCst), 1, "once, before the first batch");
    slices[7] = synth::slice(7, 4, 10_000, 3);
    r.tx.send(Event::Apply(Object::EndpointSlice(slices[7].clone()))).unwrap();
    // Periodic full syncs may come first: they write nothing.
    let change = std::iter::from_fn(|| Some(r.next())).find(|s| s.objects > 0).unwrap();
    assert!(!change.full && change.error.is_none() && change.objects < 100, "{change:?}");
    assert_eq!(r.releases.load(Ordering::SeqCst), 1, "small syncs return nothing");
    r.stop();
}

#[test]
fn an_endpoint_change_renders_only_its_service() {
    require_kernel!();
    let ns = Netns::new("one").unwrap();
    let (services, mut slices) = synth::cluster(500, 4, 10_000);
    let r = start(&ns);
    list(&r, &services, &slices, true);
    assert!(r.next().full);
    slices[123] = synth::slice(123, 4, 10_000, 77);
    r.tx.send(Event::Apply(Object::EndpointSlice(slices[123].clone()))).unwrap();
    let report = r.next();
    assert!(!report.full && report.error.is_none(), "{report:?}");
    assert_eq!(report.rendered_ports, 1, "only the changed Service is rendered");
    assert!((2..=4).contains(&report.objects), "one slot swap (and hairpin entries): {report:?}");
    kernel_matches(&ns, &services, &slices);
    r.stop();
}

#[test]
fn a_relist_deletes_what_is_gone_without_a_flush() {
    require_kernel!();
    let ns = Netns::new("relist").unwrap();
    let (services, slices) = synth::cluster(200, 2, 1000);
    let r = start(&ns);
    list(&r, &services, &slices, true);
    assert!(r.next().full);
    // A relist (as after 410 Gone) in which 5 EndpointSlices no longer exist.
    r.tx.send(Event::InitStart(Kind::EndpointSlice)).unwrap();
    for e in &slices[5..] {
        r.tx.send(Event::Apply(Object::EndpointSlice(e.clone()))).unwrap();
    }
    r.tx.send(Event::InitDone(Kind::EndpointSlice)).unwrap();
    let report = r.next();
    assert!(!report.full && report.error.is_none(), "{report:?}");
    assert_eq!(report.rendered_ports, 5, "only the Services that lost their endpoints change");
    kernel_matches(&ns, &services, &slices[5..]);
    r.stop();
}

#[test]
fn a_failed_transaction_leads_to_a_full_reconcile() {
    require_kernel!();
    let ns = Netns::new("heal").unwrap();
    let (services, mut slices) = synth::cluster(100, 2, 1000);
    let r = start(&ns);
    list(&r, &services, &slices, true);
    assert!(r.next().full);
    // Somebody deletes the table; the next partial sync fails, a full one repairs it.
    ns.check(&["nft", "delete", "table", "inet", "kube-proxy"]).unwrap();
    slices[7] = synth::slice(7, 2, 1000, 3);
    r.tx.send(Event::Apply(Object::EndpointSlice(slices[7].clone()))).unwrap();
    let failed = r.next();
    assert!(failed.error.is_some() && !failed.full, "{failed:?}");
    let healed = r.next();
    assert!(healed.full && healed.error.is_none(), "{healed:?}");
    kernel_matches(&ns, &services, &slices);
    r.stop();
}

#[test]
fn a_restart_writes_nothing_or_only_what_changed_meanwhile() {
    require_kernel!();
    let ns = Netns::new("restart").unwrap();
    let (services, mut slices) = synth::cluster(1000, 3, 5000);
    let first = start(&ns);
    list(&first, &services, &slices, true);
    let report = first.next();
    assert!(report.full && report.objects > 3000, "{report:?}");
    first.stop();

    // Same objects: the new process adopts the table and writes nothing.
    let second = start(&ns);
    list(&second, &services, &slices, true);
    let report = second.next();
    assert!(report.full && report.error.is_none());
    assert_eq!(report.objects, 0, "a restart with nothing changed writes nothing");
    second.stop();

    // One Service changed while no agent ran: only that is written.
    slices[500] = synth::slice(500, 3, 5000, 11);
    let third = start(&ns);
    list(&third, &services, &slices, true);
    let report = third.next();
    assert!(report.full && report.error.is_none());
    assert!((1..=4).contains(&report.objects), "only the change: {report:?}");
    kernel_matches(&ns, &services, &slices);
    third.stop();
}

/// The per-Service chains of the kernel's table and their rule counts.
fn own_chains(ns: &Netns) -> BTreeMap<String, usize> {
    let out = ns.exec(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut chains = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("chain ") {
            let name = rest.trim_end_matches(" {").trim_matches('"').to_string();
            current = name.contains('/').then_some(name);
            if let Some(c) = &current {
                chains.insert(c.clone(), 0);
            }
        } else if line == "}" {
            current = None;
        } else if let Some(c) = &current
            && !line.is_empty()
        {
            *chains.get_mut(c).unwrap() += 1;
        }
    }
    chains
}

#[test]
fn deferred_chain_deletion_flushes_first_and_deletes_a_second_later() {
    require_kernel!();
    let ns = Netns::new("stale").unwrap();
    let (mut services, mut slices) = synth::cluster(20, 2, 1000);
    // ClientIP affinity: Service 3 gets upstream's per-Service chains (one per endpoint).
    services[3].session_affinity = "ClientIP".into();
    let r = start_with(&ns, true);
    list(&r, &services, &slices, true);
    assert!(r.next().full);
    kernel_matches(&ns, &services, &slices);
    let before = own_chains(&ns);
    assert!(before.len() >= 3 && before.values().all(|&rules| rules > 0), "{before:?}");

    // One endpoint replaced: its chain is flushed and kept, the new one is added.
    slices[3] = synth::slice(3, 2, 1000, 9);
    r.tx.send(Event::Apply(Object::EndpointSlice(slices[3].clone()))).unwrap();
    let changed = r.next();
    assert!(!changed.full && changed.error.is_none(), "{changed:?}");
    let after = own_chains(&ns);
    let gone: Vec<&String> = before.keys().filter(|c| !after.contains_key(*c) || after[*c] == 0).collect();
    assert_eq!(gone.len(), 1, "one endpoint chain went out of use: {after:?}");
    // Still there, flushed. Under software emulation (`cargo xtask kernels`, TCG) listing the
    // table can take longer than the deferral (1 s), so it may already be gone: then only the
    // transaction of its own below may have deleted it (its report is checked there).
    assert!(matches!(after.get(gone[0]), Some(0) | None), "it is still there, flushed: {after:?}");
    let old_chain = gone[0].clone();

    // A second later, a transaction of its own deletes it (nothing else changed).
    let tidied = r.next();
    assert!(!tidied.full && tidied.error.is_none(), "{tidied:?}");
    assert_eq!((tidied.rendered_ports, tidied.objects), (0, 1), "only the chain deletion: {tidied:?}");
    assert!(!own_chains(&ns).contains_key(&old_chain));
    kernel_matches(&ns, &services, &slices);

    // Out of use and back in use before its deletion is due: it is kept, with its rules.
    let original = synth::slice(3, 2, 1000, 0);
    r.tx.send(Event::Apply(Object::EndpointSlice(original.clone()))).unwrap();
    assert!(r.next().error.is_none());
    r.tx.send(Event::Apply(Object::EndpointSlice(slices[3].clone()))).unwrap();
    assert!(r.next().error.is_none());
    let tidied = r.next();
    assert_eq!(tidied.objects, 1, "only the chain of the endpoint that is gone again: {tidied:?}");
    kernel_matches(&ns, &services, &slices);

    // The Service deleted: all of its chains are flushed, then deleted (in a transaction of
    // their own, whose report counts them; listed in between, they may already be gone under
    // TCG, as above).
    let own = own_chains(&ns);
    assert!(own.len() >= 3, "{own:?}");
    r.tx.send(Event::Delete { kind: Kind::Service, namespace: "bench".into(), name: "svc-3".into() }).unwrap();
    assert!(r.next().error.is_none());
    let flushed = own_chains(&ns);
    assert!(flushed.keys().all(|c| own.contains_key(c)) && flushed.values().all(|&rules| rules == 0), "{flushed:?}");
    let tidied = r.next();
    assert_eq!(tidied.objects, own.len(), "{tidied:?}");
    assert!(own_chains(&ns).is_empty());
    services.remove(3);
    kernel_matches(&ns, &services, &slices);
    r.stop();
}

#[test]
fn changes_by_other_programs_are_reconciled_and_our_own_are_not_taken_for_them() {
    require_kernel!();
    let ns = Netns::new("drift").unwrap();
    let (services, mut slices) = synth::cluster(50, 2, 1000);
    let r = start_loop(&ns, false, true);
    list(&r, &services, &slices, true);
    assert!(r.next().full);

    // Our own commits: partial syncs, and no reconcile after them.
    for (k, slice) in slices.iter_mut().enumerate().take(4).skip(1) {
        *slice = synth::slice(k, 2, 1000, k);
        r.tx.send(Event::Apply(Object::EndpointSlice(slice.clone()))).unwrap();
        let report = r.next();
        assert!(!report.full && report.objects > 0, "{report:?}");
    }
    assert!(r.none_within(Duration::from_millis(500)), "verdict's own commits were taken for another program's");

    // Another program flushes a chain, then deletes the table: each is repaired with no change
    // from the API.
    for tamper in [
        &["nft", "flush", "chain", "inet", "kube-proxy", "services"][..],
        &["nft", "delete", "table", "inet", "kube-proxy"],
    ] {
        ns.check(tamper).unwrap();
        let healed = r.next();
        assert!(healed.full && healed.error.is_none() && healed.objects > 0, "{tamper:?}: {healed:?}");
        kernel_matches(&ns, &services, &slices);
        // Notices of the same commit that arrive after the repair read the table (a deleted
        // table is notified in many datagrams) are not taken for a new change.
        assert!(r.none_within(Duration::from_millis(500)), "{tamper:?}: repaired twice");
    }

    // Another table's changes are none of our business.
    ns.check(&["nft", "add", "table", "inet", "somebody-else"]).unwrap();
    ns.check(&["nft", "add", "chain", "inet", "somebody-else", "c"]).unwrap();
    assert!(r.none_within(Duration::from_millis(500)), "another table's change caused a sync");
}

/// What the loop's dismissal of late notices rests on: every notice of one commit carries the
/// generation that commit made, however many datagrams it takes.
#[test]
fn the_notices_of_a_commit_carry_the_generation_it_made() {
    require_kernel!();
    let ns = Netns::new("notice-gen").unwrap();
    let (services, slices) = synth::cluster(200, 2, 1000);
    let r = start(&ns);
    list(&r, &services, &slices, true);
    assert!(r.next().error.is_none());
    r.stop();

    let (tx, notices) = channel();
    let path = format!("/run/netns/{}", ns.name());
    // Blocks in `wait` until the test binary ends (as a watched loop's monitor does).
    std::thread::spawn(move || {
        nix::sched::setns(std::fs::File::open(&path).unwrap(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let (mut monitor, _gate) = TableMonitor::open("kube-proxy").unwrap();
        tx.send(None).unwrap();
        while let Ok(notice) = monitor.wait() {
            if tx.send(Some(notice)).is_err() {
                return;
            }
        }
    });
    assert_eq!(notices.recv_timeout(Duration::from_secs(10)).unwrap(), None, "the monitor listens");
    ns.check(&["nft", "delete", "table", "inet", "kube-proxy"]).unwrap();
    let made = ns.run(|| Netlink::open().unwrap().generation().unwrap());
    let mut seen = Vec::new();
    while let Ok(Some(notice)) = notices.recv_timeout(Duration::from_secs(1)) {
        seen.push(notice);
    }
    assert!(seen.len() > 1, "a table of 200 Services is deleted in more than one datagram of notices: {seen:?}");
    for notice in &seen {
        assert!(
            matches!(notice, TableNotice::Changed { generation, .. } if *generation == made as u16),
            "{notice:?}: the commit made generation {made}"
        );
    }
}

#[test]
fn a_saved_state_is_adopted_only_by_the_table_it_describes_and_rechecked_periodically() {
    require_kernel!();
    let ns = Netns::new("adopt").unwrap();
    let state = tempfile::TempDir::with_prefix("verdict-adopt-").unwrap();
    let state = state.path();
    let (services, slices) = synth::cluster(60, 2, 5000);
    let hour = Duration::from_secs(3600);
    let first = start_stateful(&ns, state, hour);
    list(&first, &services, &slices, true);
    assert!(first.next().error.is_none());
    first.shut_down();

    // Another table took its place (half the Services, the same chains and sets), and the
    // generation came round again: the elements looked up in the kernel are not the ones
    // saved, so nothing is adopted.
    ns.check(&["nft", "delete", "table", "inet", "kube-proxy"]).unwrap();
    let other = start(&ns);
    list(&other, &services[..30], &slices[..30], true);
    assert!(other.next().error.is_none());
    other.stop();
    claim_current_generation(&ns, state);
    let second = start_stateful(&ns, state, hour);
    list(&second, &services, &slices, true);
    let report = second.next();
    assert!(report.error.is_none() && report.objects > 0, "{report:?}");
    kernel_matches(&ns, &services, &slices);
    second.shut_down();

    // Same structure, one element gone behind the saved state's back: that cannot be seen
    // without reading the elements, which the periodic full sync does.
    // The second key (the first, the last and two between are looked up at adoption).
    let element = {
        let file = std::fs::read_dir(state).unwrap().flatten().map(|e| e.path()).next().unwrap();
        let (_, snapshot) = verdict_nft::snapshot::decode(&std::fs::read(&file).unwrap()).unwrap();
        let (key, _) = snapshot.sets["service-ips"].iter().nth(1).expect("two Services");
        let k = key.as_slice();
        let proto = match k[4] {
            6 => "tcp",
            17 => "udp",
            other => panic!("protocol {other}"),
        };
        format!("{}.{}.{}.{} . {proto} . {}", k[0], k[1], k[2], k[3], u16::from_be_bytes([k[8], k[9]]))
    };
    ns.check(&["nft", "delete", "element", "inet", "kube-proxy", "service-ips", &format!("{{ {element} }}")]).unwrap();
    claim_current_generation(&ns, state);
    let third = start_stateful(&ns, state, Duration::from_secs(2));
    list(&third, &services, &slices, true);
    let adopted = third.next();
    assert!(adopted.full && adopted.error.is_none() && adopted.objects == 0, "adopted as saved: {adopted:?}");
    let periodic = third.next();
    assert!(
        periodic.full && periodic.objects >= 1,
        "the periodic full sync reads the kernel and repairs: {periodic:?}"
    );
    kernel_matches(&ns, &services, &slices);
}
