//! Network programming latency: 1,000 Services, a stream of endpoint changes through the test
//! API server, and the time from each change (its `last-change-trigger-time` annotation, set
//! when the test writes it) to the commit that programs it, for several `--min-sync-period`s.
//! Prints p50/p99 and how many syncs it took; asserts only that every change was programmed
//! (timing is measured, not asserted: the numbers go to docs/benchmarks.md).

use std::time::{Duration, Instant, SystemTime};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::require_kernel;

/// The defaults; `VERDICT_LATENCY_SERVICES`, `VERDICT_LATENCY_CHANGES` and
/// `VERDICT_LATENCY_EVERY_MS` change them for a measurement at another scale (docs/benchmarks.md).
const SERVICES: usize = 1000;
const CHANGES: usize = 200;
const EVERY_MS: u64 = 20;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Scale {
    services: usize,
    changes: usize,
    every: Duration,
}

fn scale() -> Scale {
    Scale {
        services: setting("VERDICT_LATENCY_SERVICES", SERVICES as u64) as usize,
        changes: setting("VERDICT_LATENCY_CHANGES", CHANGES as u64) as usize,
        every: Duration::from_millis(setting("VERDICT_LATENCY_EVERY_MS", EVERY_MS)),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Run {
    min_sync_period: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
    syncs: usize,
    mean_sync: Duration,
}

fn run(min_sync_period: Duration) -> Run {
    let sc = scale();
    let lab = ApiLab::new("lat").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    let svc_ip = |i: usize| format!("172.30.{}.{}", i / 250, i % 250);
    let pod = |k: usize| format!("10.1.{}.{}", (k / 250) % 250, k % 250);
    for i in 0..sc.services {
        lab.server.apply(service("ns1", &format!("svc-{i}"), &svc_ip(i), 80));
        lab.server.apply(slice("ns1", &format!("svc-{i}"), &[pod(2 * i), pod(2 * i + 1)], None));
    }
    let c = lab.controller("n1", min_sync_period).unwrap();
    let first = c.next(Duration::from_secs(60)).unwrap();
    assert!(first.error.is_none(), "{first:?}");

    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut syncs = Vec::new();
    for k in 0..sc.changes {
        let i = (k * 7919) % sc.services;
        let fresh = pod(10_000 + k);
        lab.server.apply(slice("ns1", &format!("svc-{i}"), &[pod(2 * i), fresh], Some(SystemTime::now())));
        let due = started + sc.every * (k as u32 + 1);
        while let Ok(r) = c.reports.recv_timeout(due.saturating_duration_since(Instant::now())) {
            latencies.extend(r.programming_latency.iter().copied());
            syncs.push(r);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while latencies.len() < sc.changes && Instant::now() < deadline {
        if let Ok(r) = c.reports.recv_timeout(Duration::from_millis(200)) {
            latencies.extend(r.programming_latency.iter().copied());
            syncs.push(r);
        }
    }
    assert_eq!(latencies.len(), sc.changes, "every change is programmed and measured once");
    assert!(syncs.iter().all(|r| r.error.is_none()));
    latencies.sort();
    let mean_sync = syncs.iter().map(|r| r.took).sum::<Duration>() / syncs.len().max(1) as u32;
    Run {
        min_sync_period,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        max: *latencies.last().unwrap(),
        syncs: syncs.len(),
        mean_sync,
    }
}

#[test]
fn network_programming_latency_with_1000_services() {
    require_kernel!();
    let sc = scale();
    let runs: Vec<Run> =
        [Duration::from_secs(1), Duration::from_millis(100), Duration::from_millis(10)].into_iter().map(run).collect();
    println!(
        "network programming latency, {} Services, {} endpoint changes every {:?}:",
        sc.services, sc.changes, sc.every
    );
    println!("| --min-sync-period | p50 | p99 | max | syncs | mean sync |");
    println!("|---|---|---|---|---|---|");
    for r in &runs {
        println!(
            "| {:?} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {:.2} ms |",
            r.min_sync_period,
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3,
            r.max.as_secs_f64() * 1e3,
            r.syncs,
            r.mean_sync.as_secs_f64() * 1e3
        );
    }
}
