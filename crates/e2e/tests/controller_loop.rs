//! The sync loop against the real kernel, fed through its event channel.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;
use verdict_controller::event::{Event, Kind, Object};
use verdict_controller::health::ProxyHealth;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_e2e::netns::Netns;
use verdict_e2e::{require_kernel, synth};
use verdict_model::source::{EndpointSlice, Node, Service};
use verdict_model::{Cidr, ModelCache, ProxyConfig};
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;
use verdict_nft::{RenderOptions, render};

struct Running {
    tx: Sender<Event>,
    reports: Receiver<SyncReport>,
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
    let (tx, rx) = channel();
    let (rtx, reports) = channel();
    let path = format!("/run/netns/{}", ns.name());
    let thread = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let cfg = SyncConfig {
            min_sync_period: Duration::from_millis(50),
            sync_period: Duration::from_millis(400),
            ..SyncConfig::default()
        };
        let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
        let l =
            SyncLoop::new(ModelCache::new(config(), "bench"), Netlink::open().unwrap(), cfg, health).with_reports(rtx);
        l.run(rx).unwrap();
    });
    Running { tx, reports, thread: Some(thread) }
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
