//! Kernel tests need CAP_NET_ADMIN and CAP_SYS_ADMIN (root has them). Without them they skip
//! loudly, and where a skip is not acceptable (CI sets `VERDICT_REQUIRE_KERNEL=1`) they fail.
//!
//! Capabilities, not the user id, decide: a container or `capsh --drop=cap_net_admin,cap_sys_admin`
//! keeps uid 0 without them, and a test that asked only "am I root?" then failed instead of
//! skipping.

use caps::{CapSet, Capability};
use std::path::Path;
use std::process::Command;

/// What kernel tests need: network namespaces of their own (CAP_SYS_ADMIN) and nftables,
/// conntrack and links in them (CAP_NET_ADMIN).
const KERNEL_CAPABILITIES: [Capability; 2] = [Capability::CAP_NET_ADMIN, Capability::CAP_SYS_ADMIN];

/// Whether this thread has `cap` in its effective set (an unreadable set counts as without).
pub fn has_capability(cap: Capability) -> bool {
    caps::has_cap(None, CapSet::Effective, cap).unwrap_or(false)
}

/// The capabilities kernel tests need that this thread lacks, by name; empty when they can run.
pub fn missing_kernel_capabilities() -> Vec<String> {
    KERNEL_CAPABILITIES.into_iter().filter(|c| !has_capability(*c)).map(|c| c.to_string()).collect()
}

/// Whether kernel tests can run here. Prints why not, and panics instead when
/// `VERDICT_REQUIRE_KERNEL=1`.
pub fn kernel_tests_enabled(test: &str) -> bool {
    let missing = missing_kernel_capabilities();
    if missing.is_empty() {
        return true;
    }
    skip_or_fail(&format!(
        "SKIPPED {test}: kernel tests need CAP_NET_ADMIN and CAP_SYS_ADMIN (to create network \
         namespaces and program nftables); missing: {}. Run them as root with `sudo -E cargo xtask test`",
        missing.join(", ")
    ));
    false
}

/// Prints a skip loudly, or panics with it under `VERDICT_REQUIRE_KERNEL=1`.
pub fn skip_or_fail(msg: &str) {
    if std::env::var("VERDICT_REQUIRE_KERNEL").as_deref() == Ok("1") {
        panic!("{msg} (VERDICT_REQUIRE_KERNEL=1 forbids skipping)");
    }
    eprintln!("\n*** {msg} ***\n");
}

/// `program` as a test runs the real binary where it cannot touch the host's network: in a
/// network namespace of its own (`unshare -n`) when it holds CAP_NET_ADMIN, which a case that
/// wrongly passes validation could use on the host's table or sysctls; as it is when it does
/// not, since verdict then refuses, before anything else, whatever needs it. Holding
/// CAP_NET_ADMIN without CAP_SYS_ADMIN (no namespace to be had) is refused with a panic, not
/// run on the host.
pub fn host_safe_command(program: impl AsRef<Path>) -> Command {
    if !has_capability(Capability::CAP_NET_ADMIN) {
        return Command::new(program.as_ref());
    }
    assert!(
        has_capability(Capability::CAP_SYS_ADMIN),
        "CAP_NET_ADMIN without CAP_SYS_ADMIN: no network namespace to run verdict in, and the host's is not for tests"
    );
    let mut c = Command::new("unshare");
    c.arg("-n").arg(program.as_ref());
    c
}

/// The path of the function it is used in, `packets_core::hairpin_reaches_itself_masqueraded`:
/// a skip names the test that skipped, not only its file.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        let name = ::std::any::type_name_of_val(&here);
        name.strip_suffix("::here").unwrap_or(name)
    }};
}

/// Returns early from a test (with a loud message) when kernel tests cannot run.
#[macro_export]
macro_rules! require_kernel {
    () => {
        if !$crate::privilege::kernel_tests_enabled($crate::test_name!()) {
            return;
        }
    };
}

/// Whether this kernel has software flowtables (the fast path), probed in a namespace of its
/// own. Prints why not, and panics instead when `VERDICT_REQUIRE_FLOWTABLE=1` (the kernel
/// matrix sets it: Debian's kernels have them; a kernel built without
/// `CONFIG_NF_FLOW_TABLE`, such as some VM hosts', cannot run these tests at all).
pub fn flowtable_tests_enabled(test: &str) -> bool {
    let probe = crate::netns::Netns::new("ftprobe").expect("a namespace for the flowtable probe");
    let supported = probe.run(|| {
        let mut nl = verdict_nft::netlink::Netlink::open().expect("netlink");
        nl.supports_flowtables().expect("the flowtable probe")
    });
    if supported {
        return true;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    let msg = format!(
        "SKIPPED {test}: kernel {release} has no software flowtables (CONFIG_NF_FLOW_TABLE_INET); \
         the fast path's tests run on Debian's kernels with `cargo xtask kernels`"
    );
    if std::env::var("VERDICT_REQUIRE_FLOWTABLE").as_deref() == Ok("1") {
        panic!("{msg} (VERDICT_REQUIRE_FLOWTABLE=1 forbids skipping)");
    }
    eprintln!("\n*** {msg} ***\n");
    false
}

/// Returns early from a test (with a loud message) when the fast path cannot run here.
#[macro_export]
macro_rules! require_flowtable {
    () => {
        $crate::require_kernel!();
        if !$crate::privilege::flowtable_tests_enabled($crate::test_name!()) {
            return;
        }
    };
}

/// Whether IPVS works here (the kernel's `ip_vs`, and `ipvsadm`), probed in a namespace of its
/// own. This machine's kernel has no `ip_vs`: the IPVS tests run in Debian's kernels
/// (`cargo xtask kernels`, which sets `VERDICT_REQUIRE_IPVS=1`: there a skip fails).
pub fn ipvs_tests_enabled(test: &str) -> bool {
    let probe = crate::netns::Netns::new("ipvsprobe").expect("a namespace for the IPVS probe");
    let Err(e) = crate::upstream_proxy::ipvs::available(&probe) else { return true };
    let msg = format!(
        "SKIPPED {test}: no IPVS here ({e:#}); it runs in Debian's kernels: \
         cargo xtask kernels --kernel 6.1 --suites migration"
    );
    if std::env::var("VERDICT_REQUIRE_IPVS").as_deref() == Ok("1") {
        panic!("{msg} (VERDICT_REQUIRE_IPVS=1 forbids skipping)");
    }
    eprintln!("\n*** {msg} ***\n");
    false
}
