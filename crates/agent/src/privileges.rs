//! CAP_NET_ADMIN, checked before anything else: the image runs verdict as a non-root user
//! whose capabilities come from the binary's file capabilities (`setcap cap_net_admin,
//! cap_net_raw+p`, see the Dockerfile), within what the container grants. The file carries
//! them as permitted only, without the effective bit, so that the kernel starts the binary
//! even when the container grants less (with the effective bit it refuses the exec, and the
//! runtime's "operation not permitted" names no cause); they are made effective here, and
//! when they cannot be, one line says why.

use anyhow::{Result, bail};
use caps::{CapSet, Capability};

/// Makes NET_ADMIN (and NET_RAW, when permitted) effective, or fails with the reason.
pub fn ensure_net_admin() -> Result<()> {
    let has = |set, cap| caps::has_cap(None, set, cap).unwrap_or(false);
    for cap in [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW] {
        if !has(CapSet::Effective, cap) && has(CapSet::Permitted, cap) {
            caps::raise(None, CapSet::Effective, cap)?;
        }
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
