//! `cargo xtask kernels --nft-versions`: the golden `all-features` table, programmed over
//! netlink by `verdict run --once` in a fresh namespace, listed by the `nft` of each Debian
//! release; what each prints must reload with that same `nft -f` in another fresh namespace.
//! Each release's nft runs from its unpacked packages through its own dynamic loader and libc,
//! so the host's packages are not changed.

use super::fetch::{self, Apt};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Debian releases whose nft is tried, oldest first.
const SUITES: &[&str] = &["bullseye", "bookworm", "trixie"];

/// An nft of one release, run through that release's loader.
struct Nft {
    suite: String,
    loader: PathBuf,
    libs: String,
    binary: PathBuf,
}

impl Nft {
    fn unpack(cache: &Path, suite: &str) -> Result<Nft> {
        let apt = Apt::for_suite(cache, suite)?;
        let root = cache.join(format!("nft-{suite}"));
        for package in apt.runtime_closure("nftables")? {
            let deb = apt.download(&package, &cache.join(format!("debs-{suite}")))?;
            fetch::unpack(&deb, &root.join("pkgs").join(&package))?;
            copy_tree(&root.join("pkgs").join(&package), &root.join("root"))?;
        }
        let r = root.join("root");
        // The multiarch path first: /lib64's entry is an absolute symlink, into the host's libc.
        let loader = ["lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"]
            .iter()
            .map(|p| r.join(p))
            .find(|p| p.exists())
            .context("no ld-linux-x86-64.so.2 in the unpacked libc6")?;
        let libs = ["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"]
            .iter()
            .map(|p| r.join(p).display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        Ok(Nft { suite: suite.to_string(), loader, libs, binary: r.join("usr/sbin/nft") })
    }

    /// `ip netns exec <ns> nft <args>`, with this release's nft.
    fn run(&self, ns: &str, args: &[&str]) -> Result<Output> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(&self.loader).arg("--library-path").arg(&self.libs).arg(&self.binary);
        Ok(c.args(args).output()?)
    }

    fn version(&self) -> String {
        let mut c = Command::new(&self.loader);
        c.arg("--library-path").arg(&self.libs).arg(&self.binary).arg("--version");
        c.output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
    }
}

/// `cp -a src/. dst` (the packages' trees merged into one root).
fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    let status = Command::new("cp").arg("-a").arg(format!("{}/.", src.display())).arg(dst).status()?;
    if !status.success() {
        bail!("cp -a {} {} failed", src.display(), dst.display());
    }
    Ok(())
}

/// A network namespace of our own, removed on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Result<Ns> {
        let name = format!("vd-nftv-{tag}-{}", std::process::id());
        crate::run::program_env("ip", &["netns", "add", &name], &[])?;
        Ok(Ns(name))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Runs the check and prints one line per release; fails if any release's nft cannot print
/// the table or reload what it printed.
pub fn check(cache: &Path) -> Result<String> {
    let root = crate::run::workspace_root()?;
    crate::run::cargo(&["build", "--release", "-p", "verdict-agent", "--bin", "verdict"])?;
    let scenario = root.join("tests/golden/all-features");
    let flags = std::fs::read_to_string(scenario.join("flags"))?;
    let programmed = Ns::new("src")?;
    let verdict = crate::run::release_bin("verdict")?;
    let mut args = vec!["netns", "exec", &programmed.0, &verdict, "run", "--once", "--manifests"];
    let manifests = scenario.join("manifests").display().to_string();
    args.push(&manifests);
    args.extend(flags.split_whitespace());
    crate::run::program_env("ip", &args, &[])?;
    let mut report = String::from(
        "| Debian | nft | `nft list table inet kube-proxy` | reloads with `nft -f` | lists the same after reload |\n|---|---|---|---|---|\n",
    );
    let mut failed = Vec::new();
    for suite in SUITES {
        let nft = match Nft::unpack(cache, suite) {
            Ok(n) => n,
            Err(e) => {
                report.push_str(&format!("| {suite} | unavailable: {e:#} | | | |\n"));
                failed.push(suite.to_string());
                continue;
            }
        };
        let listed = nft.run(&programmed.0, &["list", "table", "inet", "kube-proxy"])?;
        let text = String::from_utf8_lossy(&listed.stdout).to_string();
        let prints = listed.status.success() && text.contains("table inet kube-proxy");
        let file = cache.join(format!("nft-{suite}/listed.nft"));
        std::fs::write(&file, &text)?;
        let (reloads, same) = if prints {
            let fresh = Ns::new("load")?;
            let loaded = nft.run(&fresh.0, &["-f", &file.display().to_string()])?;
            let again = nft.run(&fresh.0, &["list", "table", "inet", "kube-proxy"])?;
            (loaded.status.success(), again.status.success() && again.stdout == listed.stdout)
        } else {
            (false, false)
        };
        let err = String::from_utf8_lossy(&listed.stderr);
        let yes = |b: bool| if b { "yes" } else { "**NO**" };
        report.push_str(&format!(
            "| {} | {} | {}{} | {} | {} |\n",
            nft.suite,
            nft.version(),
            yes(prints),
            if prints { format!(" ({} lines)", text.lines().count()) } else { format!(": {}", err.trim()) },
            yes(reloads),
            yes(same)
        ));
        if !(prints && reloads && same) {
            failed.push(suite.to_string());
        }
    }
    println!("{report}");
    if !failed.is_empty() {
        bail!("the nft of {} cannot print or reload verdict's table", failed.join(", "));
    }
    Ok(report)
}
