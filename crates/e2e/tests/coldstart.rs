//! A cold start sent in parts (`verdict_nft::coldstart`) against the real kernel, in namespaces
//! of the test's own: packets sent all along see no table or the whole one, never a part; a
//! cold start interrupted between its transactions is finished by the next start, exactly; and
//! the table in between lists with `nft` and loads back with `nft -f`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use verdict_controller::event::{Event, Kind, Object};
use verdict_controller::health::ProxyHealth;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_e2e::netns::Netns;
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::require_kernel;
use verdict_e2e::scenario::{Cond, Eps, Lab, NODE, Svc};
use verdict_model::source::{EndpointSlice, Node, Service};
use verdict_model::{ModelCache, ProxyConfig, synth};
use verdict_nft::netlink::Netlink;
use verdict_nft::netlink::fault::{Fault, Faults};
use verdict_nft::observe::observe;
use verdict_nft::{RenderOptions, render};

/// Objects per transaction: small, so that a few thousand Services take dozens of them.
const MAX: usize = 1000;

struct Loop {
    tx: Sender<Event>,
    reports: Receiver<SyncReport>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Loop {
    /// A sync loop programming namespace `ns` as node `node`, with `faults` injected.
    fn start(ns: &Netns, config: ProxyConfig, node: &str, faults: Faults) -> Loop {
        let (tx, rx) = channel();
        let (rtx, reports) = channel();
        let path = format!("/run/netns/{}", ns.name());
        let node = node.to_string();
        let thread = std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("namespace");
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let cfg = SyncConfig {
                min_sync_period: Duration::from_millis(50),
                sync_period: Duration::from_secs(5),
                max_transaction_objects: MAX,
                ..SyncConfig::default()
            };
            let nl = Netlink::open().expect("netlink").with_faults(faults);
            let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
            let _ = SyncLoop::new(ModelCache::new(config, &node), nl, cfg, health).with_reports(rtx).run(rx);
        });
        Loop { tx, reports, thread: Some(thread) }
    }

    fn list(&self, services: &[Service], slices: &[EndpointSlice], node: Node) {
        for k in Kind::ALL {
            self.tx.send(Event::InitStart(k)).unwrap();
        }
        for s in services {
            self.tx.send(Event::Apply(Object::Service(s.clone()))).unwrap();
        }
        for e in slices {
            self.tx.send(Event::Apply(Object::EndpointSlice(e.clone()))).unwrap();
        }
        self.tx.send(Event::Apply(Object::Node(node))).unwrap();
        for k in Kind::ALL {
            self.tx.send(Event::InitDone(k)).unwrap();
        }
    }

    fn next(&self) -> SyncReport {
        self.reports.recv_timeout(Duration::from_secs(60)).expect("a sync within 60 s")
    }

    /// The agent dies: whatever it committed stays.
    fn kill(mut self) {
        drop(self.tx);
        let _ = self.thread.take().map(|t| t.join());
    }
}

/// `n` Services with 10 endpoints each (pods that do not exist: they only fill the maps), with
/// ClusterIPs in 172.30.128.0/17, inside the lab's ServiceCIDR.
fn filler(n: usize) -> (Vec<Service>, Vec<EndpointSlice>) {
    let (mut services, slices) = synth::cluster(n, 10, synth::POD_POOL);
    for (i, s) in services.iter_mut().enumerate() {
        s.cluster_ips = vec![format!("172.30.{}.{}", 128 + i / 250, 1 + i % 250)];
    }
    (services, slices)
}

#[test]
fn packets_during_a_cold_start_in_parts_see_no_table_or_the_whole_one() {
    require_kernel!();
    let lab = Lab::new("cold", Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab");
    // Six Services the client tries all along, each on one pod; their elements come last in
    // every map (highest addresses), so a table switched on early would show them half-done.
    let backends = ["a1", "b1", "a2", "b2", "a1", "b1"];
    let mut services: Vec<Service> = Vec::new();
    let mut slices: Vec<EndpointSlice> = Vec::new();
    let mut expected: BTreeMap<SocketAddr, &str> = BTreeMap::new();
    for (i, pod) in backends.iter().enumerate() {
        let (name, ip) = (format!("web-{i}"), format!("172.30.250.{}", 10 + i));
        services.push(Svc::new(&name, &[ip.as_str()]).port("http", "TCP", 80).0);
        slices.push(Eps::v4(&name).port("http", "TCP", 8080).pod(&lab, pod, Cond::Ready).0);
        expected.insert(format!("{ip}:80").parse().unwrap(), pod);
    }
    let (fill_services, fill_slices) = filler(3000);
    services.extend(fill_services);
    slices.extend(fill_slices);

    let seen: Arc<Mutex<BTreeMap<SocketAddr, Vec<Outcome>>>> = Default::default();
    let stop = Arc::new(AtomicBool::new(false));
    let client = &lab.cluster.pod("c1").ns;
    std::thread::scope(|scope| {
        for addr in expected.keys().copied() {
            let (seen, stop) = (seen.clone(), stop.clone());
            scope.spawn(move || {
                client.run(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = probe::tcp(addr, Duration::from_millis(20));
                        seen.lock().unwrap().entry(addr).or_default().push(outcome);
                    }
                })
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        let agent = Loop::start(&lab.cluster.nodes[0].ns, lab.config(), NODE, Faults::new());
        agent.list(&services, &slices, lab.node_object());
        let report = agent.next();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        assert!(report.error.is_none(), "{report:?}");
        assert!(report.transactions > 20, "the cold start came in parts: {report:?}");
        agent.kill();
    });

    for (addr, outcomes) in seen.lock().unwrap().iter() {
        let want = expected[addr];
        let first_reply = outcomes.iter().position(|o| o.reply().is_some());
        let first_reply = first_reply.unwrap_or_else(|| panic!("{addr} never answered: {outcomes:?}"));
        assert!(first_reply > 0, "{addr} answered before the agent started");
        for (i, o) in outcomes.iter().enumerate() {
            match o {
                Outcome::Timeout | Outcome::Unreachable if i < first_reply => {}
                Outcome::Reply(r) if r.backend == want => {}
                other => panic!(
                    "{addr} (backend {want}), probe {i} of {} (first answer at {first_reply}): {other:?}: \
                     a part of the table was seen",
                    outcomes.len()
                ),
            }
        }
    }
}

#[test]
fn a_cold_start_interrupted_between_its_transactions_is_finished_by_the_next_start() {
    require_kernel!();
    let ns = Netns::new("coldstop").expect("namespace");
    let (services, slices) = filler(500);
    let config = synth::config();
    let faults = Faults::new();
    // The fourth transaction is refused (a busy object aborts it whole): three are in.
    faults.fail(Fault::Busy, 3, 1);
    let agent = Loop::start(&ns, config.clone(), "bench", faults);
    agent.list(&services, &slices, synth::node());
    let failed = agent.next();
    assert!(failed.error.is_some(), "{failed:?}");
    agent.kill();

    let want = render(&synth::model(&services, &slices).model, &RenderOptions::default());
    let left = ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("a table was left");
    assert!(verdict_nft::coldstart::dormant(Some(&left.ruleset), &want), "no base chain has a rule yet");
    let partial: usize = left.ruleset.sets.values().map(|s| s.elements.len()).sum();
    let whole: usize = want.sets.values().map(|s| s.elements.len()).sum();
    assert!(partial > 0 && partial < whole, "{partial} of {whole} elements");
    // What it left lists, and the listing loads with `nft -f` elsewhere.
    let listing = ns.exec(&["nft", "list", "ruleset"]).expect("nft list ruleset");
    assert!(listing.status.success(), "{}", String::from_utf8_lossy(&listing.stderr));
    let elsewhere = Netns::new("coldload").expect("namespace");
    let file = std::env::temp_dir().join(format!("coldstart-{}.nft", std::process::id()));
    std::fs::write(&file, &listing.stdout).unwrap();
    let loaded = elsewhere.exec(&["nft", "-f", file.to_str().unwrap()]).expect("nft -f");
    let _ = std::fs::remove_file(&file);
    assert!(loaded.status.success(), "{}", String::from_utf8_lossy(&loaded.stderr));

    // The next start finishes it, again in parts, and the table is exactly the rendered one.
    let again = Loop::start(&ns, config, "bench", Faults::new());
    again.list(&services, &slices, synth::node());
    let report = again.next();
    assert!(report.full && report.error.is_none(), "{report:?}");
    assert!(report.transactions > 1, "{report:?}");
    let table = ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("the table");
    assert!(table.ruleset.equivalent(&want), "the table is the rendered one");
    let listing = ns.exec(&["nft", "list", "ruleset"]).expect("nft list ruleset");
    assert!(listing.status.success());
    again.kill();
}
