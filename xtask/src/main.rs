//! `cargo xtask`: verdict's developer commands.
//!
//! ```text
//! cargo xtask test    install what is missing, build, run every test (kernel and packet tests too)
//! cargo xtask deny    cargo-deny: advisories (vendored RustSec snapshot), licences, bans, sources
//! cargo xtask demo    a two-node namespace cluster with verdict agents: a Service created, scaled, deleted
//! cargo xtask bench   verdict's netlink programming vs `nft -f`, into target/bench/report.md
//! cargo xtask bench --e2e   `verdict run` against the test API server: start, restart, RSS
//! cargo xtask bench --e2e --api [--baseline PATH]   cold starts: streaming vs resourceVersion 0 lists, JSON vs protobuf
//! cargo xtask bench --counters   what --service-counters costs: commit, connect latency, connections/s
//! cargo xtask bench --dataplane   what a packet pays: no proxy, static DNAT, verdict, iptables
//! cargo xtask e2e     a two-node namespace cluster with verdict daemons and the test API server
//! cargo xtask e2e --kind [--dry-run]   the same scenarios on a kind cluster (Docker)
//! cargo xtask e2e --containers         the namespace cluster, each agent a container of the image
//! cargo xtask kernels the kernel and packet suites on Debian's 5.10, 6.1 and 6.12 kernels, in QEMU
//! cargo xtask image   the container image, with docker or podman (--prebuilt, --base-from-debootstrap)
//! ```
//!
//! xtask itself has no C dependencies, so it can install the Debian packages the rest of the
//! workspace needs (libnftnl, libmnl, nftables, ...) before building it.
//!
//! The flags of each command are in `cli.rs` (`cargo xtask <command> --help`).

mod cli;
mod deny;
mod deps;
mod image;
mod kernels;
mod kind;
mod run;

use anyhow::{Result, bail};
use clap::{CommandFactory, Parser};
use cli::{Cli, Command};

fn main() {
    // clap answers --help and rejects a bad command line itself (exit 2).
    let cli = Cli::parse();
    if let Err(e) = real_main(cli) {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn real_main(cli: Cli) -> Result<()> {
    match cli.command {
        Some(Command::Test(a)) => test(&a.forwarded()),
        Some(Command::Deny) => deny::deny(),
        Some(Command::Demo) => demo(),
        Some(Command::Bench(a)) => bench(&a),
        Some(Command::E2e(a)) => e2e(&a),
        Some(Command::Image(a)) => image::image(&a),
        Some(Command::Kernels(a)) => kernels::kernels(&a),
        // A bare `cargo xtask` has always printed the usage and succeeded.
        None => Ok(Cli::command().print_help()?),
    }
}

/// `cargo xtask test`.
fn test(extra: &[String]) -> Result<()> {
    deps::ensure()?;
    deps::ensure_monitoring();
    run::cargo(&["fmt", "--all", "--", "--check"])?;
    run::cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    deny::deny()?;
    let mut test_args = vec!["test", "--workspace", "--release"];
    test_args.extend(extra.iter().map(String::as_str));
    // As root, kernel tests must run: a skip would hide that they did not.
    let envs: Vec<(&str, &str)> =
        if deps::is_root() { vec![("VERDICT_REQUIRE_KERNEL", "1"), ("VERDICT_REQUIRE_IPTABLES", "1")] } else { vec![] };
    if !deps::is_root() {
        eprintln!(
            "xtask: not root: kernel and packet tests will be SKIPPED (they say so); run as root for the full suite"
        );
    }
    run::cargo_env(&test_args, &envs)?;
    if deps::is_root() {
        e2e(&cli::E2e::default())
    } else {
        eprintln!("xtask: not root: the e2e scenarios (cargo xtask e2e) are SKIPPED");
        Ok(())
    }
}

/// The container engine for kind: `--engine`, else docker, else podman.
fn kind_engine(chosen: Option<&str>) -> String {
    if let Some(e) = chosen {
        return e.to_string();
    }
    let works = |e: &str| std::process::Command::new(e).arg("--version").output().is_ok_and(|o| o.status.success());
    if works("docker") || !works("podman") { "docker".into() } else { "podman".into() }
}

/// `cargo xtask e2e`.
fn e2e(a: &cli::E2e) -> Result<()> {
    if a.kind {
        let plan = kind::plan(&kind_engine(a.engine.as_deref()));
        if a.dry_run {
            print!("{}", kind::render(&plan));
            return Ok(());
        }
        return kind::execute(&plan);
    }
    if a.containers {
        return e2e_containers(a);
    }
    let build = ["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"];
    let mut e2e_args = vec![
        "--verdict".to_string(),
        run::release_bin("verdict")?,
        "--echo".to_string(),
        run::release_bin("verdict-echo")?,
    ];
    if let Some(only) = &a.only {
        e2e_args.extend(["--only".to_string(), only.clone()]);
    }
    let runner = run::release_dir()?.join("verdict-e2e");
    if a.dry_run {
        println!("cargo {}", build.join(" "));
        println!("{} {}", runner.display(), e2e_args.join(" "));
        return Ok(());
    }
    deps::ensure()?;
    deps::require_root("the e2e cluster creates network namespaces and programs nftables")?;
    run::cargo(&build)?;
    run::program(&runner, &e2e_args, &[])
}

/// `cargo xtask e2e --containers [--base-from-debootstrap] [--engine E] [--only TEXT]`: the
/// namespace cluster with each agent a container of the image (built here from the host's
/// binary), run as `deploy/overlays/kubeadm` renders it.
fn e2e_containers(a: &cli::E2e) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the e2e cluster creates network namespaces and programs nftables")?;
    let started = std::time::Instant::now();
    let engine = image::Engine::pick(a.engine.as_deref());
    if !engine.daemon_answers() {
        bail!("`{} info` fails: no container engine is running (see docs/testing.md for dockerd)", engine.client);
    }
    run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"])?;
    let tag = "verdict:e2e";
    image::image(&cli::Image {
        prebuilt: true,
        tag: tag.into(),
        base_from_debootstrap: a.base_from_debootstrap,
        engine: Some(engine.client.clone()),
        ..cli::Image::default()
    })?;
    let root = run::workspace_root()?;
    let rendered = std::process::Command::new("kubectl")
        .args(["kustomize", "deploy/overlays/kubeadm"])
        .current_dir(&root)
        .output()
        .map_err(|e| anyhow::anyhow!("running kubectl kustomize: {e}"))?;
    if !rendered.status.success() {
        bail!("kubectl kustomize deploy/overlays/kubeadm failed: {}", String::from_utf8_lossy(&rendered.stderr));
    }
    let file = root.join("target/e2e-kubeadm.yaml");
    std::fs::write(&file, &rendered.stdout)?;
    engine.remove_labelled("verdict-e2e");
    let mut e2e_args = vec![
        "--verdict".to_string(),
        run::release_bin("verdict")?,
        "--echo".to_string(),
        run::release_bin("verdict-echo")?,
        "--containers".to_string(),
        file.display().to_string(),
        "--image".to_string(),
        tag.to_string(),
        "--engine".to_string(),
        engine.client.clone(),
    ];
    if let Some(only) = &a.only {
        e2e_args.extend(["--only".to_string(), only.clone()]);
    }
    let result = run::program(&run::release_dir()?.join("verdict-e2e"), &e2e_args, &[]);
    engine.remove_labelled("verdict-e2e");
    result?;
    println!("xtask: e2e --containers passed in {:.0} s (image build included)", started.elapsed().as_secs_f64());
    Ok(())
}

/// Builds (release) the `verdict` binary and the benchmark driver `bench` that runs it.
fn build_with_agent(bench: &str) -> Result<()> {
    run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bin", "verdict", "--bin", bench])
}

/// `--name value` for each option given, so that the driver's own defaults apply otherwise.
fn forward(out: &mut Vec<String>, name: &str, value: Option<impl ToString>) {
    if let Some(v) = value {
        out.extend([name.to_string(), v.to_string()]);
    }
}

/// A comma list as the drivers read it, or nothing when the list was not given.
fn list(v: &[usize]) -> Option<String> {
    (!v.is_empty()).then(|| v.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
}

/// `cargo xtask bench --e2e [--baseline PATH] [--points 1000x10,...]`: the real `verdict run`
/// binary against the test API server, start to programmed, warm restart, RSS.
fn bench_e2e(a: &cli::Bench) -> Result<()> {
    build_with_agent("verdict-bench-e2e")?;
    let root = run::workspace_root()?;
    let out = root.join("target/bench").display().to_string();
    let mut bench_args = vec!["--verdict".to_string(), run::release_bin("verdict")?, "--out".to_string(), out.clone()];
    forward(&mut bench_args, "--baseline", a.baseline.as_ref().map(|p| p.display()));
    forward(&mut bench_args, "--points", a.points.as_ref());
    forward(&mut bench_args, "--settle", a.settle);
    if a.api {
        bench_args.push("--api".to_string());
    }
    run::program(&run::release_dir()?.join("verdict-bench-e2e"), &bench_args, &[])?;
    let written = if a.api { "e2e-api.md" } else { "e2e-report.md, e2e-time.svg, e2e-rss.svg" };
    println!("({written} in {out}: copy them into docs/ with the context of the run)");
    Ok(())
}

/// `cargo xtask bench --counters [--services N] [--connections C] [--runs R]`: what
/// `--service-counters` costs (cold commit, connect latency, connections/s, counter read),
/// with and without counters; `--read-sizes N,...`: the reads alone; `--scrape-sizes N,...`:
/// the real agent's `/metrics`.
fn bench_counters(a: &cli::Bench) -> Result<()> {
    build_with_agent("verdict-bench-counters")?;
    let mut rest = Vec::new();
    forward(&mut rest, "--services", a.services);
    forward(&mut rest, "--endpoints", a.endpoints);
    forward(&mut rest, "--connections", a.connections);
    forward(&mut rest, "--runs", a.runs);
    forward(&mut rest, "--read-sizes", list(&a.read_sizes));
    forward(&mut rest, "--scrape-sizes", list(&a.scrape_sizes));
    if !a.scrape_sizes.is_empty() {
        rest.extend(["--verdict".to_string(), run::release_bin("verdict")?]);
    }
    run::program(&run::release_dir()?.join("verdict-bench-counters"), &rest, &[])
}

/// `cargo xtask bench --dataplane [--sizes N,...] [--seconds S] ...`: connections/s, connect
/// latency, throughput, CPU per GB and UDP request/response through each contender.
fn bench_dataplane(a: &cli::Bench) -> Result<()> {
    run::cargo(&[
        "build",
        "--release",
        "-p",
        "verdict-e2e",
        "--bin",
        "verdict-bench-dataplane",
        "--bin",
        "verdict-load",
        "--bin",
        "verdict-echo",
    ])?;
    let root = run::workspace_root()?;
    let mut args = vec![
        "--echo".to_string(),
        run::release_bin("verdict-echo")?,
        "--load".to_string(),
        run::release_bin("verdict-load")?,
        "--out".to_string(),
        root.join("target/bench").display().to_string(),
    ];
    forward(&mut args, "--sizes", list(&a.sizes));
    forward(&mut args, "--endpoints", a.endpoints);
    forward(&mut args, "--seconds", a.seconds);
    forward(&mut args, "--workers", a.workers);
    forward(&mut args, "--udp-workers", a.udp_workers);
    forward(&mut args, "--iptables-budget", a.iptables_budget);
    forward(&mut args, "--rounds", a.rounds);
    forward(&mut args, "--profile", a.profile.as_ref().map(|p| p.display()));
    run::program(&run::release_dir()?.join("verdict-bench-dataplane"), &args, &[])?;
    println!("(dataplane.md and dataplane-*.svg in target/bench: copy them into docs/ with the context of the run)");
    Ok(())
}

/// `cargo xtask demo`.
fn demo() -> Result<()> {
    deps::ensure()?;
    deps::require_root("the demo creates network namespaces and programs nftables")?;
    run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"])?;
    let demo_args = vec![
        "--verdict".to_string(),
        run::release_bin("verdict")?,
        "--echo".to_string(),
        run::release_bin("verdict-echo")?,
    ];
    run::program(&run::release_dir()?.join("verdict-demo"), &demo_args, &[])
}

/// `cargo xtask bench`.
fn bench(a: &cli::Bench) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the benchmark programs nftables in network namespaces")?;
    if a.e2e {
        return bench_e2e(a);
    }
    if a.counters {
        return bench_counters(a);
    }
    if a.dataplane {
        return bench_dataplane(a);
    }
    run::cargo(&["build", "--release", "-p", "verdict-e2e", "--bin", "verdict-bench"])?;
    let root = run::workspace_root()?;
    std::fs::create_dir_all(root.join("target/bench"))?;
    let report = root.join("target/bench/report.md");
    let report_s = report.display().to_string();
    let mut args = Vec::new();
    forward(&mut args, "--sizes", list(&a.sizes));
    forward(&mut args, "--change-sizes", list(&a.change_sizes));
    forward(&mut args, "--endpoints", a.endpoints);
    forward(&mut args, "--runs", a.runs);
    forward(&mut args, "--changes", a.changes);
    if a.unique_pods {
        args.push("--unique-pods".to_string());
    }
    // Transparent huge pages for malloc, for both sides of the comparison (nft inherits it):
    // a cold sync touches hundreds of MB, and first-touch page faults are a large part of it.
    let envs = [("VERDICT_BENCH_OUT", report_s.as_str()), ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")];
    run::program(&run::release_dir()?.join("verdict-bench"), &args, &envs)?;
    println!("\nreport written to {report_s} (copy it into docs/benchmarks.md with the context of the run)");
    Ok(())
}
