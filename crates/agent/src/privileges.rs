//! CAP_NET_ADMIN, checked before anything else: the image runs verdict as a non-root user
//! whose capabilities come from the binary's file capability (`setcap cap_net_admin+p`, see
//! the Dockerfile), within what the container grants. The file carries
//! them as permitted only, without the effective bit, so that the kernel starts the binary
//! even when the container grants less (with the effective bit it refuses the exec, and the
//! runtime's "operation not permitted" names no cause); they are made effective here, and
//! when they cannot be, one line says why.

use anyhow::{Result, bail};
use caps::{CapSet, Capability, CapsHashSet};

/// Makes NET_ADMIN effective, or fails with the reason. Nothing of verdict's own needs
/// NET_RAW: everything it does is netlink. (iptables-legacy opens a raw socket when the
/// leftovers of kube-proxy are removed; the image's iptables binaries carry their own file
/// capabilities for that.)
pub fn ensure_net_admin() -> Result<()> {
    let has = |set, cap| caps::has_cap(None, set, cap).unwrap_or(false);
    if !has(CapSet::Effective, Capability::CAP_NET_ADMIN) && has(CapSet::Permitted, Capability::CAP_NET_ADMIN) {
        caps::raise(None, CapSet::Effective, Capability::CAP_NET_ADMIN)?;
    }
    if has(CapSet::Effective, Capability::CAP_NET_ADMIN) {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let no_new_privs = field(&status, "NoNewPrivs") == Some("1");
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "verdict".into());
    let uid = nix::unistd::geteuid();
    if !has(CapSet::Bounding, Capability::CAP_NET_ADMIN) {
        bail!(
            "no CAP_NET_ADMIN: the container lacks NET_ADMIN (it is not in the capability bounding set); \
             add it to securityContext.capabilities.add"
        );
    }
    if no_new_privs {
        bail!(
            "no CAP_NET_ADMIN: no_new_privs is set (allowPrivilegeEscalation: false), so the file capabilities \
             of {exe} do not apply; set allowPrivilegeEscalation: true, or run as root"
        );
    }
    bail!(
        "no CAP_NET_ADMIN: uid {uid} is not root and {exe} has no file capabilities \
         (setcap cap_net_admin,cap_net_raw+p {exe}), or they were not granted"
    )
}

/// What the agent keeps once started, of what it has: NET_ADMIN for nftables, conntrack and
/// the table monitor, and NET_BIND_SERVICE because a health check node port comes from the
/// cluster's NodePort range, which an API server may set below 1024.
pub const KEPT_AFTER_START: [Capability; 2] = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_BIND_SERVICE];

/// Drops every capability but `keep`, once what needs more has run (conntrack sysctls,
/// oom_score_adj, the iptables and IPVS leftovers): a run as root otherwise keeps all of
/// them for its life, a run with file capabilities keeps what the file grants. The bounding
/// set goes too where the process may change it (root), so nothing started later regains
/// them, and no_new_privs is set: the agent starts no program after this.
///
/// Capabilities belong to threads: this must run before the agent starts any thread, and
/// says so when it did not (each thread created earlier keeps its own).
pub fn drop_after_start() -> Result<()> {
    let keep: CapsHashSet = KEPT_AFTER_START.into_iter().collect();
    let keep = &keep;
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(1);
    if threads > 1 {
        tracing::warn!(threads, "capabilities dropped with other threads running: they keep theirs");
    }
    let permitted = caps::read(None, CapSet::Permitted)?;
    let dropped: Vec<String> = permitted.difference(keep).map(|c| c.to_string()).collect();
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        for cap in caps::read(None, CapSet::Bounding)?.difference(keep) {
            caps::drop(None, CapSet::Bounding, *cap)?;
        }
    }
    caps::clear(None, CapSet::Ambient)?;
    caps::clear(None, CapSet::Inheritable)?;
    let kept: CapsHashSet = permitted.intersection(keep).copied().collect();
    caps::set(None, CapSet::Effective, &kept)?;
    caps::set(None, CapSet::Permitted, &kept)?;
    nix::sys::prctl::set_no_new_privs()?;
    let mut kept: Vec<String> = kept.iter().map(|c| c.to_string()).collect();
    kept.sort();
    tracing::info!(kept = kept.join(","), dropped = dropped.len(), "capabilities dropped after start");
    Ok(())
}

/// A field of /proc/self/status.
fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_status_fields() {
        let status = "Name:\tverdict\nNoNewPrivs:\t1\nCapBnd:\t0000000000003000\n";
        assert_eq!(super::field(status, "NoNewPrivs"), Some("1"));
        assert_eq!(super::field(status, "CapBnd"), Some("0000000000003000"));
        assert_eq!(super::field(status, "Seccomp"), None);
    }
}
