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
