//! `verdict-bench-e2e`: the real `verdict run` binary against the test API server, from process
//! start to the committed full sync, cold and as a warm restart, with RSS from `/proc` and the
//! API server's cost; optionally a baseline binary side by side. Run it through
//! `cargo xtask bench --e2e` (needs root).
//!
//! ```text
//! verdict-bench-e2e --verdict PATH [--baseline PATH] [--points 1000x10,10000x2,...] [--settle S] [--out DIR]
//! verdict-bench-e2e --verdict PATH --api [--baseline PATH] [--points 10000x10,100000x10] [--settle S] [--out DIR]
//! ```
//!
//! `--api`: instead, cold starts side by side with streaming lists and with lists at
//! resourceVersion "0" (the API server refusing streaming lists), each in JSON and in protobuf:
//! time to programmed, the cold start's transactions and the longest, API bytes and requests
//! per start; with `--baseline`, the baseline's four too, against the same data.

use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::path::PathBuf;
use verdict_e2e::endtoend::plot::{Series, svg};
use verdict_e2e::endtoend::{ApiVariant, Outcome, Point, Start, measure, measure_api};

struct Args {
    verdict: PathBuf,
    baseline: Option<PathBuf>,
    points: Vec<Point>,
    settle: std::time::Duration,
    out: PathBuf,
    api: bool,
}

fn parse_args() -> Result<Args> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| argv.iter().position(|a| a == name).and_then(|i| argv.get(i + 1)).cloned();
    for a in argv.iter().filter(|a| a.starts_with("--")) {
        if !["--verdict", "--baseline", "--points", "--settle", "--out", "--api"].contains(&a.as_str()) {
            bail!("unknown argument {a}");
        }
    }
    let api = argv.iter().any(|a| a == "--api");
    let default_points = if api { "10000x10,100000x10" } else { "1000x10,10000x2,10000x10,20000x10,100000x10" };
    let points = get("--points").unwrap_or_else(|| default_points.into());
    Ok(Args {
        verdict: get("--verdict").context("--verdict PATH is required")?.into(),
        baseline: get("--baseline").map(PathBuf::from),
        points: points.split(',').map(str::parse).collect::<Result<_>>()?,
        settle: std::time::Duration::from_secs_f64(
            get("--settle").map_or(Ok(15.0), |s| s.parse()).context("--settle")?,
        ),
        out: get("--out").unwrap_or_else(|| "target/bench".into()).into(),
        api,
    })
}

fn row(who: &str, o: &Outcome) -> String {
    format!(
        "| {} | {who} | {:.2} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {:.2} | {:.0} | {} | {:.0} | {}+{} | {:.1} | {} |",
        o.point,
        o.cold.programmed_s,
        // A binary that does not log them committed its cold start as one transaction, whose
        // kernel time is at most its commit phase (encoding included).
        o.cold.transactions.map_or("1".to_string(), |(n, _)| n.to_string()),
        o.cold.transactions.map_or(format!("<= {:.0}", o.cold.commit_ms), |(_, ms)| format!("{ms:.0}")),
        o.cold.peak_rss_mib,
        o.cold.early_rss_mib,
        o.cold.settled_rss_mib,
        o.cold.heap_mib.map_or("-".to_string(), |(a, r)| format!("{a} / {r}")),
        o.warm.programmed_s,
        o.warm.full_sync_ms,
        o.warm.objects,
        o.warm.peak_rss_mib,
        o.cold.lists,
        o.cold.watches,
        o.cold.bytes as f64 / 1e6,
        o.cold.saved_state.map_or("-".to_string(), |(b, ms)| format!("{:.1} MB, {ms:.0} ms", b as f64 / 1e6)),
    )
}

const HEADER: &str = "| Services x endpoints | binary | start -> programmed s | cold start transactions | longest transaction ms | peak RSS MiB | RSS 3 s after MiB | settled RSS MiB | heap after sync MiB (allocated / resident) | warm restart -> programmed s | its full sync ms | objects written | warm peak RSS MiB | lists+watches | API MB sent | state saved at stop |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

fn main() -> Result<()> {
    let args = parse_args()?;
    anyhow::ensure!(
        nix::unistd::Uid::effective().is_root(),
        "the end-to-end benchmark needs root (network namespaces)"
    );
    std::fs::create_dir_all(&args.out)?;
    let workdir = std::env::temp_dir();
    if args.api {
        return api_report(&args, &workdir);
    }
    let mut ours = Vec::new();
    let mut base = Vec::new();
    println!("{HEADER}");
    for &point in &args.points {
        if let Some(b) = &args.baseline {
            let o = measure(b, &workdir, point, &[], args.settle).with_context(|| format!("baseline at {point}"))?;
            println!("{}", row("baseline", &o));
            base.push(o);
        }
        let o =
            measure(&args.verdict, &workdir, point, &[], args.settle).with_context(|| format!("verdict at {point}"))?;
        println!("{}", row("verdict", &o));
        ours.push(o);
    }
    let mut report = format!("{HEADER}\n");
    for (i, o) in ours.iter().enumerate() {
        if let Some(b) = base.get(i) {
            let _ = writeln!(report, "{}", row("baseline", b));
        }
        let _ = writeln!(report, "{}", row("verdict", o));
    }
    std::fs::write(args.out.join("e2e-report.md"), &report)?;
    write_plots(&args, &ours, &base)?;
    println!("\nreport and plots in {}", args.out.display());
    Ok(())
}

/// Only the points with 10 endpoints per Service form the lines (10k x 2 is a single point).
fn series(name: &str, colour: &'static str, dashed: bool, runs: &[Outcome], y: impl Fn(&Outcome) -> f64) -> Series {
    let points = runs.iter().filter(|o| o.point.endpoints == 10).map(|o| (o.point.services as f64, y(o))).collect();
    Series { name: name.into(), points, colour, dashed }
}

fn write_plots(args: &Args, ours: &[Outcome], base: &[Outcome]) -> Result<()> {
    let mut time = vec![
        series("cold start", "#1f77b4", false, ours, |o| o.cold.programmed_s),
        series("warm restart", "#2ca02c", false, ours, |o| o.warm.programmed_s),
    ];
    let mut rss = vec![
        series("peak RSS", "#d62728", false, ours, |o| o.cold.peak_rss_mib),
        series("settled RSS", "#9467bd", false, ours, |o| o.cold.settled_rss_mib),
    ];
    if !base.is_empty() {
        time.push(series("cold (baseline)", "#1f77b4", true, base, |o| o.cold.programmed_s));
        time.push(series("warm (baseline)", "#2ca02c", true, base, |o| o.warm.programmed_s));
        rss.push(series("peak (baseline)", "#d62728", true, base, |o| o.cold.peak_rss_mib));
        rss.push(series("settled (baseline)", "#9467bd", true, base, |o| o.cold.settled_rss_mib));
    }
    let title = "verdict run: process start to programmed";
    std::fs::write(args.out.join("e2e-time.svg"), svg(title, "Services (10 endpoints each)", "seconds", &time))?;
    let title = "verdict run: memory";
    std::fs::write(args.out.join("e2e-rss.svg"), svg(title, "Services (10 endpoints each)", "MiB", &rss))?;
    Ok(())
}

const API_HEADER: &str = "| Services x endpoints | binary | lists | encoding | start -> programmed s | vs streaming JSON | cold start transactions | longest transaction ms | API MB sent | vs JSON | requests (lists+watches) | peak RSS MiB |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|";

fn api_row(point: Point, who: &str, v: ApiVariant, s: &Start, reference: &Start, json: &Start) -> String {
    format!(
        "| {point} | {who} | {} | {} | {:.2} | {:+.0}% | {} | {} | {:.1} | {:.0}% | {}+{} | {:.0} |",
        if v.streaming { "streaming" } else { "rv=0 list" },
        if v.protobuf { "protobuf" } else { "JSON" },
        s.programmed_s,
        100.0 * (s.programmed_s / reference.programmed_s - 1.0),
        s.transactions.map_or("1".to_string(), |(n, _)| n.to_string()),
        s.transactions.map_or(format!("<= {:.0}", s.commit_ms), |(_, ms)| format!("{ms:.0}")),
        s.bytes as f64 / 1e6,
        100.0 * s.bytes as f64 / json.bytes as f64,
        s.lists,
        s.watches,
        s.peak_rss_mib,
    )
}

/// `--api`: the four ways to start, at each point, side by side (with `--baseline`, the
/// baseline's four first, against the same server).
fn api_report(args: &Args, workdir: &std::path::Path) -> Result<()> {
    println!("{API_HEADER}");
    let mut report = format!("{API_HEADER}\n");
    let binaries: Vec<(&str, &PathBuf)> =
        args.baseline.iter().map(|b| ("baseline", b)).chain([("verdict", &args.verdict)]).collect();
    for &point in &args.points {
        for &(who, binary) in &binaries {
            let runs = measure_api(binary, workdir, point, &ApiVariant::ALL, args.settle)
                .with_context(|| format!("{who} at {point}"))?;
            let find = |streaming: bool, protobuf: bool| {
                &runs
                    .iter()
                    .find(|(v, _)| v.streaming == streaming && v.protobuf == protobuf)
                    .expect("every variant ran")
                    .1
            };
            let reference = find(true, false);
            for (v, s) in &runs {
                let line = api_row(point, who, *v, s, reference, find(v.streaming, false));
                println!("{line}");
                let _ = writeln!(report, "{line}");
            }
        }
    }
    std::fs::write(args.out.join("e2e-api.md"), &report)?;
    println!("\nreport in {}", args.out.join("e2e-api.md").display());
    Ok(())
}
