//! `verdict-bench`: verdict's netlink programming against `nft -f` of the same rendered text,
//! side by side on this machine. Run it through `cargo xtask bench` (needs root).
//!
//! Cold sync: N Services with E endpoints each into an empty namespace, timed by stage (model
//! build, render, diff, encode, kernel). Baseline: `nft -f` of the same transaction's script in
//! another fresh namespace (wall time, including nft's start and parse). One-endpoint change:
//! with N Services programmed, one endpoint of one Service is replaced; timed as the agent does
//! it (diff of the changed table, encode, commit) and as `nft -f` of the same change.

use anyhow::{Context, Result};
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};
use verdict_e2e::netns::Netns;
use verdict_e2e::synth;
use verdict_layout::{DesiredTable, RenderOptions, render};
use verdict_model::ModelCache;
use verdict_nft::netlink::Netlink;
use verdict_nft::{Plan, diff, text};

struct Args {
    sizes: Vec<usize>,
    change_sizes: Vec<usize>,
    endpoints: usize,
    runs: usize,
    changes: usize,
    pool: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        sizes: vec![1000, 10_000, 100_000],
        change_sizes: vec![1000, 100_000],
        endpoints: 10,
        runs: 3,
        changes: 9,
        pool: synth::POD_POOL,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let list = |s: &str| s.split(',').map(|x| x.trim().parse::<usize>().context("number")).collect::<Result<Vec<_>>>();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--sizes" => a.sizes = list(&v)?,
            "--change-sizes" => a.change_sizes = list(&v)?,
            "--endpoints" => a.endpoints = v.parse()?,
            "--runs" => a.runs = v.parse()?,
            "--changes" => a.changes = v.parse()?,
            "--unique-pods" => {
                a.pool = usize::MAX;
                i -= 1;
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
        i += 2;
    }
    Ok(a)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[derive(Default, Clone)]
struct Cold {
    model: f64,
    render: f64,
    diff: f64,
    encode: f64,
    kernel: f64,
    total: f64,
    nft: f64,
    elements: usize,
    bytes: usize,
}

fn nft_file(ns: &Netns, path: &std::path::Path) -> Result<f64> {
    let started = Instant::now();
    let out = Command::new("ip").args(["netns", "exec", ns.name(), "nft", "-f"]).arg(path).output()?;
    let took = ms(started.elapsed());
    anyhow::ensure!(out.status.success(), "nft -f failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(took)
}

fn cold(n: usize, a: &Args, workdir: &std::path::Path) -> Result<Cold> {
    let pool = a.pool.min(n * a.endpoints);
    let (services, slices) = synth::cluster(n, a.endpoints, pool);
    let mut runs = Vec::new();
    for _ in 0..a.runs {
        let ns = Netns::new("bench")?;
        let r = ns.run(|| -> Result<(Cold, String)> {
            let started = Instant::now();
            let built = synth::model(&services, &slices);
            let t_model = started.elapsed();
            let t = Instant::now();
            let desired = render(&built.model, &RenderOptions::default());
            let t_render = t.elapsed();
            let mut nl = Netlink::open()?;
            let t = Instant::now();
            let current = verdict_nft::observe::observe(&mut nl, "kube-proxy")?;
            let plan = diff(current.as_ref().map(|o| &o.ruleset), &desired);
            let t_diff = t.elapsed();
            let t = Instant::now();
            let mut batch = nl.encode(&plan.transaction);
            let t_encode = t.elapsed();
            let stats = nl.commit_encoded(&mut batch)?;
            let total = started.elapsed();
            let script = text::script(&plan.transaction);
            Ok((
                Cold {
                    model: ms(t_model),
                    render: ms(t_render),
                    diff: ms(t_diff),
                    encode: ms(t_encode),
                    kernel: stats.kernel_us as f64 / 1000.0,
                    total: ms(total),
                    nft: 0.0,
                    elements: desired.element_count(),
                    bytes: stats.bytes,
                },
                script,
            ))
        })?;
        let (mut c, script) = r;
        drop(ns);
        let path = workdir.join(format!("cold-{n}.nft"));
        std::fs::write(&path, script)?;
        let base = Netns::new("nftf")?;
        c.nft = nft_file(&base, &path)?;
        drop(base);
        let _ = std::fs::remove_file(&path);
        runs.push(c);
    }
    let pick = |f: fn(&Cold) -> f64| median(runs.iter().map(f).collect());
    Ok(Cold {
        model: pick(|c| c.model),
        render: pick(|c| c.render),
        diff: pick(|c| c.diff),
        encode: pick(|c| c.encode),
        kernel: pick(|c| c.kernel),
        total: pick(|c| c.total),
        nft: pick(|c| c.nft),
        elements: runs[0].elements,
        bytes: runs[0].bytes,
    })
}

struct Change {
    ours: f64,
    kernel: f64,
    user: f64,
    nft: f64,
    objects: usize,
}

/// One endpoint replaced, the way the agent's sync loop does it: the changed EndpointSlice
/// into the model cache, only the changed Service port re-rendered into the desired table,
/// the transaction planned from what it touched, then committed.
fn change(n: usize, a: &Args, workdir: &std::path::Path) -> Result<Change> {
    let pool = a.pool.min(n * a.endpoints);
    let (services, slices) = synth::cluster(n, a.endpoints, pool);
    let mut cache = ModelCache::new(synth::config(), "bench");
    cache.set_node(Some(synth::node()));
    for s in services {
        cache.upsert_service(s);
    }
    for s in slices {
        cache.upsert_slice(s);
    }
    cache.rebuild();
    let mut table = DesiredTable::new(cache.model(), &RenderOptions::default());
    // Two namespaces in lockstep: verdict commits each change in one, nft -f applies the same
    // change in the other.
    let ns = Netns::new("chg")?;
    let nft_ns = Netns::new("chgnft")?;
    let Plan { transaction, result } = diff(None, table.ruleset());
    let path = workdir.join("change.nft");
    std::fs::write(&path, text::script(&transaction))?;
    nft_file(&nft_ns, &path)?;
    ns.run(|| -> Result<()> {
        Netlink::open()?.commit(&transaction)?;
        Ok(())
    })?;
    // The transaction shares the element maps; drop it so that updates change them in place
    // (as the agent does) instead of copying them.
    drop(transaction);
    table.adopt(result);
    let (mut ours, mut kernel, mut user, mut nft, mut objects) = (vec![], vec![], vec![], vec![], 0);
    for k in 0..a.changes {
        // Service i gets one endpoint replaced by a pod it did not have.
        let i = (k * 7919 + 17) % n;
        let t = Instant::now();
        cache.upsert_slice(synth::slice(i, a.endpoints, pool, 1 + k));
        for c in cache.rebuild().changes {
            table.update(c.old.as_deref(), c.new.as_deref());
        }
        let tx = table.plan();
        user.push(ms(t.elapsed()));
        objects = tx.object_count();
        let (took, stats) = ns.run(|| -> Result<(f64, u64)> {
            let mut nl = Netlink::open()?;
            let t = Instant::now();
            let stats = nl.commit(&tx)?;
            Ok((ms(t.elapsed()), stats.kernel_us))
        })?;
        table.committed();
        ours.push(took);
        kernel.push(stats as f64 / 1000.0);
        std::fs::write(&path, text::script(&tx))?;
        nft.push(nft_file(&nft_ns, &path)?);
    }
    Ok(Change { ours: median(ours), kernel: median(kernel), user: median(user), nft: median(nft), objects })
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0) / 1024 / 1024)
        })
        .unwrap_or(0);
    let kernel = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let nft = Command::new("nft")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem} GiB RAM, kernel {kernel}, {nft}")
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let workdir = std::env::temp_dir().join(format!("verdict-bench-{}", std::process::id()));
    std::fs::create_dir_all(&workdir)?;
    let mut out = String::new();
    out.push_str(&format!("Machine: {}\n\n", machine()));
    out.push_str(&format!(
        "Endpoints per Service: {}; pod pool: {}; medians of {} cold runs and {} changes.\n\n",
        a.endpoints,
        if a.pool == usize::MAX { "one pod per endpoint".to_string() } else { format!("{} pods", a.pool) },
        a.runs,
        a.changes
    ));
    out.push_str("### Cold sync\n\n| Services | elements | batch MB | model ms | render ms | diff ms | encode ms | kernel ms | **verdict total ms** | **nft -f ms** | nft / verdict |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    print!("{out}");
    let _ = std::io::stdout().flush();
    for &n in &a.sizes {
        let c = cold(n, &a, &workdir)?;
        let row = format!(
            "| {n} | {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} | **{:.0}** | **{:.0}** | {:.1}x |\n",
            c.elements,
            c.bytes as f64 / 1e6,
            c.model,
            c.render,
            c.diff,
            c.encode,
            c.kernel,
            c.total,
            c.nft,
            c.nft / c.total
        );
        print!("{row}");
        let _ = std::io::stdout().flush();
        out.push_str(&row);
    }
    let head = "\n### One endpoint replaced\n\n| Services programmed | objects written | sync user ms | **verdict commit ms** | kernel ms | **nft -f ms** | nft / verdict |\n|---:|---:|---:|---:|---:|---:|---:|\n";
    print!("{head}");
    out.push_str(head);
    for &n in &a.change_sizes {
        let c = change(n, &a, &workdir)?;
        let row = format!(
            "| {n} | {} | {:.3} | **{:.2}** | {:.2} | **{:.1}** | {:.0}x |\n",
            c.objects,
            c.user,
            c.ours,
            c.kernel,
            c.nft,
            c.nft / c.ours
        );
        print!("{row}");
        let _ = std::io::stdout().flush();
        out.push_str(&row);
    }
    let _ = std::fs::remove_dir_all(&workdir);
    if let Ok(path) = std::env::var("VERDICT_BENCH_OUT") {
        std::fs::write(&path, &out).with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}
