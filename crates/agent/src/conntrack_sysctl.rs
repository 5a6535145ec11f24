//! kube-proxy's conntrack sysctls (its `conntrack` settings), set the way upstream sets them
//! at start-up in every mode: each one only when the configuration asks for it and only when
//! the kernel's value differs, so a run after a privileged `--init-only` one writes nothing.
//! Unlike upstream, which stops at the first error, every setting is tried and each one's
//! fate reported, with the reason the kernel gave.

// The kernel test includes this file by path and uses part of it; the binary uses the rest.
#![allow(dead_code)]

use nix::errno::Errno;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MAX: &str = "net.netfilter.nf_conntrack_max";
const HASHSIZE: &str = "nf_conntrack hashsize";
const TCP_ESTABLISHED: &str = "net.netfilter.nf_conntrack_tcp_timeout_established";
const TCP_CLOSE_WAIT: &str = "net.netfilter.nf_conntrack_tcp_timeout_close_wait";
const TCP_BE_LIBERAL: &str = "net.netfilter.nf_conntrack_tcp_be_liberal";
const UDP: &str = "net.netfilter.nf_conntrack_udp_timeout";
const UDP_STREAM: &str = "net.netfilter.nf_conntrack_udp_timeout_stream";
const ROUTE_LOCALNET: &str = "net.ipv4.conf.all.route_localnet";

const INIT_ONLY: &str = "run `verdict run --init-only` (kube-proxy --init-only) as root in a privileged init \
                         container, see docs/operations.md";

/// kube-proxy's `conntrack` settings, effective values (upstream defaults applied by the caller).
#[derive(Clone, Debug, PartialEq)]
pub struct ConntrackSettings {
    /// 0: leave nf_conntrack_max (and hashsize) alone, whatever `min` says.
    pub max_per_core: u32,
    /// The floor for `max_per_core` times the CPUs.
    pub min: u32,
    /// ZERO: leave as is. Whole seconds are written, as upstream truncates.
    pub tcp_established_timeout: Duration,
    /// ZERO: leave as is.
    pub tcp_close_wait_timeout: Duration,
    /// false: leave as is (upstream never writes 0).
    pub tcp_be_liberal: bool,
    /// ZERO: leave as is.
    pub udp_timeout: Duration,
    /// ZERO: leave as is.
    pub udp_stream_timeout: Duration,
    /// `net.ipv4.conf.all.route_localnet = 1`: not a conntrack setting, but written with
    /// them, where they are (a privileged `--init-only`, or a root run): localhost NodePorts
    /// need it, as kube-proxy's iptables mode sets it (false: leave as is, as upstream never
    /// writes 0).
    pub route_localnet: bool,
}

impl Default for ConntrackSettings {
    fn default() -> Self {
        ConntrackSettings {
            max_per_core: 32768,
            min: 131072,
            tcp_established_timeout: Duration::from_secs(24 * 3600),
            tcp_close_wait_timeout: Duration::from_secs(3600),
            tcp_be_liberal: false,
            udp_timeout: Duration::ZERO,
            udp_stream_timeout: Duration::ZERO,
            route_localnet: false,
        }
    }
}

/// Where the files are: "/proc/sys" and "/sys" in production; temp dirs in unit tests.
#[derive(Clone, Debug)]
pub struct SysPaths {
    /// The sysctl tree; `net/...` under it is the opening thread's network namespace's.
    pub proc_sys: PathBuf,
    /// sysfs, for the nf_conntrack module's `hashsize` parameter (global to the host).
    pub sys: PathBuf,
}

impl Default for SysPaths {
    fn default() -> Self {
        SysPaths { proc_sys: "/proc/sys".into(), sys: "/sys".into() }
    }
}

/// One sysctl's fate.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Changed; `from` is None when the old value could not be read.
    Written { name: &'static str, from: Option<u64>, to: u64 },
    /// Nothing to do (for hashsize: already at least what nf_conntrack_max needs).
    AlreadySet { name: &'static str, value: u64 },
    /// The write was tried and refused.
    Failed { name: &'static str, want: u64, reason: String },
    /// Not tried: the kernel refuses it by design here (read-only outside the initial
    /// network namespace), not for lack of privilege.
    Skipped { name: &'static str, want: u64, reason: String },
}

/// nf_conntrack_max as upstream computes it: `max_per_core` times the CPUs, at least `min`;
/// None when `max_per_core` is 0.
pub fn conntrack_max(settings: &ConntrackSettings, cpus: usize) -> Option<u64> {
    if settings.max_per_core == 0 {
        return None;
    }
    let scaled = u64::from(settings.max_per_core) * cpus as u64;
    Some(scaled.max(u64::from(settings.min)))
}

/// Applies the settings; never panics, never stops at the first failure.
pub fn apply(settings: &ConntrackSettings, cpus: usize, paths: &SysPaths) -> Vec<Outcome> {
    let netfilter = paths.proc_sys.join("net/netfilter");
    let mut outcomes = Vec::new();
    if let Some(max) = conntrack_max(settings, cpus) {
        outcomes.push(set(MAX, &netfilter.join("nf_conntrack_max"), max, Tree::Proc));
        let param = paths.sys.join("module/nf_conntrack/parameters/hashsize");
        outcomes.push(raise_hashsize(&param, &netfilter.join("nf_conntrack_buckets"), max / 4));
    }
    let timeouts = [
        (TCP_ESTABLISHED, "nf_conntrack_tcp_timeout_established", settings.tcp_established_timeout),
        (TCP_CLOSE_WAIT, "nf_conntrack_tcp_timeout_close_wait", settings.tcp_close_wait_timeout),
    ];
    for (name, file, timeout) in timeouts {
        if !timeout.is_zero() {
            outcomes.push(set(name, &netfilter.join(file), timeout.as_secs(), Tree::Proc));
        }
    }
    if settings.tcp_be_liberal {
        outcomes.push(set(TCP_BE_LIBERAL, &netfilter.join("nf_conntrack_tcp_be_liberal"), 1, Tree::Proc));
    }
    let udp = [
        (UDP, "nf_conntrack_udp_timeout", settings.udp_timeout),
        (UDP_STREAM, "nf_conntrack_udp_timeout_stream", settings.udp_stream_timeout),
    ];
    for (name, file, timeout) in udp {
        if !timeout.is_zero() {
            outcomes.push(set(name, &netfilter.join(file), timeout.as_secs(), Tree::Proc));
        }
    }
    if settings.route_localnet {
        outcomes.push(set(ROUTE_LOCALNET, &paths.proc_sys.join("net/ipv4/conf/all/route_localnet"), 1, Tree::Proc));
    }
    outcomes
}

/// One log line per outcome that is not AlreadySet. Returns how many failed (Skipped ones
/// are not counted: they cannot succeed from where this process runs).
pub fn log_outcomes(outcomes: &[Outcome]) -> usize {
    let mut failed = 0;
    for outcome in outcomes {
        match outcome {
            Outcome::Written { name, from: Some(from), to } => tracing::info!("set {name} to {to} (was {from})"),
            Outcome::Written { name, from: None, to } => tracing::info!("set {name} to {to}"),
            Outcome::AlreadySet { .. } => {}
            Outcome::Failed { name, want, reason } => {
                failed += 1;
                tracing::warn!("could not set {name} to {want}: {reason}");
            }
            Outcome::Skipped { name, want, reason } => tracing::warn!("left {name} alone (wanted {want}): {reason}"),
        }
    }
    failed
}

/// The CPU count upstream uses: the host's online CPUs from sysfs, not the affinity mask
/// (Go's runtime.NumCPU honours the mask and undercounted under a static CPU policy,
/// kubernetes #99225); the mask only when sysfs cannot say.
pub fn cpus() -> usize {
    online_cpus(Path::new("/sys")).or_else(affinity_cpus).unwrap_or(1)
}

/// Counts `<sys>/devices/system/cpu/online`, a list such as "0-3,8-11".
pub fn online_cpus(sys: &Path) -> Option<usize> {
    let list = std::fs::read_to_string(sys.join("devices/system/cpu/online")).ok()?;
    let mut count = 0;
    for range in list.trim().split(',') {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
        count += last.checked_sub(first)? + 1;
    }
    (count > 0).then_some(count)
}

fn affinity_cpus() -> Option<usize> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let count = (0..nix::sched::CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).count();
    (count > 0).then_some(count)
}

/// Which tree a file is in, for the reason a write failed.
#[derive(Clone, Copy, PartialEq)]
enum Tree {
    Proc,
    Sys,
}

/// Writes `want` unless the file already holds it.
fn set(name: &'static str, path: &Path, want: u64, tree: Tree) -> Outcome {
    match read(path) {
        Ok(Some(value)) if value == want => Outcome::AlreadySet { name, value },
        Ok(from) => change(name, path, from, want, tree),
        Err(e) => Outcome::Failed { name, want, reason: explain(name, tree, &e) },
    }
}

/// Upstream only ever raises hashsize, to a quarter of nf_conntrack_max. The parameter is
/// root-only (0600), but nf_conntrack_buckets shows the same number to anyone: an
/// unprivileged run after a privileged init one still sees there is nothing to do.
fn raise_hashsize(param: &Path, buckets: &Path, want: u64) -> Outcome {
    let current = match read(param) {
        Ok(None) => read(buckets).ok().flatten(),
        Ok(current) => current,
        Err(e) => return Outcome::Failed { name: HASHSIZE, want, reason: explain(HASHSIZE, Tree::Sys, &e) },
    };
    match current {
        Some(value) if value >= want => Outcome::AlreadySet { name: HASHSIZE, value },
        from => change(HASHSIZE, param, from, want, Tree::Sys),
    }
}

fn change(name: &'static str, path: &Path, from: Option<u64>, want: u64, tree: Tree) -> Outcome {
    // The kernel refuses a sysctl without write bits even to root (no CAP_DAC_OVERRIDE for
    // /proc/sys), and that is how it makes nf_conntrack_max read-only outside the initial
    // network namespace: say so instead of trying.
    if tree == Tree::Proc && path.metadata().is_ok_and(|m| m.permissions().mode() & 0o222 == 0) {
        return Outcome::Skipped { name, want, reason: read_only(name) };
    }
    match write(path, want) {
        Ok(()) => Outcome::Written { name, from, to: want },
        Err(e) if e.raw_os_error() == Some(Errno::EOPNOTSUPP as i32) => {
            Outcome::Skipped { name, want, reason: explain(name, tree, &e) }
        }
        Err(e) => Outcome::Failed { name, want, reason: explain(name, tree, &e) },
    }
}

/// The current value; Ok(None) when unreadable or not a number, as upstream then writes
/// anyway. Only a missing file is an error: there is nothing to write to.
fn read(path: &Path) -> io::Result<Option<u64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
        Err(_) => Ok(None),
    }
}

/// No O_CREAT: a missing sysctl must fail, not appear. O_TRUNC is what `sysctl -w` does.
fn write(path: &Path, value: u64) -> io::Result<()> {
    OpenOptions::new().write(true).truncate(true).open(path)?.write_all(format!("{value}\n").as_bytes())
}

fn read_only(name: &str) -> String {
    if name == MAX {
        "read-only in this network namespace: outside the initial network namespace the kernel makes \
         nf_conntrack_max read-only (0444), as the limit is global to the host; set it from the host's \
         network namespace (hostNetwork)"
            .into()
    } else {
        "read-only (no write permission bits): the kernel refuses it even to root".into()
    }
}

/// Why the kernel said no, in terms of what the operator can do about it.
fn explain(name: &str, tree: Tree, e: &io::Error) -> String {
    let errno = e.raw_os_error().map(Errno::from_raw);
    match (errno, tree) {
        (Some(Errno::ENOENT), Tree::Proc) if name == ROUTE_LOCALNET => {
            "no such sysctl: this kernel has no IPv4 (localhost NodePorts need it)".into()
        }
        (Some(Errno::ENOENT), Tree::Proc) => {
            "no such sysctl: the nf_conntrack module is not loaded (`modprobe nf_conntrack`) or this kernel \
             does not have it"
                .into()
        }
        (Some(Errno::ENOENT), Tree::Sys) => {
            "no such module parameter: the nf_conntrack module is not loaded (`modprobe nf_conntrack`)".into()
        }
        (Some(Errno::EROFS), Tree::Proc) => {
            format!("read-only file system: /proc/sys is mounted read-only in this container; {INIT_ONLY}")
        }
        (Some(Errno::EROFS), Tree::Sys) => format!(
            "read-only file system: /sys is mounted read-only (container runtimes do this, docker issue \
             #24000), so the conntrack hash table cannot grow; {INIT_ONLY}"
        ),
        (Some(Errno::EACCES | Errno::EPERM), _) => {
            format!("permission denied: only root (uid 0) may write {name}; {INIT_ONLY}")
        }
        (Some(Errno::EOPNOTSUPP), Tree::Sys) => {
            "not in the initial network namespace: hashsize is global to the host and the kernel only lets \
             the initial network namespace change it; set it from the host's network namespace (hostNetwork) \
             or with the module option `nf_conntrack hashsize=N`"
                .into()
        }
        _ => e.to_string(),
    }
}

// Spelled out: the integration test includes this file by path, which would look for a
// plain `mod tests;` next to it.
#[cfg(test)]
#[path = "conntrack_sysctl/tests.rs"]
mod tests;
