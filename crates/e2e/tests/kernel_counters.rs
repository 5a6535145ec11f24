//! Reading the per-Service counters by key (what `/metrics` serves) says what a dump of the
//! counting sets says, and an element the table does not hold (a port gone since the keys
//! were taken) leaves out that element only, wherever it falls among the keys; while other
//! ports come and go in concurrent commits it still reads every port that stays, which a
//! dump does not (root only).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use verdict_e2e::netns::Netns;
use verdict_e2e::{require_kernel, synth};
use verdict_layout::counts::ServiceCounts;
use verdict_layout::render::counted_keys::CountedKeys;
use verdict_layout::render::counters::Outcome;
use verdict_layout::{RenderOptions, render};
use verdict_model::source::Endpoint;
use verdict_model::{ProxyModel, ServiceCounters, build_model};
use verdict_nft::diff;
use verdict_nft::netlink::Netlink;

const PROBE_ENDPOINT: &str = "10.255.0.1";

/// `n` counted Services of 2 endpoints; the last one's endpoint listens on the namespace's
/// loopback.
fn model(n: usize) -> ProxyModel {
    let (services, mut slices) = synth::cluster(n, 2, synth::POD_POOL);
    slices[n - 1].endpoints = vec![Endpoint { addresses: vec![PROBE_ENDPOINT.into()], ..Endpoint::default() }];
    let config = verdict_model::ProxyConfig { service_counters: ServiceCounters::All, ..synth::config() };
    build_model(config, "bench", Some(&synth::node()), &[], &services[..n], &slices[..n]).model
}

#[test]
fn a_read_by_key_equals_the_dump_and_skips_what_the_table_lacks() {
    require_kernel!();
    // More than one request's worth of keys per set (128), so that vanished elements fall
    // inside requests and at their ends.
    let programmed = 600;
    let table = model(programmed);
    let exact = CountedKeys::of_model(&table);
    // A model with more ports than the table: its keys of the 600 programmed ports are the
    // table's, the rest are not in the kernel.
    let wider = CountedKeys::of_model(&model(programmed + 400));
    assert!(wider.len() > exact.len() + 600, "{} keys against {}", wider.len(), exact.len());
    let ns = Netns::new("kcnt").unwrap();
    ns.ip(&["addr", "add", &format!("{PROBE_ENDPOINT}/32"), "dev", "lo"]).unwrap();
    ns.ip(&["route", "add", "172.16.0.0/12", "dev", "lo"]).unwrap();
    let probe_name = format!("bench/svc-{}:http", programmed - 1);
    let probe_dst: SocketAddr = format!("{}:80", synth::cluster_ip(programmed - 1)).parse().unwrap();
    ns.run(|| {
        let mut nl = Netlink::open().unwrap();
        nl.commit(&diff(None, &render(&table, &RenderOptions::default())).transaction).unwrap();
        let listener = TcpListener::bind(format!("{PROBE_ENDPOINT}:8080")).unwrap();
        for _ in 0..3 {
            TcpStream::connect_timeout(&probe_dst, Duration::from_secs(2)).expect("connect to the probe");
            drop(listener.accept().unwrap());
        }
        let dumped = nl.service_counts("kube-proxy").unwrap();
        let by_key = nl.service_counts_of("kube-proxy", exact.iter()).unwrap();
        let by_wider_keys = nl.service_counts_of("kube-proxy", wider.iter()).unwrap();
        assert_eq!(dumped.len(), programmed * 2, "accepted and rejected of each port: {dumped:?}");
        let probe_accepted = dumped.iter().find(|c| c.port == probe_name && c.outcome == Outcome::Accepted);
        assert_eq!(probe_accepted.map(|c| c.connections), Some(3), "{probe_accepted:?}");
        assert_eq!(by_key, dumped);
        assert_eq!(by_wider_keys, dumped);
        // No table at all, or no keys: nothing, not an error.
        assert!(nl.service_counts_of("no-such-table", exact.iter()).unwrap().is_empty());
        assert!(nl.service_counts_of("kube-proxy", CountedKeys::default().iter()).unwrap().is_empty());
    });
}

#[test]
fn a_read_by_key_is_exact_while_other_ports_come_and_go() {
    require_kernel!();
    // A set element dump resumes each 32 KiB reply by counting elements from the set's start,
    // so a commit between two replies shifts it: measured at 100k ports with 2,000 ports
    // added and removed meanwhile, a dump missed 4 to 12% of the ports that stayed.
    let stable = 20_000;
    let table = model(stable);
    let churned = model(stable + 1_000);
    let (r0, r1) = (render(&table, &RenderOptions::default()), render(&churned, &RenderOptions::default()));
    let (add, remove) = (diff(Some(&r0), &r1).transaction, diff(Some(&r1), &r0).transaction);
    let ns = Netns::new("kcntc").unwrap();
    ns.run(|| Netlink::open().unwrap().commit(&diff(None, &r0).transaction).unwrap());
    let (stop, churning) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let churn = {
        let (stop, churning, path) = (stop.clone(), churning.clone(), format!("/run/netns/{}", ns.name()));
        std::thread::spawn(move || {
            let netns = std::fs::File::open(path).unwrap();
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let mut nl = Netlink::open().unwrap();
            let mut commits = 0;
            while !stop.load(Ordering::SeqCst) {
                nl.commit(&add).unwrap();
                nl.commit(&remove).unwrap();
                churning.store(true, Ordering::SeqCst);
                commits += 2;
            }
            commits
        })
    };
    while !churning.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let keys = CountedKeys::of_model(&table);
    let reads: Vec<usize> = ns.run(|| {
        let mut nl = Netlink::open().unwrap();
        (0..5).map(|_| nl.service_counts_of("kube-proxy", keys.iter()).unwrap().len()).collect()
    });
    stop.store(true, Ordering::SeqCst);
    let commits = churn.join().unwrap();
    assert!(commits >= 4, "only {commits} commits");
    assert_eq!(reads, vec![stable * 2; 5], "series read while {commits} commits ran");
}
