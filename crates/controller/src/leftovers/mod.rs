//! Removing upstream kube-proxy's leftovers when a node switches from it to verdict, as
//! kube-proxy itself does when it switches modes (`CleanupLeftovers` of its iptables, ipvs
//! and nftables proxiers).
//!
//! What goes, in this order:
//! 1. nftables mode: the tables `ip kube-proxy` and `ip6 kube-proxy` (verdict's own table is
//!    `inet kube-proxy` and is never touched here);
//! 2. iptables and ipvs modes: kube-proxy's own chains in the `nat`, `filter` and `mangle`
//!    tables and the jumps to them from the built-in chains, for every iptables backend found
//!    (`iptables-nft`, `iptables-legacy`, IPv4 and IPv6; plain `iptables` when neither is
//!    installed). kubelet's chains (`KUBE-FIREWALL`, `KUBE-KUBELET-CANARY`, `KUBE-MARK-DROP`,
//!    `KUBE-IPTABLES-HINT`) and every other rule stay;
//! 3. ipvs mode: the IPVS virtual servers (only when the `ip_vs` module is loaded, and only
//!    when `kube-ipvs0` or one of kube-proxy's ipsets shows that its IPVS mode ran: virtual
//!    servers carry no owner, and other programs use IPVS too), the `kube-ipvs0` link, and
//!    kube-proxy's ipsets (after the rules that used them are gone).
//!
//! Everything runs in the calling thread's network namespace (netlink sockets are opened, and
//! programs started, from the calling thread). Missing programs and kernel features mean
//! there is nothing of that kind to remove: they are skipped with a debug log, never reported
//! as failures.

mod iptables;
mod ipvs;
pub(crate) mod netlink;
pub mod serving;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use verdict_nft::netlink::{Netlink, TableFamily};

/// What [`remove_leftovers`] removed and what it could not remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftoverReport {
    /// One human-readable line per object removed, e.g. `table ip kube-proxy`,
    /// `iptables-nft nat chain KUBE-SERVICES`, `link kube-ipvs0`, `ipset KUBE-CLUSTER-IP`.
    pub removed: Vec<String>,
    /// One line per failure (each also logged as a warning); the rest was still attempted.
    pub failed: Vec<String>,
}

impl LeftoverReport {
    fn removed(&mut self, line: String) {
        tracing::info!(removed = %line, "removed a kube-proxy leftover");
        self.removed.push(line);
    }

    fn failed(&mut self, line: String) {
        tracing::warn!(failure = %line, "could not remove a kube-proxy leftover");
        self.failed.push(line);
    }
}

/// Removes upstream kube-proxy's leftovers (nftables, iptables and ipvs modes) from the calling
/// thread's network namespace, all at once (`kube-proxy --cleanup`). Never panics: each
/// failure is one line of [`LeftoverReport::failed`], and everything else is still attempted.
/// Running it again when nothing is left removes nothing.
pub fn remove_leftovers() -> LeftoverReport {
    remove_leftovers_draining(None)
}

/// How kube-proxy's IPVS virtual servers are taken down when its IPVS mode ran here: only
/// once IPVS forwards none of their connections any more, or after `bound`.
///
/// New connections are verdict's from its first sync (its DNAT runs at prerouting, before
/// IPVS sees a packet to a local address), but a connection IPVS already forwards has its own
/// conntrack entry and reaches IPVS through `kube-ipvs0`'s addresses: deleting either would
/// stall or reset it.
pub struct IpvsDrain<'a> {
    /// The longest wait; `Duration::ZERO` removes them at once.
    pub bound: Duration,
    /// How often IPVS's connections are counted.
    pub poll: Duration,
    /// Waits up to the given time; `false` ends the wait early and keeps IPVS as it is (the
    /// agent stopped: the next one drains again).
    pub wait: &'a mut dyn FnMut(Duration) -> bool,
}

/// Removes upstream kube-proxy's leftovers, IPVS last: the nftables tables, the iptables rules
/// and the ipsets go at once; the IPVS virtual servers and `kube-ipvs0` after `drain` (when
/// given). What it does and why is logged; failures are collected as in [`remove_leftovers`].
pub fn remove_leftovers_draining(drain: Option<IpvsDrain<'_>>) -> LeftoverReport {
    // Read before the ipsets go: they are one of the traces of kube-proxy's IPVS mode.
    let traces = ipvs::traces();
    let mut report = LeftoverReport::default();
    let steps: [(&str, &Step<'_>); 3] = [
        ("nftables tables", &remove_nft_tables),
        ("iptables rules", &iptables::remove_iptables_leftovers),
        ("ipsets", &ipvs::destroy_ipsets),
    ];
    for (what, step) in steps {
        guarded(&mut report, what, step);
    }
    if traces.kube_proxy_ran()
        && let Some(drain) = drain
        && !drain_ipvs(drain)
    {
        tracing::info!(
            "stopped waiting for IPVS's connections: kube-proxy's virtual servers and {} kept for the next start",
            ipvs::IPVS_LINK
        );
        return report;
    }
    guarded(&mut report, "ipvs virtual servers", &|r| ipvs::flush_if_kube_proxy_ran(r, &traces));
    guarded(&mut report, "ipvs link", &ipvs::delete_ipvs_link);
    tracing::debug!(removed = report.removed.len(), failed = report.failed.len(), "kube-proxy leftovers done");
    report
}

/// One kind of leftover: removes what it finds, reporting into the report.
type Step<'a> = dyn Fn(&mut LeftoverReport) + 'a;

/// Runs one step; a bug in it must not stop the agent from starting, nor the other steps.
fn guarded(report: &mut LeftoverReport, what: &str, step: &Step<'_>) {
    let mut part = LeftoverReport::default();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(&mut part)));
    report.removed.append(&mut part.removed);
    report.failed.append(&mut part.failed);
    if outcome.is_err() {
        report.failed(format!("{what}: cleanup panicked (a bug in verdict)"));
    }
}

/// Waits while IPVS forwards connections, up to the bound. `false`: the wait was ended early.
fn drain_ipvs(drain: IpvsDrain<'_>) -> bool {
    const SAY_EVERY: Duration = Duration::from_secs(30);
    let started = Instant::now();
    let mut said = None::<Instant>;
    loop {
        let forwarded = ipvs::forwarded_now().unwrap_or(0);
        if forwarded == 0 {
            tracing::info!(
                waited_s = started.elapsed().as_secs(),
                "IPVS forwards no connection: removing kube-proxy's virtual servers"
            );
            return true;
        }
        let waited = started.elapsed();
        if waited >= drain.bound {
            tracing::warn!(
                forwarded,
                bound_s = drain.bound.as_secs(),
                "IPVS still forwards connections at the end of the wait: removing kube-proxy's virtual servers; these connections end"
            );
            return true;
        }
        if said.is_none_or(|t| t.elapsed() >= SAY_EVERY) {
            said = Some(Instant::now());
            tracing::info!(
                forwarded,
                left_s = (drain.bound - waited).as_secs(),
                "IPVS still forwards connections of kube-proxy's virtual servers: keeping them and {} until these end (new connections are verdict's)",
                ipvs::IPVS_LINK
            );
        }
        if !(drain.wait)(drain.poll.min(drain.bound - waited)) {
            return false;
        }
    }
}

/// Upstream's nftables mode: `ip kube-proxy` and `ip6 kube-proxy`.
fn remove_nft_tables(report: &mut LeftoverReport) {
    const UPSTREAM_TABLE: &str = "kube-proxy";
    let mut nl = match Netlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            report.failed(format!("nftables tables: {e}"));
            return;
        }
    };
    for family in [TableFamily::Ip, TableFamily::Ip6] {
        let what = format!("table {} {UPSTREAM_TABLE}", family.name());
        match nl.delete_foreign_table(family, UPSTREAM_TABLE) {
            Ok(true) => report.removed(what),
            Ok(false) => tracing::debug!(table = %what, "no upstream nftables table"),
            Err(e) => report.failed(format!("{what}: {e}")),
        }
    }
}

/// Why running a program failed.
#[derive(Debug, thiserror::Error)]
enum ExecError {
    /// It could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It exited with an error.
    #[error("`{command}` failed ({status}): {stderr}")]
    Status {
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it said on stderr (trimmed).
        stderr: String,
    },
}

/// Directories searched after `PATH`: the agent may run with a `PATH` without the sbin
/// directories where iptables and ipset live.
const SBIN_DIRS: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// Finds an executable by name in `PATH` (then in the usual sbin directories).
fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Runs `program args` (with `stdin`, if given) and returns its stdout; non-zero exit is an
/// error carrying stderr.
fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, ExecError> {
    let command = std::iter::once(program.display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let spawn_error = |source| ExecError::Spawn { program: program.display().to_string(), source };
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A program that exits early closes the pipe; its exit status tells why.
        let _ = pipe.write_all(input.as_bytes());
    }
    let out = child.wait_with_output().map_err(spawn_error)?;
    if !out.status.success() {
        return Err(ExecError::Status {
            command,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_in_path_and_reports_missing_ones() {
        assert!(find_program("sh").is_some());
        assert!(find_program("verdict-no-such-program-here").is_none());
    }

    #[test]
    fn run_returns_stdout_and_reports_failures_with_stderr() {
        let sh = find_program("sh").expect("sh");
        assert_eq!(run(&sh, &["-c", "cat"], Some("hello\n")).expect("cat"), "hello\n");
        let err = run(&sh, &["-c", "echo oops >&2; exit 3"], None).expect_err("exit 3");
        let text = err.to_string();
        assert!(text.contains("oops") && text.contains('3'), "{text}");
    }
}
