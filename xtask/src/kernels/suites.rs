//! Which test executables run inside the VMs: the kernel and packet suites of
//! `cargo test --workspace --release`, built once on the host and found from cargo's JSON.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Stdio;

/// A test executable and the directory cargo would run it in (its package's root).
#[derive(Clone, Debug)]
pub struct Suite {
    pub name: String,
    pub exe: PathBuf,
    pub dir: PathBuf,
    /// Environment for the run: `NAME@fastpath` runs suite NAME with every table programmed
    /// with the fast path (`VERDICT_FAST_PATH=1`).
    pub env: Vec<(&'static str, &'static str)>,
    /// Arguments (a test executable runs with none).
    pub args: Vec<String>,
}

/// The suffix that runs a packet suite with the fast path on.
pub const FAST_PATH: &str = "@fastpath";

/// The e2e cluster (`cargo xtask e2e`'s scenarios, agents started from kubeadm's
/// `config.conf`), with the fast path turned on in that file: no test executable, the
/// `verdict-e2e` binary.
pub const E2E_FAST_PATH: &str = "e2e@fastpath";

/// The suites that exercise the kernel: the integration tests of `verdict-e2e` that program
/// nftables or send packets, and the netlink and conntrack unit tests. Left out: suites that
/// need no kernel (they prove nothing new on another one) and the long timing runs (`churn`,
/// `latency`: measurements, and under TCG only a measure of the emulator).
pub const ALL: &[&str] = &[
    "kernel_golden",
    "kernel_ruleset",
    "kernel_incremental",
    "kernel_counters",
    "coldstart",
    "chain_deletion",
    "packets_core",
    "packets_scale",
    "kept_behaviours",
    "upstream_proxy",
    "migration",
    "scenarios",
    "conntrack",
    "stale_udp",
    "leftovers",
    "controller_loop",
    "faults",
    "firewalls",
    "dual_stack",
    "verdict_nft",
    "verdict_conntrack",
    "fast_path",
    "fast_path_agent",
    "scenarios@fastpath",
    "stale_udp@fastpath",
    "packets_core@fastpath",
    E2E_FAST_PATH,
];

/// What `.ci/run` runs on 6.1 (docs/testing.md says why these).
pub const CI: &[&str] = &[
    "kernel_golden",
    "kernel_ruleset",
    "chain_deletion",
    "packets_core",
    "conntrack",
    "leftovers",
    "migration",
    "controller_loop",
    "fast_path",
    "fast_path_agent",
    "scenarios@fastpath",
    "stale_udp@fastpath",
    E2E_FAST_PATH,
];

/// Builds the test executables (once, on the host) and returns those named in `wanted`.
pub fn build(wanted: &[String]) -> Result<Vec<Suite>> {
    let out = crate::run::cargo_command()?
        .args(["test", "--workspace", "--release", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("cargo test --no-run failed");
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (Some(exe), Some(manifest)) = (field(line, "executable"), field(line, "manifest_path")) else {
            continue;
        };
        let target = line.split_once("\"target\":").map_or("", |(_, t)| t);
        let Some(name) = field(target, "name") else { continue };
        let lib = target.contains("\"kind\":[\"lib\"]");
        // Unit tests of a library are named after its crate (`verdict_nft`), as cargo prints them.
        let name = if lib { name.replace('-', "_") } else { name };
        let dir = PathBuf::from(manifest).parent().map(PathBuf::from).unwrap_or_default();
        if wanted.contains(&name) {
            let (exe, dir) = (PathBuf::from(&exe), dir.clone());
            found.push(Suite { name: name.clone(), exe, dir, env: Vec::new(), args: Vec::new() });
        }
        let fast = format!("{name}{FAST_PATH}");
        if wanted.contains(&fast) {
            let env = vec![("VERDICT_FAST_PATH", "1")];
            found.push(Suite { name: fast, exe: PathBuf::from(exe), dir, env, args: Vec::new() });
        }
    }
    if wanted.iter().any(|w| w == E2E_FAST_PATH) {
        found.push(e2e_fast_path()?);
    }
    for w in wanted {
        if !found.iter().any(|s| &s.name == w) {
            bail!("no test executable named {w} in `cargo test --workspace --no-run`");
        }
    }
    found.sort_by_key(|s| wanted.iter().position(|w| *w == s.name));
    Ok(found)
}

/// [`E2E_FAST_PATH`]: the binaries built, and the run `cargo xtask e2e` would make.
fn e2e_fast_path() -> Result<Suite> {
    crate::run::cargo(&["build", "--release", "-p", "verdict-agent", "-p", "verdict-e2e", "--bins"])?;
    let bin = crate::run::release_bin;
    Ok(Suite {
        name: E2E_FAST_PATH.into(),
        exe: crate::run::release_dir()?.join("verdict-e2e"),
        dir: crate::run::workspace_root()?,
        env: vec![("VERDICT_FAST_PATH", "1")],
        args: vec!["--verdict".into(), bin("verdict")?, "--echo".into(), bin("verdict-echo")?],
    })
}

/// A string field of one line of cargo's JSON (first occurrence; cargo escapes no `"` in paths
/// and names it prints).
fn field(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = json[start..].find('"')? + start;
    Some(json[start..end].replace("\\\\", "\\"))
}
