//! The data-plane benchmark (`cargo xtask bench --dataplane`): what a packet pays to cross each
//! contender (no proxy, one static DNAT rule, verdict, kube-proxy's iptables modes), side by
//! side, at several Service counts.
//!
//! For each size a fresh namespace cluster ([`lab`]) is built; each contender is set up on
//! node1 after the previous one's rules are removed and the conntrack tables flushed
//! ([`contenders`]); then each path ([`Path`]) is measured with `verdict-load` ([`measure`]):
//! new connections per second and connect latency, one and eight bulk TCP streams with the CPU
//! they cost, and UDP request/response. The floors (no proxy, static DNAT) do not depend on
//! the Service count and run once, on the first size's cluster. [`report`] writes the tables
//! and plots.

pub mod contenders;
pub mod kubeproxy;
pub mod lab;
pub mod measure;
pub mod report;

use anyhow::{Context, Result, bail};
use contenders::{Contender, Setup};
use lab::{Bins, Lab};
use measure::{Measures, Settings};
use std::path::PathBuf;
use std::time::Duration;

/// Where the load comes from and goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// ClusterIP, from a pod on node1 to server pods on node1.
    Local,
    /// ClusterIP, from a pod on node1 to server pods on node2.
    Remote,
    /// NodePort of node1, from the external host, to server pods on node1.
    NodePort,
}

impl Path {
    /// Every path.
    pub const ALL: [Path; 3] = [Path::Local, Path::Remote, Path::NodePort];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Path::Local => "ClusterIP, same node",
            Path::Remote => "ClusterIP, cross-node",
            Path::NodePort => "NodePort, from the external host",
        }
    }

    /// A short name, for file names.
    pub fn slug(self) -> &'static str {
        match self {
            Path::Local => "clusterip-local",
            Path::Remote => "clusterip-remote",
            Path::NodePort => "nodeport",
        }
    }
}

/// The driver's arguments.
#[derive(Clone, Debug)]
pub struct Args {
    /// Service counts.
    pub sizes: Vec<usize>,
    /// Endpoints per Service (and server pods per node).
    pub endpoints: usize,
    /// Durations and concurrency of the measures.
    pub settings: Settings,
    /// How long an iptables restore may take.
    pub iptables_budget: Duration,
    /// The binaries.
    pub bins: Bins,
    /// Where the report goes.
    pub out: PathBuf,
    /// Where to write a system-wide `perf record` of each contender's same-node connect load
    /// (one more run of it, after the measures), if anywhere.
    pub profile: Option<PathBuf>,
}

/// The driver's usage, with its defaults.
pub const USAGE: &str = "verdict-bench-dataplane --echo PATH --load PATH [--out DIR] [--sizes 100,10000,100000] \
[--endpoints 10] [--seconds 2] [--workers 32] [--udp-workers 8] [--iptables-budget 300] [--profile DIR]";

impl Args {
    /// Parses `--flag value` pairs.
    pub fn parse(argv: &[String]) -> Result<Args> {
        let mut a = Args {
            sizes: vec![100, 10_000, 100_000],
            endpoints: 10,
            settings: Settings { seconds: 2.0, workers: 32, udp_workers: 8 },
            iptables_budget: Duration::from_secs(300),
            bins: Bins { echo: PathBuf::new(), load: PathBuf::new() },
            out: PathBuf::from("target/bench"),
            profile: None,
        };
        if argv.iter().any(|a| a == "--help" || a == "-h") {
            println!("{USAGE}");
            std::process::exit(0);
        }
        for pair in argv.chunks(2) {
            let v = pair.get(1).with_context(|| format!("{} needs a value\n{USAGE}", pair[0]))?;
            let n = || v.parse::<usize>().with_context(|| format!("{}: {v} is not a number", pair[0]));
            match pair[0].as_str() {
                "--sizes" => a.sizes = v.split(',').map(|s| s.parse().context("a size")).collect::<Result<_>>()?,
                "--endpoints" => a.endpoints = n()?,
                "--seconds" => a.settings.seconds = v.parse().context("--seconds")?,
                "--workers" => a.settings.workers = n()?,
                "--udp-workers" => a.settings.udp_workers = n()?,
                "--iptables-budget" => a.iptables_budget = Duration::from_secs_f64(v.parse().context("seconds")?),
                "--echo" => a.bins.echo = v.into(),
                "--load" => a.bins.load = v.into(),
                "--out" => a.out = v.into(),
                "--profile" => a.profile = Some(v.into()),
                other => bail!("unknown argument {other}\n{USAGE}"),
            }
        }
        if a.bins.echo.as_os_str().is_empty() || a.bins.load.as_os_str().is_empty() {
            bail!("--echo and --load are required\n{USAGE}");
        }
        if a.sizes.iter().any(|&n| n < 2) || a.endpoints == 0 || a.endpoints > 200 {
            bail!("sizes must be at least 2 (the two measured Services) and endpoints 1 to 200");
        }
        Ok(a)
    }
}

/// One contender at one size.
#[derive(Debug)]
pub struct Row {
    /// Who.
    pub contender: Contender,
    /// Services; `None` for a floor (measured once, for every size).
    pub services: Option<usize>,
    /// How its setup went.
    pub setup: Setup,
    /// Its measures, by path (empty when unavailable).
    pub paths: Vec<(Path, Measures)>,
}

/// Runs the benchmark and writes the report.
pub fn run(a: &Args) -> Result<()> {
    let mut rows = Vec::new();
    for (i, &n) in a.sizes.iter().enumerate() {
        eprintln!("== {n} Services x {} endpoints: building the cluster", a.endpoints);
        let lab = Lab::new(&format!("dp{i}"), a.endpoints, &a.bins)?;
        for c in Contender::ALL {
            if c.is_floor() && i > 0 {
                continue;
            }
            contenders::teardown(&lab)?;
            eprintln!("{n} Services: {}: setting up", c.name());
            let setup = contenders::setup(c, &lab, n, a.endpoints, a.iptables_budget)?;
            let mut paths = Vec::new();
            match &setup {
                Setup::Unavailable(why) => eprintln!("{n} Services: {}: skipped: {why}", c.name()),
                Setup::Ready(s) => {
                    eprintln!("{n} Services: {}: ready in {s:.1} s; measuring", c.name());
                    for path in Path::ALL {
                        let to = match c {
                            Contender::NoProxy => lab.first_server(path == Path::Remote),
                            _ => lab.proxied_target(path, n),
                        };
                        let m = measure::path(&lab, &a.bins, path, to, &a.settings);
                        eprintln!("  {}: {m:?}", path.name());
                        paths.push((path, m));
                    }
                    if let Some(dir) = &a.profile {
                        let to = match c {
                            Contender::NoProxy => lab.first_server(false),
                            _ => lab.proxied_target(Path::Local, n),
                        };
                        let file = dir.join(format!("{}-{n}.perf.data", c.slug()));
                        match measure::profile(&lab, &a.bins, to, &a.settings, &file) {
                            Ok(()) => eprintln!("  profiled: {}", file.display()),
                            Err(e) => eprintln!("  not profiled: {e:#}"),
                        }
                    }
                }
            }
            let services = (!c.is_floor()).then_some(n);
            rows.push(Row { contender: c, services, setup, paths });
        }
        contenders::teardown(&lab)?;
    }
    let md = report::markdown(a, &rows);
    println!("{md}");
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("dataplane.md"), &md)?;
    for (name, svg) in report::plots(&a.sizes, &rows) {
        std::fs::write(a.out.join(name), svg)?;
    }
    eprintln!("report written to {}", a.out.join("dataplane.md").display());
    Ok(())
}
