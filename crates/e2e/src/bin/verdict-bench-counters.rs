//! `verdict-bench-counters`: what `--service-counters` costs, side by side with a table
//! without counters (needs root; `cargo xtask bench --counters`).
//!
//! For each mode (off, all), alternating, in a fresh namespace: N synthetic Services (E
//! endpoints each) plus one probe Service whose endpoint listens on the namespace's
//! loopback are programmed in one cold transaction (commit cost), then C TCP connections are
//! made to the probe's ClusterIP one after another (connect latency: SYN to SYN-ACK through
//! nat output, DNAT and, when counted, the counting lookup; connections per second), and
//! with counters on, the counters are read back the way `/metrics` reads them (each element
//! by key) and, for comparison, by dumping the counting sets.
//!
//! `--read-sizes 1000,10000,100000` measures only the reads, at each size: keys from the
//! model, a read by key and a dump, which must agree.
//!
//! `--scrape-sizes 1000,10000,100000 --verdict PATH` runs the real agent against the test API
//! server at each size, counters off and all: how long a `/metrics` scrape takes, how long
//! the agent's background read takes, and the agent's memory.

use anyhow::{Context, Result, ensure};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use verdict_e2e::apilab::ApiLab;
use verdict_e2e::endtoend::agent::{self, Memory};
use verdict_e2e::endtoend::{NODE, Point, load};
use verdict_e2e::netns::Netns;
use verdict_e2e::synth;
use verdict_layout::counts::{ServiceCount, ServiceCounts};
use verdict_layout::render::counted_keys::CountedKeys;
use verdict_layout::render::counters::Outcome;
use verdict_layout::{RenderOptions, render};
use verdict_model::source::Endpoint;
use verdict_model::{ServiceCounters, build_model};
use verdict_nft::diff;
use verdict_nft::netlink::Netlink;

const PROBE_ENDPOINT: &str = "10.255.0.1";

struct Args {
    services: usize,
    endpoints: usize,
    connections: usize,
    runs: usize,
    read_sizes: Vec<usize>,
    scrape_sizes: Vec<usize>,
    verdict: Option<std::path::PathBuf>,
}

fn sizes(value: &str) -> Result<Vec<usize>> {
    value.split(',').map(|v| v.parse().context("a size")).collect()
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        services: 100_000,
        endpoints: 2,
        connections: 3000,
        runs: 3,
        read_sizes: Vec::new(),
        scrape_sizes: Vec::new(),
        verdict: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).context("a value")?;
        match pair[0].as_str() {
            "--read-sizes" => a.read_sizes = sizes(value)?,
            "--scrape-sizes" => a.scrape_sizes = sizes(value)?,
            "--verdict" => a.verdict = Some(value.into()),
            _ => {}
        }
        if ["--read-sizes", "--scrape-sizes", "--verdict"].contains(&pair[0].as_str()) {
            continue;
        }
        let v: usize = value.parse().context("a number")?;
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
    reads: Reads,
}

/// One way and another of reading the same counters.
#[derive(Clone, Debug, Default)]
struct Reads {
    keys_ms: f64,
    keyed_ms: f64,
    dump_ms: f64,
}

/// Reads the counters by key and by dump, checks that both say the same, and returns them
/// with the times.
fn read_both(nl: &mut Netlink, model: &verdict_model::ProxyModel) -> Result<(Vec<ServiceCount>, Reads)> {
    let t = Instant::now();
    let keys = CountedKeys::of_model(model);
    let keys_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let keyed = nl.service_counts_of("kube-proxy", keys.iter())?;
    let keyed_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let dumped = nl.service_counts("kube-proxy")?;
    let dump_ms = t.elapsed().as_secs_f64() * 1000.0;
    ensure!(keyed == dumped, "the read by key and the dump disagree ({} and {} series)", keyed.len(), dumped.len());
    Ok((keyed, Reads { keys_ms, keyed_ms, dump_ms }))
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
            let (counts, reads) = read_both(&mut nl, &built.model)?;
            run.reads = reads;
            let probe_name = format!("bench/svc-{probe}:http");
            let got = counts.iter().find(|c| c.port == probe_name && c.outcome == Outcome::Accepted);
            let want = (warmup + a.connections) as u64;
            ensure!(got.map(|c| c.connections) == Some(want), "probe counted {got:?}, expected {want}");
        }
        Ok(run)
    })
}

fn median<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(|x, y| x.partial_cmp(y).expect("a number"));
    v[v.len() / 2]
}

/// Only the reads, at `services` counted ports: medians of `runs` reads in one namespace.
fn reads_at(services: usize, endpoints: usize, runs: usize) -> Result<(usize, Reads)> {
    let ns = Netns::new("bcnr")?;
    let (services, slices) = synth::cluster(services, endpoints, synth::POD_POOL);
    let config = verdict_model::ProxyConfig { service_counters: ServiceCounters::All, ..synth::config() };
    let built = build_model(config, "bench", Some(&synth::node()), &[], &services, &slices);
    let desired = render(&built.model, &RenderOptions::default());
    ns.run(|| -> Result<(usize, Reads)> {
        let mut nl = Netlink::open()?;
        nl.commit(&diff(None, &desired).transaction)?;
        let mut all = Vec::new();
        let mut series = 0;
        for _ in 0..runs {
            let (counts, reads) = read_both(&mut nl, &built.model)?;
            series = counts.len();
            all.push(reads);
        }
        let reads = Reads {
            keys_ms: median(&all, |r| r.keys_ms),
            keyed_ms: median(&all, |r| r.keyed_ms),
            dump_ms: median(&all, |r| r.dump_ms),
        };
        Ok((series, reads))
    })
}

/// One `/metrics` request from inside `ns`: the body.
fn scrape(ns: &Netns) -> Result<String> {
    ns.run(|| -> Result<String> {
        let mut s = TcpStream::connect_timeout(&"127.0.0.1:10249".parse()?, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })
}

/// What a scrape of the real agent costs at `services` Services (2 endpoints each).
struct Scrape {
    series: usize,
    scrape_ms: f64,
    body_mb: f64,
    read_ms: f64,
    rss_mib: f64,
}

fn scrape_at(verdict: &std::path::Path, services: usize, counters: &str) -> Result<Scrape> {
    let lab = ApiLab::new("bcns")?;
    let point = Point { services, endpoints: 2 };
    load(&lab, point);
    let dir = std::env::temp_dir().join(format!("verdict-bench-scrape-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig)?;
    let extra = ["--state-dir", "", "--service-counters", counters];
    let daemon = agent::start(&lab.ns, verdict, &kubeconfig, NODE, &extra)?;
    let memory = Memory::watch(daemon.pid());
    agent::wait_synced(&daemon, Duration::from_secs(600), |s| s.full && s.services == services as u64)?;
    let series = |body: &str| body.lines().filter(|l| l.starts_with("verdict_service_connections_total{")).count();
    let gauge = |body: &str, name: &str| {
        body.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    // Counted: wait for the first reading of every port (accepted and rejected each).
    let deadline = Instant::now() + Duration::from_secs(600);
    while counters != "off" && series(&scrape(&lab.ns)?) < 2 * services {
        ensure!(Instant::now() < deadline, "no reading of {services} ports");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut times = Vec::new();
    let mut body = String::new();
    for _ in 0..10 {
        let t = Instant::now();
        body = scrape(&lab.ns)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let out = Scrape {
        series: series(&body),
        scrape_ms: median(&times, |t| *t),
        body_mb: body.len() as f64 / 1e6,
        read_ms: gauge(&body, "verdict_service_counters_read_duration_seconds ") * 1000.0,
        rss_mib: memory.rss_mib(),
    };
    drop(memory);
    daemon.terminate(Duration::from_secs(20))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}

fn main() -> Result<()> {
    let a = parse_args()?;
    if !a.scrape_sizes.is_empty() {
        let verdict = a.verdict.as_deref().context("--scrape-sizes needs --verdict PATH")?;
        println!("the agent's /metrics, median of 10 scrapes; 2 endpoints per Service\n");
        println!("| Services | counters | series | scrape ms | body MB | background read ms | agent RSS MiB |");
        println!("|---:|---|---:|---:|---:|---:|---:|");
        for &n in &a.scrape_sizes {
            for counters in ["off", "all"] {
                let s = scrape_at(verdict, n, counters)?;
                println!(
                    "| {n} | {counters} | {} | {:.1} | {:.1} | {} | {:.0} |",
                    s.series,
                    s.scrape_ms,
                    s.body_mb,
                    if counters == "off" { "-".to_string() } else { format!("{:.0}", s.read_ms) },
                    s.rss_mib
                );
            }
        }
        return Ok(());
    }
    if !a.read_sizes.is_empty() {
        println!("counter reads, {} endpoints per Service, median of {} reads\n", a.endpoints, a.runs);
        println!("| counted ports | series | keys from the model ms | read by key ms | dump ms | dump / by key |");
        println!("|---:|---:|---:|---:|---:|---:|");
        for &n in &a.read_sizes {
            let (series, r) = reads_at(n, a.endpoints, a.runs)?;
            println!(
                "| {n} | {series} | {:.1} | {:.1} | {:.1} | {:.1}x |",
                r.keys_ms,
                r.keyed_ms,
                r.dump_ms,
                r.dump_ms / r.keyed_ms
            );
        }
        return Ok(());
    }
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
        "| counters | elements | batch MB | cold commit, kernel ms | cold commit, total ms | connect p50 µs | connect p99 µs | connections/s | read by key ms | read by dump ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (name, _)) in modes.iter().enumerate() {
        let r = &results[i];
        let read = |f: fn(&Run) -> f64| if i == 0 { "-".to_string() } else { format!("{:.0}", median(r, f)) };
        println!(
            "| {name} | {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {} | {} |",
            r[0].elements,
            r[0].bytes as f64 / 1e6,
            median(r, |x| x.kernel_ms),
            median(r, |x| x.commit_ms),
            median(r, |x| x.connect_p50_us),
            median(r, |x| x.connect_p99_us),
            median(r, |x| x.per_sec),
            read(|x| x.reads.keyed_ms),
            read(|x| x.reads.dump_ms),
        );
    }
    Ok(())
}
