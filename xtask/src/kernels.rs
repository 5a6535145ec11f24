//! `cargo xtask kernels`: the kernel and packet suites on Debian's 5.10, 6.1 and 6.12 kernels
//! (or on a kernel image built here: `--kernel-image`, `--build-unfixed-6.1`), each booted under
//! QEMU with the host's root file system shared read-only, and one table of kernel x suite ->
//! passed/failed/skipped.

mod fetch;
mod initramfs;
mod local;
mod nft_versions;
mod report;
mod suites;
mod vm;

use crate::{cli, deps};
use anyhow::{Result, bail};
pub use fetch::known;
use report::{Outcome, Row};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vm::{Accel, Ended};

/// What the host needs: QEMU, a static busybox for the initramfs, depmod and xz for the modules.
/// ipvsadm too: the guest runs the host's programs, and Debian's kernels have the `ip_vs` this
/// host's lacks (the IPVS migration and kube-proxy tests run only there).
const PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static", "kmod", "xz-utils", "zstd", "ipvsadm"];

/// Boot, module loading and mounting the root, before the first suite starts (TCG, 1 vCPU).
const BOOT_ALLOWANCE: Duration = Duration::from_secs(180);

pub fn kernels(a: &cli::Kernels) -> Result<()> {
    deps::require_root("the VMs share the host's root file system and the tests program nftables")?;
    deps::ensure()?;
    deps::ensure_packages(PACKAGES)?;
    let root = crate::run::workspace_root()?;
    let cache = root.join("target/kernels");
    // A local image runs alone unless Debian's kernels are named too.
    let local = local::chosen(a, &root)?;
    let wanted = if local.is_some() && a.kernel.is_empty() { Vec::new() } else { chosen_kernels(&a.kernel)? };
    if a.nft_versions {
        let report = nft_versions::check(&cache)?;
        std::fs::write(cache.join("nft-versions.md"), report)?;
        return Ok(());
    }
    if a.fetch_only {
        for w in &wanted {
            let k = fetch::kernel(&cache, w)?;
            println!("xtask: {} is {} ({})", w.name, k.package, k.vmlinuz.display());
        }
        return Ok(());
    }
    let names: Vec<String> = match (a.suites.is_empty(), a.ci) {
        (false, _) => a.suites.clone(),
        (true, true) => suites::CI.iter().map(|s| s.to_string()).collect(),
        (true, false) => suites::ALL.iter().map(|s| s.to_string()).collect(),
    };
    let command = a.command.clone();
    let suites = if command.is_some() && a.suites.is_empty() { Vec::new() } else { suites::build(&names)? };
    let opts = Options {
        accel: match a.accel {
            cli::Accel::Kvm => Accel::Kvm,
            cli::Accel::Tcg => Accel::Tcg,
        },
        cpus: a.cpus,
        memory_mib: a.memory,
        suite_timeout: Duration::from_secs(a.suite_timeout),
        self_test: a.self_test,
        command,
    };
    let mut rows = Vec::new();
    for pick in wanted.iter().map(Pick::Debian).chain(local.iter().map(Pick::Built)) {
        let started = Instant::now();
        let got = match pick {
            Pick::Debian(w) => fetch::kernel(&cache, w).map_err(|e| (w, e)),
            Pick::Built(k) => Ok(k.clone()),
        };
        let row = match got {
            Err((w, e)) => Row {
                kernel: w.name.to_string(),
                release: w.suite.to_string(),
                problem: Some(format!("unavailable: {e:#}")),
                cells: Vec::new(),
                wall: started.elapsed(),
            },
            Ok(k) => {
                eprintln!("xtask: {} ({}): booting under {}", k.name, k.release, opts.accel.name());
                one_kernel(&cache, &k, &suites, &opts)?
            }
        };
        eprintln!("xtask: {} done in {:.0} s", row.kernel, row.wall.as_secs_f64());
        rows.push(row);
    }
    let mut columns: Vec<String> = suites.iter().map(|s| s.name.clone()).collect();
    if opts.command.is_some() {
        columns.push("command".into());
    }
    let table = report::table(&rows, &columns);
    let failures = report::failures(&rows);
    let text = format!("{table}{failures}");
    std::fs::write(cache.join("report.md"), &text)?;
    println!("{failures}\n{table}\n(written to {})", cache.join("report.md").display());
    let bad = rows.iter().filter(|r| r.problem.is_some() || r.cells.iter().any(|c| c.outcome != Outcome::Passed));
    let bad: Vec<&str> = bad.map(|r| r.kernel.as_str()).collect();
    if !bad.is_empty() {
        bail!("kernels with failed, skipped or unavailable suites: {}", bad.join(", "));
    }
    Ok(())
}

/// A kernel to run: one of Debian's, fetched when its turn comes, or an image built here.
enum Pick<'a> {
    Debian(&'a fetch::Wanted),
    Built(&'a fetch::Kernel),
}

struct Options {
    accel: Accel,
    cpus: u32,
    memory_mib: u32,
    suite_timeout: Duration,
    self_test: bool,
    command: Option<String>,
}

/// Debian's kernels named by `--kernel` (all of them when it is not given).
fn chosen_kernels(names: &[String]) -> Result<Vec<fetch::Wanted>> {
    if names.is_empty() {
        return Ok(fetch::KNOWN.to_vec());
    }
    names
        .iter()
        .map(|n| {
            fetch::KNOWN.iter().find(|w| w.name == n).cloned().ok_or_else(|| {
                let known: Vec<&str> = fetch::KNOWN.iter().map(|w| w.name).collect();
                anyhow::anyhow!("--kernel {n}: not one of {}", known.join(", "))
            })
        })
        .collect()
}

/// Boots one kernel, runs the plan, reads back each suite's result.
fn one_kernel(cache: &Path, k: &fetch::Kernel, suites: &[suites::Suite], opts: &Options) -> Result<Row> {
    let started = Instant::now();
    let run_dir = cache.join("runs").join(&k.name);
    if run_dir.exists() {
        std::fs::remove_dir_all(&run_dir)?;
    }
    let share = run_dir.join("share");
    std::fs::create_dir_all(&share)?;
    let initrd = run_dir.join("initramfs.cpio");
    initramfs::build(k, include_str!("kernels/init.sh"), &initrd)?;
    std::fs::write(share.join("plan.sh"), plan(suites, opts))?;
    let console = run_dir.join("console.log");
    let count = suites.len() as u32 + u32::from(opts.command.is_some());
    let vm = vm::Vm {
        vmlinuz: &k.vmlinuz,
        initramfs: &initrd,
        share: &share,
        console: &console,
        accel: opts.accel,
        memory_mib: opts.memory_mib,
        cpus: opts.cpus,
        deadline: BOOT_ALLOWANCE + opts.suite_timeout * count.max(1),
    };
    let ended = vm.run();
    let log = std::fs::read_to_string(&console).unwrap_or_default();
    let mut names: Vec<String> = suites.iter().map(|s| s.name.clone()).collect();
    if opts.command.is_some() {
        names.push("command".into());
    }
    let cells: Vec<report::Cell> = names.iter().map(|n| report::read_cell(&share, n)).collect();
    let problem = match ended {
        Err(e) => Some(format!("qemu failed: {e:#}")),
        Ok(Ended::TimedOut(t)) => Some(format!(
            "HUNG: killed after {:.0} s; last console line: {}",
            t.as_secs_f64(),
            log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(none)")
        )),
        Ok(Ended::PoweredOff) if !log.contains("verdict-vm: running plan") => Some(format!(
            "the VM did not reach the tests: {}",
            log.lines()
                .filter(|l| l.contains("verdict-vm:") || l.contains("Kernel panic"))
                .collect::<Vec<_>>()
                .join("; ")
        )),
        Ok(Ended::PoweredOff) => None,
    };
    for line in log.lines().filter(|l| l.starts_with("verdict-vm: modules not loaded")) {
        eprintln!("xtask: {}: {line}", k.name);
    }
    Ok(Row { kernel: k.name.clone(), release: k.release.clone(), problem, cells, wall: started.elapsed() })
}

/// The shell script the guest runs in its chroot of the host's root.
fn plan(suites: &[suites::Suite], opts: &Options) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root\n\
         export VERDICT_REQUIRE_KERNEL=1 VERDICT_REQUIRE_IPTABLES=1 VERDICT_REQUIRE_FLOWTABLE=1 VERDICT_REQUIRE_IPVS=1 RUST_BACKTRACE=1\n\
         now() { cut -d' ' -f1 /proc/uptime; }\n\
         run() {\n  name=$1; dir=$2; shift 2\n  echo \"verdict-vm: suite $name\" > /dev/console\n  t0=$(now)\n\
         \x20 (cd \"$dir\" && exec \"$@\") > /verdict-out/$name.log 2>&1 < /dev/null\n  rc=$?\n\
         \x20 echo \"$(now) $t0\" | awk '{print $1 - $2}' > /verdict-out/$name.secs\n\
         \x20 echo $rc > /verdict-out/$name.rc\n  echo \"verdict-vm: suite $name exit $rc\" > /dev/console\n}\n",
    );
    // The self-test runs the tests marked ignored too: the one that must fail on old kernels.
    let extra = if opts.self_test { " --include-ignored" } else { "" };
    let limit = opts.suite_timeout.as_secs();
    for suite in suites {
        // Test executables take libtest's flags; a program its own arguments.
        let args = match suite.args.is_empty() {
            true => extra.to_string(),
            false => suite.args.iter().map(|a| format!(" {}", shell_quote(a))).collect(),
        };
        let _ = writeln!(
            s,
            // A directory the guest cannot enter fails the suite with the reason in its log.
            "run {} {} {}timeout -k 10 {limit} {}{args}",
            suite.name,
            quote(&suite.dir),
            suite.env.iter().map(|(k, v)| format!("env {k}={v} ")).collect::<String>(),
            quote(&suite.exe)
        );
    }
    if let Some(cmd) = &opts.command {
        let root = crate::run::workspace_root().unwrap_or_else(|_| PathBuf::from("/"));
        let _ = writeln!(s, "run command {} timeout -k 10 {limit} sh -c {}", quote(&root), shell_quote(cmd));
    }
    s
}

fn quote(p: &Path) -> String {
    shell_quote(&p.display().to_string())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
