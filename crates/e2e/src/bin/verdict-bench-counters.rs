//! `verdict-bench-counters`: what `--service-counters` costs, side by side with a table
//! without counters (needs root; `cargo xtask bench --counters`).
//!
//! For each mode (off, all), alternating, in a fresh namespace: N synthetic Services (E
//! endpoints each) plus one probe Service whose endpoint listens on the namespace's
//! loopback are programmed in one cold transaction (commit cost), then C TCP connections are
//! made to the probe's ClusterIP one after another (connect latency: SYN to SYN-ACK through
//! nat output, DNAT and, when counted, the counting lookup; connections per second), and
//! with counters on, the counters are read back the way `/metrics` reads them.

use anyhow::{Context, Result, ensure};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use verdict_e2e::netns::Netns;
use verdict_e2e::synth;
use verdict_model::source::Endpoint;
use verdict_model::{ServiceCounters, build_model};
use verdict_nft::netlink::Netlink;
use verdict_nft::render::counters::Outcome;
use verdict_nft::{RenderOptions, diff, render};

const PROBE_ENDPOINT: &str = "10.255.0.1";

struct Args {
    services: usize,
    endpoints: usize,
    connections: usize,
    runs: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args { services: 100_000, endpoints: 2, connections: 3000, runs: 3 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v: usize = pair.get(1).context("a value")?.parse().context("a number")?;
        match pair[0].as_str() {
            "--services" => a.services = v,
            "--endpoints" => a.endpoints = v,
            "--connections" => a.connections = v,
            "--runs" => a.runs = v,
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    Ok(a)
}

#[derive(Clone, Debug, Default)]
struct Run {
    kernel_ms: f64,
    commit_ms: f64,
    bytes: usize,
    elements: usize,
    connect_p50_us: f64,
    connect_p99_us: f64,
    per_sec: f64,
    read_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn one(a: &Args, counters: &ServiceCounters) -> Result<Run> {
    let ns = Netns::new("bcnt")?;
    ns.ip(&["addr", "add", &format!("{PROBE_ENDPOINT}/32"), "dev", "lo"])?;
    ns.ip(&["route", "add", "172.16.0.0/12", "dev", "lo"])?;
    let probe = a.services; // the Service after the synthetic ones
    let (mut services, mut slices) = synth::cluster(a.services + 1, a.endpoints, synth::POD_POOL);
    services.truncate(a.services + 1);
    slices[probe].endpoints = vec![Endpoint { addresses: vec![PROBE_ENDPOINT.into()], ..Endpoint::default() }];
    let config = verdict_model::ProxyConfig { service_counters: counters.clone(), ..synth::config() };
    let built = build_model(config, "bench", Some(&synth::node()), &[], &services, &slices);
    let desired = render(&built.model, &RenderOptions::default());
    let probe_dst: SocketAddr = format!("{}:80", synth::cluster_ip(probe)).parse()?;
    ns.run(|| -> Result<Run> {
        let mut nl = Netlink::open()?;
        let plan = diff(None, &desired);
        let started = Instant::now();
        let mut batch = nl.encode(&plan.transaction);
        let stats = nl.commit_encoded(&mut batch)?;
        let mut run = Run {
            kernel_ms: stats.kernel_us as f64 / 1000.0,
            commit_ms: started.elapsed().as_secs_f64() * 1000.0,
            bytes: stats.bytes,
            elements: desired.element_count(),
            ..Run::default()
        };
        let listener = TcpListener::bind(format!("{PROBE_ENDPOINT}:8080"))?;
        std::thread::spawn(move || for _conn in listener.incoming() {});
        let warmup = 200;
        let mut latencies = Vec::with_capacity(a.connections);
        let mut loop_started = Instant::now();
        for i in 0..warmup + a.connections {
            if i == warmup {
                loop_started = Instant::now();
            }
            let t = Instant::now();
            let s = TcpStream::connect_timeout(&probe_dst, Duration::from_secs(2)).context("connect to the probe")?;
            if i >= warmup {
                latencies.push(t.elapsed().as_secs_f64() * 1e6);
            }
            // No TIME_WAIT on the client side: a reset ends the connection.
            socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO))?;
        }
        run.per_sec = a.connections as f64 / loop_started.elapsed().as_secs_f64();
        latencies.sort_by(|x, y| x.partial_cmp(y).expect("a number"));
        run.connect_p50_us = percentile(&latencies, 0.5);
        run.connect_p99_us = percentile(&latencies, 0.99);
        if counters.enabled() {
            let t = Instant::now();
            let counts = nl.service_counts("kube-proxy")?;
            run.read_ms = t.elapsed().as_secs_f64() * 1000.0;
            let probe_name = format!("bench/svc-{probe}:http");
            let got = counts.iter().find(|c| c.port == probe_name && c.outcome == Outcome::Accepted);
            let want = (warmup + a.connections) as u64;
            ensure!(got.map(|c| c.connections) == Some(want), "probe counted {got:?}, expected {want}");
        }
        Ok(run)
    })
}

fn median(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(|x, y| x.partial_cmp(y).expect("a number"));
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let modes = [("off", ServiceCounters::Off), ("all", ServiceCounters::All)];
    let mut results: Vec<Vec<Run>> = vec![Vec::new(), Vec::new()];
    for r in 0..a.runs {
        for (i, (name, mode)) in modes.iter().enumerate() {
            let run = one(&a, mode)?;
            eprintln!("run {r} counters={name}: {run:?}");
            results[i].push(run);
        }
    }
    println!(
        "{} Services x {} endpoints, {} connections per run, median of {} runs\n",
        a.services, a.endpoints, a.connections, a.runs
    );
    println!(
        "| counters | elements | batch MB | cold commit, kernel ms | cold commit, total ms | connect p50 µs | connect p99 µs | connections/s | counter read ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (name, _)) in modes.iter().enumerate() {
        let r = &results[i];
        println!(
            "| {name} | {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {} |",
            r[0].elements,
            r[0].bytes as f64 / 1e6,
            median(r, |x| x.kernel_ms),
            median(r, |x| x.commit_ms),
            median(r, |x| x.connect_p50_us),
            median(r, |x| x.connect_p99_us),
            median(r, |x| x.per_sec),
            if i == 0 { "-".to_string() } else { format!("{:.0}", median(r, |x| x.read_ms)) },
        );
    }
    Ok(())
}
