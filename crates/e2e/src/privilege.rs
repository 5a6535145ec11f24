//! Kernel tests need root. Without it they skip loudly, and where a skip is not acceptable
//! (CI sets `VERDICT_REQUIRE_KERNEL=1`) they fail.

/// Whether kernel tests can run here. Prints why not, and panics instead when
/// `VERDICT_REQUIRE_KERNEL=1`.
pub fn kernel_tests_enabled(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let msg = format!(
        "SKIPPED {test}: kernel tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create network \
         namespaces and program nftables); run them with `sudo -E cargo xtask test`"
    );
    if std::env::var("VERDICT_REQUIRE_KERNEL").as_deref() == Ok("1") {
        panic!("{msg} (VERDICT_REQUIRE_KERNEL=1 forbids skipping)");
    }
    eprintln!("\n*** {msg} ***\n");
    false
}

/// Returns early from a test (with a loud message) when kernel tests cannot run.
#[macro_export]
macro_rules! require_kernel {
    () => {
        if !$crate::privilege::kernel_tests_enabled(module_path!()) {
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
        if !$crate::privilege::flowtable_tests_enabled(module_path!()) {
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
