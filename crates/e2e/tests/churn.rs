//! Churn at scale: 10,000 Services through the test API server and the real watchers, then
//! 5,000 EndpointSlice changes written at 200 per second, while 20 probers keep opening
//! connections to 20 Services that do not change. Every connection must be answered, every
//! change programmed, and the kernel's table at the end must equal a fresh render of the final
//! objects. Figures (changes, syncs, connections, duration, programming latency) are printed
//! for docs/testing.md; none of them is asserted beyond counts and equality.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::cluster::prober::Prober;
use verdict_e2e::{require_kernel, synth};
use verdict_layout::{RenderOptions, render};
use verdict_model::{Cidr, ProxyConfig, build_model};
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;

const SERVICES: usize = 10_000;
const CHANGES: usize = 5_000;
const PER_SECOND: u32 = 200;
const STABLE: usize = 20;
/// The address the probers connect from (on the namespace's `pod0`).
const CLIENT: &str = "10.200.0.1";

fn stable_ip(k: usize) -> String {
    format!("172.31.0.{}", k + 1)
}

fn stable_endpoint(k: usize) -> String {
    format!("10.200.0.{}", k + 10)
}

/// Service `i`'s endpoints after change `k` (0: as loaded): 1 to 4 pods never used before, so
/// Services move between endpoint-count maps as well as swap endpoints.
fn endpoints(i: usize, k: Option<usize>) -> Vec<String> {
    match k {
        None => vec![synth::pod_ip(2 * i), synth::pod_ip(2 * i + 1)],
        Some(k) => (0..1 + k % 4).map(|j| synth::pod_ip(2 * SERVICES + 4 * k + j)).collect(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
fn endpoint_churn_at_scale_fails_no_connection_and_ends_at_a_fresh_render() {
    require_kernel!();
    let mut lab = ApiLab::new("churn").unwrap();
    let ns = &mut lab.ns;
    ns.ip(&["link", "add", "pod0", "type", "veth", "peer", "name", "pod1"]).unwrap();
    ns.ip(&["link", "set", "pod1", "up"]).unwrap();
    ns.ip(&["link", "set", "pod0", "up"]).unwrap();
    ns.ip(&["addr", "add", &format!("{CLIENT}/24"), "dev", "pod0"]).unwrap();
    for k in 0..STABLE {
        ns.ip(&["addr", "add", &format!("{}/24", stable_endpoint(k)), "dev", "pod0"]).unwrap();
    }
    // ClusterIPs need a route before the output hook rewrites them.
    ns.ip(&["route", "add", "default", "dev", "pod0"]).unwrap();
    ns.spawn(&[env!("CARGO_BIN_EXE_verdict-echo"), "stable", "8080"]).unwrap();

    let mut services = Vec::with_capacity(SERVICES + STABLE);
    let mut slices = Vec::with_capacity(SERVICES + STABLE);
    lab.server.apply(node("n1", "192.168.0.2"));
    for i in 0..SERVICES {
        services.push(service("churn", &format!("svc-{i}"), &synth::cluster_ip(i), 80));
        slices.push(slice("churn", &format!("svc-{i}"), &endpoints(i, None), None));
    }
    for k in 0..STABLE {
        services.push(service("stable", &format!("stable-{k}"), &stable_ip(k), 80));
        slices.push(slice("stable", &format!("stable-{k}"), &[stable_endpoint(k)], None));
    }
    for (s, e) in services.iter().zip(&slices) {
        lab.server.apply(s.clone());
        lab.server.apply(e.clone());
    }

    let c = lab.controller("n1", Duration::from_millis(100)).unwrap();
    let first = c.next(Duration::from_secs(120)).unwrap();
    assert!(first.full && first.error.is_none(), "{first:?}");
    let targets: Vec<SocketAddr> = (0..STABLE).map(|k| format!("{}:80", stable_ip(k)).parse().unwrap()).collect();
    let client: IpAddr = CLIENT.parse().unwrap();
    // Every stable Service answers before the churn starts (the echo server is up).
    for t in &targets {
        let deadline = Instant::now() + Duration::from_secs(10);
        let answered = loop {
            let got = lab.ns.run(|| verdict_e2e::probe::tcp_from(Some(client), *t, Duration::from_secs(1)));
            if got.reply().is_some() || Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(answered.reply().is_some(), "{t} does not answer before the churn: {answered:?}");
    }
    let probers: Vec<Prober> =
        targets.iter().map(|t| Prober::start(&lab.ns, client, *t, Duration::from_millis(100))).collect();

    let started = Instant::now();
    let every = Duration::from_secs(1) / PER_SECOND;
    let (mut latencies, mut syncs) = (Vec::new(), Vec::new());
    for k in 0..CHANGES {
        // A prime stride: 5,000 different Services, each changed once.
        let i = (k * 7919) % SERVICES;
        slices[i] = slice("churn", &format!("svc-{i}"), &endpoints(i, Some(k)), Some(SystemTime::now()));
        lab.server.apply(slices[i].clone());
        let due = started + every * (k as u32 + 1);
        while let Ok(r) = c.reports.recv_timeout(due.saturating_duration_since(Instant::now())) {
            latencies.extend(r.programming_latency.iter().copied());
            syncs.push(r);
        }
    }
    let written = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    while latencies.len() < CHANGES && Instant::now() < deadline {
        if let Ok(r) = c.reports.recv_timeout(Duration::from_millis(200)) {
            latencies.extend(r.programming_latency.iter().copied());
            syncs.push(r);
        }
    }
    let duration = started.elapsed();
    let tallies: Vec<_> = probers.into_iter().map(Prober::stop).collect();

    let failed_syncs: Vec<_> = syncs.iter().filter(|r| r.error.is_some()).collect();
    assert!(failed_syncs.is_empty(), "{failed_syncs:#?}");
    assert_eq!(latencies.len(), CHANGES, "every change is programmed, once");
    let attempts: usize = tallies.iter().map(|t| t.attempts).sum();
    let failures: Vec<_> = tallies.iter().flat_map(|t| t.failures.iter()).collect();

    // The kernel's table equals a fresh render of the final objects.
    let model = build_model(
        ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() },
        "n1",
        Some(&verdict_controller::translate::node(&node("n1", "192.168.0.2"))),
        &[],
        &services.iter().map(verdict_controller::translate::service).collect::<Vec<_>>(),
        &slices.iter().map(verdict_controller::translate::endpoint_slice).collect::<Vec<_>>(),
    );
    assert!(model.problems.is_empty(), "{:?}", model.problems);
    let want = render(&model.model, &RenderOptions::default());
    let observed = Instant::now();
    let have = lab.ns.run(|| observe(&mut Netlink::open().unwrap(), "kube-proxy").unwrap()).expect("the table");
    let observe_took = observed.elapsed();
    assert!(have.ruleset.equivalent(&want), "after the churn the kernel's table is not a fresh render");

    latencies.sort();
    let mean_sync = syncs.iter().map(|r| r.took).sum::<Duration>() / syncs.len().max(1) as u32;
    println!(
        "churn: {SERVICES} Services + {STABLE} stable, {CHANGES} endpoint changes written in {:.1} s \
         ({PER_SECOND}/s), all programmed after {:.1} s in {} syncs ({} full), mean sync {:.1} ms; \
         programming latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {attempts} connections to the \
         stable Services, {} failed; final table equals a fresh render (read back in {:.1} s)",
        written.as_secs_f64(),
        duration.as_secs_f64(),
        syncs.len(),
        syncs.iter().filter(|r| r.full).count(),
        mean_sync.as_secs_f64() * 1e3,
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3,
        failures.len(),
        observe_took.as_secs_f64(),
    );
    assert!(attempts >= STABLE * 10, "the probers connected only {attempts} times");
    assert!(failures.is_empty(), "{} of {attempts} connections failed: {failures:?}", failures.len());
}
