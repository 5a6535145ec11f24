//! A cold start sent in parts (`verdict_nft::coldstart`) against the real kernel, in namespaces
//! of the test's own: connections made after each transaction (the agent waits for them) meet
//! no table until the last one, and the whole table after it; a
//! cold start interrupted between its transactions is finished by the next start, exactly; and
//! the table in between lists with `nft` and loads back with `nft -f`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;
use verdict_controller::event::{Event, Kind, Object};
use verdict_controller::health::ProxyHealth;
use verdict_controller::sync::{SyncConfig, SyncLoop, SyncReport};
use verdict_e2e::netns::Netns;
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::require_kernel;
use verdict_e2e::scenario::{Cond, Eps, Lab, NODE, NODE_PORT, Svc};
use verdict_layout::{RenderOptions, render};
use verdict_model::source::{EndpointSlice, Node, Service};
use verdict_model::{ModelCache, ProxyConfig, synth};
use verdict_nft::netlink::fault::{Fault, Faults};
use verdict_nft::netlink::firewalls::DroppingChain;
use verdict_nft::netlink::tables::NamedObject;
use verdict_nft::netlink::{CommitStats, Netlink, NetlinkError};
use verdict_nft::observe::{Observed, observe};
use verdict_nft::ruleset::Flowtable;
use verdict_nft::snapshot::Snapshot;
use verdict_nft::{Kernel, Transaction};

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
        Loop::start_with(ns, config, node, MAX, move || Netlink::open().expect("netlink").with_faults(faults))
    }

    /// A sync loop programming namespace `ns` as node `node` in transactions of at most
    /// `max_transaction_objects`, through the kernel `open` opens there.
    fn start_with<K: Kernel + 'static>(
        ns: &Netns,
        config: ProxyConfig,
        node: &str,
        max_transaction_objects: usize,
        open: impl FnOnce() -> K + Send + 'static,
    ) -> Loop {
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
                max_transaction_objects,
                ..SyncConfig::default()
            };
            let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
            let _ = SyncLoop::new(ModelCache::new(config, &node), open(), cfg, health).with_reports(rtx).run(rx);
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

/// The real kernel, stopping after every transaction it commits until the test has probed
/// the table as that transaction left it.
struct Paused {
    nl: Netlink,
    committed: Sender<usize>,
    resume: Receiver<()>,
}

impl Kernel for Paused {
    fn generation(&mut self) -> Result<u32, NetlinkError> {
        self.nl.generation()
    }

    fn read(&mut self, table: &str, known: &Snapshot) -> Result<Option<Observed>, NetlinkError> {
        Kernel::read(&mut self.nl, table, known)
    }

    fn commit(&mut self, tx: &Transaction, read_at: Option<u32>) -> Result<CommitStats, NetlinkError> {
        let stats = Kernel::commit(&mut self.nl, tx, read_at)?;
        // The test may have stopped listening (it failed): the agent then just goes on.
        if self.committed.send(tx.object_count()).is_ok() {
            let _ = self.resume.recv();
        }
        Ok(stats)
    }

    fn dropping_chains(&mut self, own_table: &str) -> Result<Vec<DroppingChain>, NetlinkError> {
        Kernel::dropping_chains(&mut self.nl, own_table)
    }

    fn tables_and_chains(&mut self) -> Result<Vec<NamedObject>, NetlinkError> {
        Kernel::tables_and_chains(&mut self.nl)
    }

    fn flowtables(&mut self, table: &str) -> Result<Vec<Flowtable>, NetlinkError> {
        Kernel::flowtables(&mut self.nl, table)
    }
}

/// What a connection met, as far as it tells tables apart.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// This backend answered.
    Backend(String),
    /// Refused (a reject, or nobody listening).
    Refused,
    /// No answer: dropped, timed out, or unreachable.
    Nothing,
    Other(String),
}

impl From<Outcome> for Seen {
    fn from(outcome: Outcome) -> Seen {
        match outcome {
            Outcome::Reply(r) => Seen::Backend(r.backend),
            Outcome::Refused => Seen::Refused,
            Outcome::Timeout | Outcome::Unreachable => Seen::Nothing,
            Outcome::Other(e) => Seen::Other(e),
        }
    }
}

/// A connection the test makes at every pause: from which namespace, to where, and what the
/// finished table gives it.
struct Target<'a> {
    what: &'static str,
    from: &'a Netns,
    to: SocketAddr,
    finished: Seen,
}

/// Each target's connection, made all at once.
fn probe_all(targets: &[Target]) -> Vec<Seen> {
    std::thread::scope(|scope| {
        let running: Vec<_> = targets
            .iter()
            .map(|t| scope.spawn(move || t.from.run(|| Seen::from(probe::tcp(t.to, Duration::from_millis(300))))))
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn packets_during_a_cold_start_in_parts_see_no_table_until_the_last_transaction() {
    require_kernel!();
    let lab = Lab::new("cold", Path::new(env!("CARGO_BIN_EXE_verdict-echo"))).expect("build the lab");
    // Services at both ends of the address range (their map entries come first or last in each
    // map, so in early and late transactions), one without endpoints (rejected once the table
    // is whole) and a NodePort that node1's own server answers on while no table is there.
    let mut services = vec![
        Svc::new("low", &["172.30.0.10"]).port("http", "TCP", 80).0,
        Svc::new("high", &["172.30.255.200"]).port("http", "TCP", 80).0,
        Svc::new("empty", &["172.30.0.20"]).port("http", "TCP", 80).0,
        Svc::new("np", &["172.30.0.30"]).node_port("http", "TCP", 80, NODE_PORT).0,
    ];
    let mut slices = vec![
        Eps::v4("low").port("http", "TCP", 8080).pod(&lab, "a1", Cond::Ready).0,
        Eps::v4("high").port("http", "TCP", 8080).pod(&lab, "b1", Cond::Ready).0,
        Eps::v4("np").port("http", "TCP", 8080).pod(&lab, "a2", Cond::Ready).0,
    ];
    let (fill_services, fill_slices) = filler(20);
    services.extend(fill_services);
    slices.extend(fill_slices);

    let client = &lab.cluster.pod("c1").ns;
    let node_port = SocketAddr::new(lab.cluster.nodes[0].ipv4.into(), NODE_PORT as u16);
    let backend = |pod: &str| Seen::Backend(pod.into());
    let targets = [
        Target { what: "low", from: client, to: "172.30.0.10:80".parse().unwrap(), finished: backend("a1") },
        Target { what: "high", from: client, to: "172.30.255.200:80".parse().unwrap(), finished: backend("b1") },
        Target { what: "empty", from: client, to: "172.30.0.20:80".parse().unwrap(), finished: Seen::Refused },
        Target { what: "nodeport", from: &lab.cluster.external, to: node_port, finished: backend("a2") },
    ];
    let untouched = probe_all(&targets);
    for (t, seen) in targets.iter().zip(&untouched) {
        assert_ne!(*seen, t.finished, "{}: without a table, already what the table gives", t.what);
    }

    let (committed_tx, committed) = channel();
    let (resume, resume_rx) = channel();
    // Transactions of 10 objects: every map, and the rules of the regular chains, come in
    // several of them.
    let agent = Loop::start_with(&lab.cluster.nodes[0].ns, lab.config(), NODE, 10, move || Paused {
        nl: Netlink::open().expect("netlink"),
        committed: committed_tx,
        resume: resume_rx,
    });
    agent.list(&services, &slices, lab.node_object());
    // What every target met after each transaction, probed while the agent waits.
    let mut pauses: Vec<(usize, Vec<Seen>)> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let report = loop {
        match committed.recv_timeout(Duration::from_millis(100)) {
            Ok(objects) => {
                pauses.push((objects, probe_all(&targets)));
                resume.send(()).unwrap();
            }
            Err(_) => {
                if let Ok(report) = agent.reports.try_recv() {
                    break report;
                }
                assert!(std::time::Instant::now() < deadline, "no sync report within 120 s");
            }
        }
    };
    drop(resume);
    agent.kill();
    assert!(report.error.is_none(), "{report:?}");
    assert_eq!(report.transactions, pauses.len(), "{report:?}");
    assert!(pauses.len() > 20, "the cold start came in parts: {:?}", pauses.iter().map(|p| p.0).collect::<Vec<_>>());

    let (last, before) = pauses.split_last().unwrap();
    for (i, (objects, seen)) in before.iter().enumerate() {
        for ((t, seen), untouched) in targets.iter().zip(seen).zip(&untouched) {
            assert_eq!(
                seen,
                untouched,
                "{} after transaction {} of {} ({objects} objects): a part of the table was seen",
                t.what,
                i + 1,
                pauses.len()
            );
        }
    }
    for (t, seen) in targets.iter().zip(&last.1) {
        assert_eq!(*seen, t.finished, "{} once the last transaction ({} objects) is in", t.what, last.0);
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
