//! `cargo xtask`: verdict's developer commands.
//!
//! ```text
//! cargo xtask test    install what is missing, build, run every test (kernel and packet tests too)
//! cargo xtask demo    a namespace node with three pods, programmed by `verdict run --once`
//! cargo xtask bench   verdict's netlink programming vs `nft -f`, into target/bench/report.md
//! cargo xtask bench --e2e   `verdict run` against the test API server: start, restart, RSS
//! cargo xtask bench --counters   what --service-counters costs: commit, connect latency, connections/s
//! cargo xtask e2e     a two-node namespace cluster with verdict daemons and the test API server
//! cargo xtask e2e --kind [--dry-run]   the same scenarios on a kind cluster (Docker)
//! cargo xtask e2e --containers         the namespace cluster, each agent a container of the image
//! cargo xtask kernels the kernel and packet suites on Debian's 5.10, 6.1 and 6.12 kernels, in QEMU
//! cargo xtask image   the container image, with docker or podman (--prebuilt, --base-from-debootstrap)
//! ```
//!
//! xtask itself has no C dependencies, so it can install the Debian packages the rest of the
//! workspace needs (libnftnl, libmnl, nftables, ...) before building it.

mod deps;
mod image;
mod kernels;
mod kind;
mod run;

use anyhow::{Result, bail};

fn main() {
    if let Err(e) = real_main() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args.split_first().map(|(c, r)| (c.as_str(), r)).unwrap_or(("help", &[]));
    match cmd {
        "test" => test(rest),
        "demo" => demo(rest),
        "bench" => bench(rest),
        "e2e" => e2e(rest),
        "image" => image::image(rest),
        "kernels" => kernels::kernels(rest),
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <test|demo|bench|e2e|image|kernels> [args]\n");
            println!("  test    install missing packages (as root), build, run every test and the e2e scenarios");
            println!("  demo    a two-node namespace cluster with verdict agents: a Service created, scaled, deleted");
            println!("  bench   cold sync and one-endpoint change: verdict over netlink vs nft -f");
            println!(
                "          --e2e [--baseline PATH] [--points 1000x10,...]: the verdict binary against the test API server"
            );
            println!("  e2e     the e2e scenarios on a namespace cluster [--only TEXT]");
            println!("          or on kind: --kind [--dry-run] [--engine docker|podman]");
            println!("          or with the agents as containers of the image: --containers [--base-from-debootstrap]");
            println!("  image   build the image: [--engine docker|podman] [--tag verdict:dev] [--with-test-image]");
            println!(
                "          [--prebuilt] (from the host's binary) [--base-from-debootstrap [--mirror URL]] (no registry)"
            );
            println!("  kernels the kernel and packet suites in QEMU on Debian's kernels: [--kernel 5.10,6.1,6.12]");
            println!("          [--ci] [--suites a,b] [--accel tcg|kvm] [--cpus N] [--memory MiB] [--suite-timeout S]");
            println!("          [--self-test] [--command CMD] [--fetch-only]");
            println!("          [--kernel-image BZIMAGE [--label NAME]] (an image built here, all built in)");
            println!(
                "          [--build-unfixed-6.1] (Debian 12's 6.1 without the chain-deletion fix, built, then run)"
            );
            Ok(())
        }
        other => bail!("unknown command {other:?}; try `cargo xtask help`"),
    }
}

/// `cargo xtask test`.
fn test(args: &[String]) -> Result<()> {
    deps::ensure()?;
    run::cargo(&["fmt", "--all", "--", "--check"])?;
    run::cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    let mut test_args = vec!["test", "--workspace", "--release"];
    test_args.extend(args.iter().map(String::as_str));
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
        e2e(&[])
    } else {
        eprintln!("xtask: not root: the e2e scenarios (cargo xtask e2e) are SKIPPED");
        Ok(())
    }
}

/// A flag's value (`--name value`).
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

/// The container engine: `--engine`, else docker, else podman.
fn engine(args: &[String]) -> String {
    if let Some(e) = flag(args, "--engine") {
        return e.to_string();
    }
    let works = |e: &str| std::process::Command::new(e).arg("--version").output().is_ok_and(|o| o.status.success());
    if works("docker") || !works("podman") { "docker".into() } else { "podman".into() }
}

/// `cargo xtask e2e`.
fn e2e(args: &[String]) -> Result<()> {
    let dry_run = args.iter().any(|a| a == "--dry-run");
    if args.iter().any(|a| a == "--kind") {
        let plan = kind::plan(&engine(args));
        if dry_run {
            print!("{}", kind::render(&plan));
            return Ok(());
        }
        return kind::execute(&plan);
    }
    if args.iter().any(|a| a == "--containers") {
        return e2e_containers(args);
    }
    let build = ["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"];
    let mut e2e_args = vec![
        "--verdict".to_string(),
        run::release_bin("verdict")?,
        "--echo".to_string(),
        run::release_bin("verdict-echo")?,
    ];
    if let Some(only) = flag(args, "--only") {
        e2e_args.extend(["--only".to_string(), only.to_string()]);
    }
    let runner = run::release_dir()?.join("verdict-e2e");
    if dry_run {
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
fn e2e_containers(args: &[String]) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the e2e cluster creates network namespaces and programs nftables")?;
    let started = std::time::Instant::now();
    let engine = image::Engine::pick(args);
    if !engine.daemon_answers() {
        bail!("`{} info` fails: no container engine is running (see docs/testing.md for dockerd)", engine.client);
    }
    run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"])?;
    let tag = "verdict:e2e";
    let mut image_args: Vec<String> = vec!["--prebuilt".into(), "--tag".into(), tag.into()];
    image_args.extend(args.iter().filter(|a| *a == "--base-from-debootstrap").cloned());
    image_args.extend(["--engine".into(), engine.client.clone()]);
    image::image(&image_args)?;
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
    if let Some(only) = flag(args, "--only") {
        e2e_args.extend(["--only".to_string(), only.to_string()]);
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

/// `cargo xtask bench --e2e [--baseline PATH] [--points 1000x10,...]`: the real `verdict run`
/// binary against the test API server, start to programmed, warm restart, RSS.
fn bench_e2e(args: &[String]) -> Result<()> {
    build_with_agent("verdict-bench-e2e")?;
    let root = run::workspace_root()?;
    let out = root.join("target/bench").display().to_string();
    let mut bench_args = vec!["--verdict".to_string(), run::release_bin("verdict")?, "--out".to_string(), out.clone()];
    bench_args.extend(args.iter().filter(|a| *a != "--e2e").cloned());
    run::program(&run::release_dir()?.join("verdict-bench-e2e"), &bench_args, &[])?;
    println!("(e2e-report.md, e2e-time.svg, e2e-rss.svg: copy them into docs/ with the context of the run)");
    Ok(())
}

/// `cargo xtask bench --counters [--services N] [--connections C] [--runs R]`: what
/// `--service-counters` costs (cold commit, connect latency, connections/s, counter read),
/// with and without counters; `--read-sizes N,...`: the reads alone; `--scrape-sizes N,...`:
/// the real agent's `/metrics`.
fn bench_counters(args: &[String]) -> Result<()> {
    build_with_agent("verdict-bench-counters")?;
    let mut rest: Vec<String> = args.iter().filter(|a| *a != "--counters").cloned().collect();
    if rest.iter().any(|a| a == "--scrape-sizes") {
        rest.extend(["--verdict".to_string(), run::release_bin("verdict")?]);
    }
    run::program(&run::release_dir()?.join("verdict-bench-counters"), &rest, &[])
}

/// `cargo xtask demo`.
fn demo(args: &[String]) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the demo creates network namespaces and programs nftables")?;
    run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"])?;
    let mut demo_args = vec![
        "--verdict".to_string(),
        run::release_bin("verdict")?,
        "--echo".to_string(),
        run::release_bin("verdict-echo")?,
    ];
    demo_args.extend(args.iter().cloned());
    run::program(&run::release_dir()?.join("verdict-demo"), &demo_args, &[])
}

/// `cargo xtask bench`.
fn bench(args: &[String]) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the benchmark programs nftables in network namespaces")?;
    if args.iter().any(|a| a == "--e2e") {
        return bench_e2e(args);
    }
    if args.iter().any(|a| a == "--counters") {
        return bench_counters(args);
    }
    run::cargo(&["build", "--release", "-p", "verdict-e2e", "--bin", "verdict-bench"])?;
    let root = run::workspace_root()?;
    std::fs::create_dir_all(root.join("target/bench"))?;
    let report = root.join("target/bench/report.md");
    let report_s = report.display().to_string();
    // Transparent huge pages for malloc, for both sides of the comparison (nft inherits it):
    // a cold sync touches hundreds of MB, and first-touch page faults are a large part of it.
    let envs = [("VERDICT_BENCH_OUT", report_s.as_str()), ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")];
    run::program(&run::release_dir()?.join("verdict-bench"), args, &envs)?;
    println!("\nreport written to {report_s} (copy it into docs/benchmarks.md with the context of the run)");
    Ok(())
}
