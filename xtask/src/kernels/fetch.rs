//! Debian's kernels (and other suites' packages) downloaded with a private apt configuration:
//! the host's sources, lists and package state are never changed.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A kernel of the matrix: what the user types, and the Debian suite whose cloud kernel it is.
#[derive(Clone, Debug)]
pub struct Wanted {
    pub name: &'static str,
    pub suite: &'static str,
}

/// Every kernel `cargo xtask kernels` knows, oldest first.
pub const KNOWN: &[Wanted] = &[
    Wanted { name: "5.10", suite: "bullseye" },
    Wanted { name: "6.1", suite: "bookworm" },
    Wanted { name: "6.12", suite: "trixie" },
];

/// The names `--kernel` accepts: Debian's kernels this knows how to fetch. Here beside
/// [`KNOWN`] so that `cli` can name them without importing `kernels`, which imports `cli`.
pub fn known() -> impl Iterator<Item = &'static str> {
    KNOWN.iter().map(|w| w.name)
}

/// A kernel to boot: its image, its release and its module tree (none when all is built in).
#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    pub package: String,
    pub release: String,
    pub vmlinuz: PathBuf,
    pub modules: Option<PathBuf>,
}

/// A private apt for one Debian suite under `cache/apt-<suite>`.
pub struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// Writes its sources and refreshes its lists (a failure here means the suite is unreachable).
    pub fn for_suite(cache: &Path, suite: &str) -> Result<Apt> {
        let dir = cache.join(format!("apt-{suite}"));
        for sub in ["lists/partial", "cache/archives/partial", "prefs"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let mirror = std::env::var("VERDICT_DEBIAN_MIRROR").unwrap_or_else(|_| "http://deb.debian.org".into());
        std::fs::write(
            dir.join("sources.list"),
            format!("deb {mirror}/debian {suite} main\ndeb {mirror}/debian-security {suite}-security main\n"),
        )?;
        let apt = Apt { dir };
        let out = apt.command("apt-get").args(["update", "-qq"]).output().context("running apt-get update")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        // apt-get update exits 0 even when a source is unreachable; its "E:"/"W:" lines say so.
        if !out.status.success() || stderr.lines().any(|l| l.starts_with("E:") || l.contains("Failed to fetch")) {
            bail!("apt-get update for {suite} failed: {}", stderr.lines().last().unwrap_or("no output"));
        }
        Ok(apt)
    }

    fn command(&self, program: &str) -> Command {
        let d = self.dir.display();
        let mut c = Command::new(program);
        c.env("DEBIAN_FRONTEND", "noninteractive").args([
            format!("-oDir::Etc::sourcelist={d}/sources.list"),
            "-oDir::Etc::sourceparts=-".into(),
            format!("-oDir::State::lists={d}/lists"),
            format!("-oDir::Cache={d}/cache"),
            format!("-oDir::Etc::preferencesparts={d}/prefs"),
            "-oDir::State::status=/dev/null".into(),
            "-oAPT::Sandbox::User=root".into(),
        ]);
        c
    }

    /// The package a virtual or meta package depends on first (`linux-image-cloud-amd64` ->
    /// `linux-image-6.1.0-56-cloud-amd64`).
    pub fn first_dependency(&self, package: &str) -> Result<String> {
        let out = self.command("apt-cache").args(["depends", package]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.trim().strip_prefix("Depends: "))
            .map(|s| s.trim().to_string())
            .with_context(|| format!("apt-cache depends {package}: no dependency"))
    }

    /// A package and every package it needs at run time, recursively (no recommends).
    pub fn runtime_closure(&self, package: &str) -> Result<Vec<String>> {
        let out = self
            .command("apt-cache")
            .args(["depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts"])
            .args(["--no-breaks", "--no-replaces", "--no-enhances", "--no-pre-depends", package])
            .output()?;
        if !out.status.success() {
            bail!("apt-cache depends {package}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // Top-level lines are packages; `<virtual>` ones are provided by a real one also listed.
        let mut names: Vec<String> =
            text.lines().filter(|l| !l.starts_with(' ') && !l.starts_with('<')).map(str::to_string).collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Downloads a package's .deb into `into` (once) and returns its path.
    pub fn download(&self, package: &str, into: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(into)?;
        let prefix = format!("{}_", package.replace('+', "%2b"));
        let find = || -> Result<Option<PathBuf>> {
            for e in std::fs::read_dir(into)? {
                let p = e?.path();
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if (name.starts_with(&prefix) || name.starts_with(&format!("{package}_"))) && name.ends_with(".deb") {
                    return Ok(Some(p));
                }
            }
            Ok(None)
        };
        if let Some(p) = find()? {
            return Ok(p);
        }
        let out = self.command("apt-get").args(["download", "-qq", package]).current_dir(into).output()?;
        if !out.status.success() {
            bail!("apt-get download {package}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        find()?.with_context(|| format!("apt-get download {package} left no .deb in {}", into.display()))
    }
}

/// Unpacks a .deb with `dpkg-deb -x` into `dir` (once).
pub fn unpack(deb: &Path, dir: &Path) -> Result<()> {
    if dir.join(".unpacked").exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    crate::run::program_env("dpkg-deb", &["-x", &deb.display().to_string(), &dir.display().to_string()], &[])?;
    std::fs::write(dir.join(".unpacked"), b"")?;
    Ok(())
}

/// Downloads and unpacks the suite's generic amd64 kernel (the cloud flavour has no 9p, which
/// the VM mounts its root with), with modules decompressed and `modules.dep`
/// made by `depmod` (the package's postinst, which would make it, is not run).
pub fn kernel(cache: &Path, wanted: &Wanted) -> Result<Kernel> {
    let apt = Apt::for_suite(cache, wanted.suite)?;
    let package = apt.first_dependency("linux-image-amd64")?;
    let deb = apt.download(&package, &cache.join("debs"))?;
    let release = package.trim_start_matches("linux-image-").to_string();
    let root = cache.join("unpacked").join(&release);
    let fresh = !root.join(".unpacked").exists();
    unpack(&deb, &root)?;
    // Trixie's packages put modules under /usr/lib (merged /usr), older ones under /lib.
    let base = if root.join("usr/lib/modules").is_dir() { root.join("usr") } else { root.clone() };
    let modules = base.join("lib/modules").join(&release);
    if fresh || !modules.join("modules.dep").exists() {
        decompress_modules(&modules)?;
        crate::run::program_env("depmod", &["-b", &base.display().to_string(), &release], &[])?;
    }
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    if !vmlinuz.exists() {
        bail!("{} has no {}", deb.display(), vmlinuz.display());
    }
    Ok(Kernel { name: wanted.name.to_string(), package, release, vmlinuz, modules: Some(modules) })
}

/// busybox's insmod reads plain .ko files only; newer Debian kernels ship .ko.xz.
fn decompress_modules(dir: &Path) -> Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "xz") {
                crate::run::program_env("xz", &["-d", "-f", &p.display().to_string()], &[])?;
            } else if p.extension().is_some_and(|x| x == "zst") {
                crate::run::program_env("zstd", &["-d", "-q", "-f", "--rm", &p.display().to_string()], &[])?;
            }
        }
    }
    Ok(())
}
