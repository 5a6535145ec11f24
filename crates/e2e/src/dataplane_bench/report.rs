//! The data-plane report: Markdown tables with absolute numbers and ratios to the floors, and
//! SVG plots of connections/s and connect latency against the Service count.

use super::contenders::{Contender, Setup};
use super::measure::Measures;
use super::{Args, Path, Row};
use crate::endtoend::plot::{Series, svg};
use std::fmt::Write;

fn colour(c: Contender) -> &'static str {
    match c {
        Contender::NoProxy => "#777777",
        Contender::StaticDnat => "#000000",
        Contender::Verdict => "#1f77b4",
        Contender::VerdictFastPath => "#17becf",
        Contender::IptablesNft => "#d62728",
        Contender::IptablesLegacy => "#ff7f0e",
    }
}

fn short(c: Contender) -> &'static str {
    match c {
        Contender::IptablesNft => "iptables-nft",
        Contender::IptablesLegacy => "iptables-legacy",
        other => other.name(),
    }
}

fn measures(row: &Row, path: Path) -> Option<&Measures> {
    row.paths.iter().find(|(p, _)| *p == path).map(|(_, m)| m)
}

/// Floor `c`'s measures of `path` in the cluster of `services`.
fn floor(rows: &[Row], c: Contender, path: Path, services: usize) -> Option<&Measures> {
    rows.iter().find(|r| r.contender == c && r.services == services).and_then(|r| measures(r, path))
}

/// `value (value / no-proxy, value / static DNAT)`, or the reason there is no value.
fn cell(
    m: Option<&Measures>,
    floors: [Option<&Measures>; 2],
    get: impl Fn(&Measures) -> Result<f64, String>,
    fmt: impl Fn(f64) -> String,
    ratios: bool,
) -> String {
    let Some(m) = m else { return "-".into() };
    match get(m) {
        Err(e) => format!("failed: {}", e.replace('|', "/")),
        Ok(v) => {
            let r: Vec<String> = floors
                .iter()
                .map(|f| match f.map(&get) {
                    Some(Ok(base)) if base > 0.0 => format!("{:.2}", v / base),
                    _ => "?".into(),
                })
                .collect();
            if ratios { format!("{} ({} / {})", fmt(v), r[0], r[1]) } else { fmt(v) }
        }
    }
}

fn int(v: f64) -> String {
    format!("{v:.0}")
}

fn gbit(v: f64) -> String {
    format!("{:.2}", v * 8.0 / 1e9)
}

fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "kernel {}, {cpus} CPUs, load average at the end {}",
        kernel.trim(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
}

/// The report.
pub fn markdown(a: &Args, rows: &[Row]) -> String {
    let s = &a.settings;
    let mut out = String::new();
    let _ = writeln!(out, "# Data plane: what a packet pays to cross each proxy\n");
    let _ = writeln!(
        out,
        "Sizes {:?} Services x {} endpoints; {} s per measure; {} parallel clients for connections/s, \
         {} for UDP request/response; {}. {} The floors (no proxy, static DNAT) do not depend on \
         the Service count; they are measured at each size, in that size's cluster and rounds. The namespaces share one kernel \
         and its CPUs with anything else the machine runs: on a busy machine the numbers are noisy.\n",
        a.sizes,
        a.endpoints,
        s.seconds,
        s.workers,
        s.udp_workers,
        machine(),
        match a.rounds {
            1 => "One round (a contender's place in the order moves its numbers by several percent: \
                  use --rounds 3 or more to compare within 10%)."
                .to_string(),
            n => format!(
                "Each cell is the median of {n} rounds, the contenders in alternating order \
                 (iptables-legacy last, in the last round only)."
            ),
        }
    );
    let _ = writeln!(out, "## Setup\n\n| contender | Services | setup |\n|---|---:|---|");
    for r in rows {
        let services = r.services;
        let setup = match &r.setup {
            Setup::Ready(t) => format!("{t:.1} s"),
            Setup::Unavailable(why) => format!("unavailable: {}", why.replace('|', "/")),
        };
        let _ = writeln!(out, "| {} | {services} | {setup} |", r.contender.name());
    }
    for path in Path::ALL {
        let _ = writeln!(out, "\n## {}\n", path.name());
        let _ = writeln!(
            out,
            "Each cell: the value (the value divided by no proxy's / by static DNAT's, at the same size). Gbit/s of \
             payload; CPU: seconds of busy CPU (all CPUs) per GB moved.\n"
        );
        let _ = writeln!(
            out,
            "| contender | Services | connections/s | connect p50 µs | connect p99 µs | 1 stream Gbit/s | \
             8 streams Gbit/s | CPU s/GB, 1 stream | CPU s/GB, 8 streams | UDP req/resp per s |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows {
            let services = r.services;
            let floors =
                [floor(rows, Contender::NoProxy, path, services), floor(rows, Contender::StaticDnat, path, services)];
            let m = measures(r, path);
            let ratios = !r.contender.is_floor() || r.contender == Contender::StaticDnat;
            let c = |get: &dyn Fn(&Measures) -> Result<f64, String>, fmt: fn(f64) -> String| {
                cell(m, floors, get, fmt, ratios)
            };
            let cells = [
                c(&|m| m.connect.as_ref().map(|c| c.per_sec).map_err(Clone::clone), int),
                c(&|m| m.connect.as_ref().map(|c| c.p50_us).map_err(Clone::clone), int),
                c(&|m| m.connect.as_ref().map(|c| c.p99_us).map_err(Clone::clone), int),
                c(&|m| m.bulk1.as_ref().map(|b| b.bytes_per_sec).map_err(Clone::clone), gbit),
                c(&|m| m.bulk8.as_ref().map(|b| b.bytes_per_sec).map_err(Clone::clone), gbit),
                c(&|m| m.bulk1.as_ref().map(|b| b.cpu_s_per_gb).map_err(Clone::clone), |v| format!("{v:.2}")),
                c(&|m| m.bulk8.as_ref().map(|b| b.cpu_s_per_gb).map_err(Clone::clone), |v| format!("{v:.2}")),
                c(&|m| m.udp_rr.clone(), int),
            ];
            let cells = if m.is_none() {
                let why = match &r.setup {
                    Setup::Unavailable(why) => format!("unavailable: {}", why.replace('|', "/")),
                    Setup::Ready(_) => "-".into(),
                };
                std::iter::once(why).chain(std::iter::repeat_n("-".to_string(), 7)).collect()
            } else {
                cells.to_vec()
            };
            let _ = writeln!(out, "| {} | {services} | {} |", r.contender.name(), cells.join(" | "));
        }
    }
    out
}

/// Two plots per path (connections/s, connect latency p50), one line per contender; the
/// floors are dashed and flat. Returns file names and their SVG.
pub fn plots(rows: &[Row]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for path in Path::ALL {
        for (what, label, get) in [
            (
                "connections",
                "new connections per second",
                (|m: &Measures| m.connect.as_ref().ok().map(|c| c.per_sec)) as fn(&Measures) -> Option<f64>,
            ),
            ("latency", "connect latency p50 (µs)", |m: &Measures| m.connect.as_ref().ok().map(|c| c.p50_us)),
        ] {
            let mut series = Vec::new();
            for c in Contender::ALL {
                let points: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.contender == c)
                    .flat_map(|r| {
                        let v = measures(r, path).and_then(get);
                        v.map(|v| (r.services as f64, v))
                    })
                    .collect();
                if !points.is_empty() {
                    series.push(Series { name: short(c).into(), points, colour: colour(c), dashed: c.is_floor() });
                }
            }
            if series.is_empty() {
                continue;
            }
            let title = format!("{}: {label}", path.name());
            out.push((format!("dataplane-{what}-{}.svg", path.slug()), svg(&title, "Services", label, &series)));
        }
    }
    out
}
