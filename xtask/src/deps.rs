//! The Debian packages verdict needs, installed when missing (as root) or named exactly.

use crate::run;
use anyhow::{Result, bail};
use std::process::Command;

/// Build: libnftnl and libmnl headers and pkg-config. Tests and the demo: nft, ip, conntrack;
/// iptables and ipset to create (and check the removal of) kube-proxy's leftovers.
pub const PACKAGES: &[&str] =
    &["pkg-config", "libnftnl-dev", "libmnl-dev", "nftables", "iproute2", "conntrack", "iptables", "ipset"];

/// For the monitoring test (crates/agent/tests/monitoring.rs): a real Prometheus and promtool.
/// Optional: where it cannot be installed, that test says it is SKIPPED and the rest runs.
pub const MONITORING: &[&str] = &["prometheus"];

/// Installs [`MONITORING`] if it can; says loudly when it cannot. Debian's package would
/// start a Prometheus service on the host's port 9090: a policy-rc.d that refuses service
/// starts is in place during the install (unless the machine has one of its own).
pub fn ensure_monitoring() {
    const POLICY: &str = "/usr/sbin/policy-rc.d";
    let ours = is_root()
        && !std::path::Path::new(POLICY).exists()
        && std::fs::write(POLICY, "#!/bin/sh\n# xtask: no service starts while packages install\nexit 101\n").is_ok()
        && Command::new("chmod").args(["755", POLICY]).status().is_ok_and(|s| s.success());
    let installed = ensure_packages(MONITORING);
    if ours {
        let _ = std::fs::remove_file(POLICY);
    }
    if let Err(e) = installed {
        eprintln!("xtask: could not install {}: the monitoring test will be SKIPPED: {e:#}", MONITORING.join(" "));
    }
}

/// Whether we run as root.
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// Fails with a clear message unless root.
pub fn require_root(why: &str) -> Result<()> {
    if !is_root() {
        bail!("this needs root: {why}; run it with sudo (e.g. `sudo -E cargo xtask ...`)");
    }
    Ok(())
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Installs missing packages when root; otherwise prints the exact command and fails.
pub fn ensure() -> Result<()> {
    ensure_packages(PACKAGES)
}

/// [`ensure`] for the given packages.
pub fn ensure_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let line = format!("apt-get install -y --no-install-recommends {}", missing.join(" "));
    if !is_root() {
        bail!("missing packages: {}; install them with:\n    sudo apt-get update && sudo {line}", missing.join(" "));
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    run::program_env("apt-get", &["update", "-qq"], &[("DEBIAN_FRONTEND", "noninteractive")])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(missing.iter().copied());
    run::program_env("apt-get", &args, &[("DEBIAN_FRONTEND", "noninteractive")])
}
