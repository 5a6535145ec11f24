//! The data-plane benchmark (`cargo xtask bench --dataplane`): what a packet pays to cross each
//! contender (no proxy, one static DNAT rule, verdict, kube-proxy's iptables modes), side by
//! side, at several Service counts.
//!
//! For each size a fresh namespace cluster ([`lab`]) is built; each contender is set up on
//! node1 after the previous one's rules are removed and the conntrack tables flushed
//! ([`contenders`]); then each path ([`Path`]) is measured with `verdict-load` ([`measure`]):
//! new connections per second and connect latency, one and eight bulk TCP streams with the CPU
//! they cost, and UDP request/response. The floors (no proxy, static DNAT) do not depend on
//! the Service count, but are measured at every size: in that size's cluster, in the same
//! rounds (`--rounds`, alternating order, medians) as the others. [`report`] writes the tables
//! and plots.

pub mod contenders;
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
    /// Rounds per size: each contender is set up and measured once per round, in alternating
    /// order, and each cell is the median of its rounds.
    pub rounds: usize,
    /// Where to write a system-wide `perf record` of each contender's same-node connect load
    /// (one more run of it, after the measures), if anywhere.
    pub profile: Option<PathBuf>,
}

/// The driver's usage, with its defaults.
pub const USAGE: &str = "verdict-bench-dataplane --echo PATH --load PATH [--out DIR] [--sizes 100,10000,100000] \
[--endpoints 10] [--seconds 2] [--workers 32] [--udp-workers 8] [--iptables-budget 300] [--rounds 1] [--profile DIR]";

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
            rounds: 1,
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
                "--rounds" => a.rounds = n()?,
                other => bail!("unknown argument {other}\n{USAGE}"),
            }
        }
        if a.bins.echo.as_os_str().is_empty() || a.bins.load.as_os_str().is_empty() {
            bail!("--echo and --load are required\n{USAGE}");
        }
        if a.rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        if a.sizes.iter().any(|&n| n < 2) || a.endpoints == 0 || a.endpoints > 200 {
            bail!("sizes must be at least 2 (the two measured Services) and endpoints 1 to 200");
        }
        Ok(a)
    }
}

/// The contenders of round `round` of `rounds`: forward in even rounds, backward in odd ones (a
/// contender's place in the order moves its numbers), except iptables-legacy, whose x_tables
/// hooks stay registered in the namespace once loaded: last, in the last round only.
fn round_order(here: &[Contender], round: usize, rounds: usize) -> Vec<Contender> {
    let legacy = Contender::IptablesLegacy;
    let mut order: Vec<Contender> = here.iter().copied().filter(|c| *c != legacy).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    if round + 1 == rounds && here.contains(&legacy) {
        order.push(legacy);
    }
    order
}

/// Sets `c` up on a clean node and measures every path (profiling the same-node connect load
/// in the first round, when asked).
fn contender(a: &Args, lab: &Lab, c: Contender, n: usize, round: usize) -> Result<(Setup, PathMeasures)> {
    contenders::teardown(lab)?;
    let tag = format!("{n} Services, round {}/{}: {}", round + 1, a.rounds, c.name());
    eprintln!("{tag}: setting up");
    let setup = contenders::setup(c, lab, n, a.endpoints, a.iptables_budget)?;
    let mut paths = Vec::new();
    match &setup {
        Setup::Unavailable(why) => eprintln!("{tag}: skipped: {why}"),
        Setup::Ready(s) => {
            eprintln!("{tag}: ready in {s:.1} s; measuring");
            for path in Path::ALL {
                let m = measure::path(lab, &a.bins, path, target(lab, c, path, n), &a.settings);
                eprintln!("  {}: {m:?}", path.name());
                paths.push((path, m));
            }
            if let Some(dir) = a.profile.as_ref().filter(|_| round == 0) {
                let file = dir.join(format!("{}-{n}.perf.data", c.slug()));
                match measure::profile(lab, &a.bins, target(lab, c, Path::Local, n), &a.settings, &file) {
                    Ok(()) => eprintln!("  profiled: {}", file.display()),
                    Err(e) => eprintln!("  not profiled: {e:#}"),
                }
            }
        }
    }
    Ok((setup, paths))
}

/// Where `c`'s load on `path` connects: the server pod itself without a proxy, else the
/// Service.
fn target(lab: &Lab, c: Contender, path: Path, n: usize) -> std::net::SocketAddr {
    match c {
        Contender::NoProxy => lab.first_server(path == Path::Remote),
        _ => lab.proxied_target(path, n),
    }
}

/// One round's measures of one contender, by path.
type PathMeasures = Vec<(Path, Measures)>;

/// One contender at one size.
#[derive(Debug)]
pub struct Row {
    /// Who.
    pub contender: Contender,
    /// Services (the floors are measured in each size's cluster too: they do not depend on
    /// the count, but the cluster and the moment do).
    pub services: usize,
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
        let here = Contender::ALL;
        let mut results: Vec<(Contender, Setup, Vec<PathMeasures>)> = Vec::new();
        for round in 0..a.rounds {
            for c in round_order(&here, round, a.rounds) {
                let known = results.iter().position(|(k, _, _)| *k == c);
                if let Some(Setup::Unavailable(_)) = known.map(|k| &results[k].1) {
                    continue;
                }
                let (setup, paths) = contender(a, &lab, c, n, round)?;
                match known {
                    Some(k) => results[k].2.push(paths),
                    None => results.push((c, setup, vec![paths])),
                }
            }
        }
        contenders::teardown(&lab)?;
        results.sort_by_key(|(c, _, _)| Contender::ALL.iter().position(|k| k == c));
        for (c, setup, rounds) in results {
            let paths = Path::ALL
                .into_iter()
                .filter_map(|p| {
                    let each: Vec<Measures> =
                        rounds.iter().filter_map(|r| r.iter().find(|(q, _)| *q == p).map(|(_, m)| m.clone())).collect();
                    (!each.is_empty()).then(|| (p, measure::median(&each)))
                })
                .collect();
            rows.push(Row { contender: c, services: n, setup, paths });
        }
    }
    let md = report::markdown(a, &rows);
    println!("{md}");
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("dataplane.md"), &md)?;
    for (name, svg) in report::plots(&rows) {
        std::fs::write(a.out.join(name), svg)?;
    }
    eprintln!("report written to {}", a.out.join("dataplane.md").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_and_iptables_legacy_comes_last_once() {
        let all = Contender::ALL.to_vec();
        let rounds: Vec<Vec<Contender>> = (0..3).map(|r| round_order(&all, r, 3)).collect();
        assert_eq!(rounds[0][0], Contender::NoProxy);
        assert_eq!(rounds[1][0], Contender::IptablesNft, "backward");
        assert!(rounds[..2].iter().all(|r| !r.contains(&Contender::IptablesLegacy)));
        assert_eq!(rounds[2].last(), Some(&Contender::IptablesLegacy));
        assert_eq!(round_order(&all, 0, 1).last(), Some(&Contender::IptablesLegacy), "one round: last");
        let later: Vec<Contender> = all.into_iter().filter(|c| !c.is_floor()).collect();
        assert_eq!(round_order(&later, 1, 2)[0], Contender::IptablesNft);
    }
}
