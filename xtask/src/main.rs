//! `cargo xtask`: verdict's developer commands.
//!
//! ```text
//! cargo xtask test    install what is missing, build, run every test (kernel and packet tests too)
//! cargo xtask demo    a namespace node with three pods, programmed by `verdict run --once`
//! cargo xtask bench   verdict's netlink programming vs `nft -f`, into target/bench/report.md
//! ```
//!
//! xtask itself has no C dependencies, so it can install the Debian packages the rest of the
//! workspace needs (libnftnl, libmnl, nftables, ...) before building it.

mod deps;
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
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <test|demo|bench> [args]\n");
            println!("  test    install missing packages (as root), build, run every test");
            println!("  demo    program a namespace node from examples/demo and send traffic through it");
            println!("  bench   cold sync and one-endpoint change: verdict over netlink vs nft -f");
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
    run::cargo_env(&test_args, &envs)
}

/// `cargo xtask demo`.
fn demo(args: &[String]) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the demo creates network namespaces and programs nftables")?;
    run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"])?;
    let root = run::workspace_root()?;
    let mut demo_args = vec![
        "--verdict".to_string(),
        root.join("target/release/verdict").display().to_string(),
        "--echo".to_string(),
        root.join("target/release/verdict-echo").display().to_string(),
        "--manifests".to_string(),
        root.join("examples/demo").display().to_string(),
    ];
    demo_args.extend(args.iter().cloned());
    run::program(&root.join("target/release/verdict-demo"), &demo_args, &[])
}

/// `cargo xtask bench`.
fn bench(args: &[String]) -> Result<()> {
    deps::ensure()?;
    deps::require_root("the benchmark programs nftables in network namespaces")?;
    run::cargo(&["build", "--release", "-p", "verdict-e2e", "--bin", "verdict-bench"])?;
    let root = run::workspace_root()?;
    std::fs::create_dir_all(root.join("target/bench"))?;
    let report = root.join("target/bench/report.md");
    let report_s = report.display().to_string();
    // Transparent huge pages for malloc, for both sides of the comparison (nft inherits it):
    // a cold sync touches hundreds of MB, and first-touch page faults are a large part of it.
    let envs = [("VERDICT_BENCH_OUT", report_s.as_str()), ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")];
    run::program(&root.join("target/release/verdict-bench"), args, &envs)?;
    println!("\nreport written to {report_s} (copy it into docs/benchmarks.md with the context of the run)");
    Ok(())
}
