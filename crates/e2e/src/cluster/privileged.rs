//! `privileged: true` where the machine cannot grant all of it. `docker run --privileged`
//! asks for every capability, and runc fails ("unable to apply caps") when the daemon's
//! bounding set lacks one: on the build VMs, which run inside a container without
//! CAP_SYS_RESOURCE. Then the init container gets everything else `--privileged` gives:
//! every capability the machine has, writable `/proc/sys` (what the conntrack sysctls need),
//! no seccomp or AppArmor profile.

/// The capabilities by number, as Docker names them (`capability.h`, 0 to 40).
const CAPS: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// Whether the engine refused `--privileged` for want of capabilities (its stderr).
pub fn caps_refused(stderr: &[u8]) -> bool {
    String::from_utf8_lossy(stderr).contains("unable to apply caps")
}

/// The capabilities missing from the bounding set `status` (`/proc/self/status`) gives: the
/// daemon, started by this machine's root, has no more than this process.
pub fn missing_caps(status: &str) -> Vec<&'static str> {
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(u64::MAX);
    CAPS.iter().enumerate().filter(|(bit, _)| bounding >> bit & 1 == 0).map(|(_, name)| *name).collect()
}

/// `args` (a `docker run` command line) with `--privileged` replaced by what it gives, less
/// the capabilities in `missing`.
pub fn emulated(args: &[String], missing: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for a in args {
        if a != "--privileged" {
            out.push(a.clone());
            continue;
        }
        out.extend(["--cap-add", "ALL"].map(String::from));
        for cap in missing {
            out.extend(["--cap-drop".to_string(), cap.to_string()]);
        }
        for opt in ["systempaths=unconfined", "seccomp=unconfined", "apparmor=unconfined"] {
            out.extend(["--security-opt".to_string(), opt.to_string()]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{emulated, missing_caps};

    #[test]
    fn the_bounding_set_names_what_is_missing() {
        // This machine's: every capability but SYS_RESOURCE (bit 24).
        assert_eq!(missing_caps("Name:\tx\nCapBnd:\t000001fffeffffff\n"), ["SYS_RESOURCE"]);
        assert!(missing_caps("CapBnd:\t000001ffffffffff\n").is_empty());
        let args: Vec<String> = ["run", "--privileged", "img"].map(String::from).into();
        let out = emulated(&args, &["SYS_RESOURCE"]);
        assert_eq!(out[..5], ["run", "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE"]);
        assert!(out.contains(&"systempaths=unconfined".to_string()) && out.last().unwrap() == "img");
    }
}
