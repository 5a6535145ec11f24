//! `cargo xtask deny`: cargo-deny over the workspace (advisories, licences, bans, sources, as
//! `deny.toml` says), offline and the same on every machine.
//!
//! The RustSec advisory database lives on GitHub, which CI cannot reach, so a snapshot of it is
//! vendored (`xtask/advisory-db`, see its README for the refresh) and unpacked where cargo-deny
//! looks for it; cargo-deny runs with `--offline --locked`. Advisories published after the
//! snapshot are not checked: every run says how old it is.
//!
//! Before the real check it proves that the configuration rejects what it should: a crate under
//! the GPL, a banned crate (and passes a clean one), and, with the exceptions of `deny.toml`
//! taken out, every advisory they name (so the database was read, and no exception outlived
//! its reason).

use crate::run;
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The cargo-deny release used (built with `cargo install --locked` where it is missing).
const VERSION: &str = "0.20.2";
/// `git archive` of github.com/rustsec/advisory-db (`crates/`, the licences) at [`SNAPSHOT_COMMIT`].
const SNAPSHOT: &str = "xtask/advisory-db/rustsec-advisory-db.tar.gz";
const SNAPSHOT_COMMIT: &str = "bf5c0d245a92671908518d7e765914d437954ed6";
/// The snapshot's commit date (its last advisory), as (year, month, day).
const SNAPSHOT_DATE: (i64, u32, u32) = (2026, 8, 21);
/// Where cargo-deny 0.20 looks for deny.toml's `db-urls` entry under its `db-path`: the URL's
/// last segment and the URL's XxHash64. Another cargo-deny version may name it otherwise: it
/// then says it cannot find the database, naming the directory it wants.
const DB_DIR: &str = "target/advisory-dbs/advisory-db-3157b0e258782691";
/// A snapshot older than this gets a banner, not a failure (CI must not break on a date).
const OLD_AFTER_DAYS: i64 = 180;

/// `cargo xtask deny`.
pub fn deny() -> Result<()> {
    let root = run::workspace_root()?;
    let started = Instant::now();
    let bin = ensure_installed()?;
    unpack_snapshot(&root)?;
    announce_snapshot_age();
    self_test(&root, &bin)?;
    let status = deny_command(&bin, &root, &root.join("deny.toml"))
        .args(["check", "advisories", "licenses", "bans", "sources"])
        .status()
        .context("running cargo-deny")?;
    ensure!(status.success(), "cargo deny found problems (above); deny.toml says what is allowed and why");
    eprintln!("xtask: cargo deny passed ({:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}

/// cargo-deny [`VERSION`]: on `PATH`, in cargo's bin directory, or installed there now.
fn ensure_installed() -> Result<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let installed = home.join("bin/cargo-deny");
    for candidate in [PathBuf::from("cargo-deny"), installed.clone()] {
        if version_of(&candidate).as_deref() == Some(VERSION) {
            return Ok(candidate);
        }
    }
    eprintln!("xtask: installing cargo-deny {VERSION} (cargo install --locked; a few minutes, once per machine)");
    let started = Instant::now();
    let status = run::cargo_command()?
        .args(["install", "cargo-deny", "--version", &format!("={VERSION}"), "--locked"])
        .status()
        .context("running cargo install")?;
    ensure!(status.success(), "`cargo install cargo-deny --version ={VERSION} --locked` failed ({status})");
    eprintln!("xtask: cargo-deny {VERSION} installed in {:.0} s", started.elapsed().as_secs_f64());
    ensure!(version_of(&installed).as_deref() == Some(VERSION), "{} is not cargo-deny {VERSION}", installed.display());
    Ok(installed)
}

/// The version `cargo-deny --version` reports (`cargo-deny 0.20.2`).
fn version_of(bin: &Path) -> Option<String> {
    let out = Command::new(bin).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().strip_prefix("cargo-deny ").map(str::to_string)
}

/// Unpacks the vendored database into a git repository of one commit (cargo-deny reads the
/// date of the database's HEAD), replacing whatever was there.
fn unpack_snapshot(root: &Path) -> Result<()> {
    let dir = root.join(DB_DIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let tar = Command::new("tar").arg("-xzf").arg(root.join(SNAPSHOT)).arg("-C").arg(&dir).status()?;
    ensure!(tar.success(), "unpacking {SNAPSHOT} failed ({tar})");
    let (y, m, d) = SNAPSHOT_DATE;
    let date = format!("{y:04}-{m:02}-{d:02}T00:00:00Z");
    let git = |args: &[&str]| -> Result<()> {
        let status = Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(args)
            .envs([
                ("GIT_AUTHOR_NAME", "xtask"),
                ("GIT_AUTHOR_EMAIL", "xtask@localhost"),
                ("GIT_COMMITTER_NAME", "xtask"),
                ("GIT_COMMITTER_EMAIL", "xtask@localhost"),
                ("GIT_AUTHOR_DATE", date.as_str()),
                ("GIT_COMMITTER_DATE", date.as_str()),
            ])
            .status()
            .context("running git (cargo-deny needs it to read the database)")?;
        ensure!(status.success(), "git {} in {} failed ({status})", args.join(" "), dir.display());
        Ok(())
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "--no-gpg-sign", "-m", &format!("rustsec/advisory-db {SNAPSHOT_COMMIT}")])
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn announce_snapshot_age() {
    let today = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64 / 86_400);
    let (y, m, d) = SNAPSHOT_DATE;
    let age = today - days_from_civil(y, m, d);
    let line = format!(
        "cargo deny {VERSION}: advisories from the vendored RustSec database of {y:04}-{m:02}-{d:02} \
         (commit {}), {age} days old: advisories published since are NOT checked \
         (refresh: xtask/advisory-db/README.md)",
        &SNAPSHOT_COMMIT[..12]
    );
    if age > OLD_AFTER_DAYS {
        eprintln!("{}\n*** xtask: {line}\n{}", "*".repeat(80), "*".repeat(80));
    } else {
        eprintln!("xtask: {line}");
    }
}

/// `cargo-deny --offline --locked` over `root`'s workspace with `config`, run in the workspace
/// root (deny.toml's `db-path` is relative to it).
fn deny_command(bin: &Path, manifest_dir: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--offline", "--locked", "--color", "never"])
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .arg("--config")
        .arg(config);
    if let Ok(root) = run::workspace_root() {
        cmd.current_dir(root);
    }
    cmd
}

fn output(mut cmd: Command) -> Result<(bool, String)> {
    let Output { status, stdout, stderr } = cmd.output().context("running cargo-deny")?;
    Ok((status.success(), format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr))))
}

/// A one-package workspace under `dir` depending on a path crate `dep` with licence `licence`.
fn fixture(dir: &Path, dep: &str, licence: &str) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    let package = |name: &str, licence: &str, deps: &str| {
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\nlicense = \"{licence}\"\n\
             publish = false\n\n[dependencies]\n{deps}"
        )
    };
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::create_dir_all(dir.join("dep/src"))?;
    let root = package("deny-fixture", "MIT", &format!("{dep} = {{ path = \"dep\" }}\n"));
    std::fs::write(dir.join("Cargo.toml"), format!("{root}\n[workspace]\n"))?;
    std::fs::write(dir.join("src/lib.rs"), "")?;
    std::fs::write(dir.join("dep/Cargo.toml"), package(dep, licence, ""))?;
    std::fs::write(dir.join("dep/src/lib.rs"), "")?;
    let status = run::cargo_command()?
        .args(["generate-lockfile", "--offline", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .status()?;
    ensure!(status.success(), "cargo generate-lockfile for the fixture in {} failed", dir.display());
    Ok(())
}

/// The advisory ids deny.toml's `ignore` list names, and the file without the list.
fn without_exceptions(config: &str) -> (Vec<String>, String) {
    let (mut ids, mut kept, mut inside) = (Vec::new(), Vec::new(), false);
    for line in config.lines() {
        if line.trim_start().starts_with("ignore = [") {
            inside = true;
            continue;
        }
        if inside {
            if line.trim() == "]" {
                inside = false;
            } else if let Some(rest) = line.split("id = \"").nth(1) {
                ids.extend(rest.split('"').next().map(str::to_string));
            }
            continue;
        }
        kept.push(line);
    }
    (ids, kept.join("\n"))
}

/// Shows that deny.toml rejects a GPL licence and a banned crate, accepts a clean crate, and
/// that each advisory exception is still needed.
fn self_test(root: &Path, bin: &Path) -> Result<()> {
    let config = root.join("deny.toml");
    let scratch = root.join("target/deny-self-test");
    let cases = [
        ("gpl", "gpl-dep", "GPL-3.0-only", Some("failed to satisfy license requirements")),
        ("banned", "openssl-sys", "MIT", Some("crate 'openssl-sys = 0.1.0' is explicitly banned")),
        ("clean", "mit-dep", "MIT", None),
    ];
    for (case, dep, licence, expected) in cases {
        let dir = scratch.join(case);
        fixture(&dir, dep, licence)?;
        let mut cmd = deny_command(bin, &dir, &config);
        cmd.args(["check", "licenses", "bans", "sources"]);
        let (ok, text) = output(cmd)?;
        match expected {
            Some(error) if ok || !text.contains(error) => {
                bail!(
                    "deny.toml's self-test: a {case} dependency ({dep}, {licence}) was not refused with {error:?}:\n{text}"
                )
            }
            None if !ok => bail!("deny.toml's self-test: a clean dependency ({dep}, {licence}) was refused:\n{text}"),
            _ => {}
        }
    }
    let (ids, stripped) = without_exceptions(&std::fs::read_to_string(&config)?);
    if ids.is_empty() {
        eprintln!("xtask: deny.toml lists no advisory exception: nothing to check them against");
    } else {
        let bare = scratch.join("deny-without-exceptions.toml");
        std::fs::write(&bare, stripped)?;
        let mut cmd = deny_command(bin, root, &bare);
        cmd.args(["check", "advisories"]);
        let (ok, text) = output(cmd)?;
        let missing: Vec<&String> = ids.iter().filter(|id| !text.contains(id.as_str())).collect();
        if ok || !missing.is_empty() {
            bail!(
                "deny.toml's self-test: without its exceptions, cargo deny did not report {missing:?} \
                 (the database was not read, or an exception is no longer needed: remove it):\n{text}"
            );
        }
    }
    eprintln!(
        "xtask: deny.toml refuses a GPL licence and a banned crate, passes a clean one, and each of its {} \
         advisory exception(s) is still needed",
        ids.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_count_days_from_the_epoch() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 8, 21), 20_686);
    }

    #[test]
    fn the_exceptions_are_read_from_deny_toml_and_taken_out() {
        let config = std::fs::read_to_string(run::workspace_root().unwrap().join("deny.toml")).unwrap();
        let (ids, stripped) = without_exceptions(&config);
        assert_eq!(ids, ["RUSTSEC-2024-0436"]);
        assert!(!stripped.contains("RUSTSEC-2024-0436") && !stripped.contains("ignore = ["));
        assert!(stripped.contains("unmaintained = \"all\"") && stripped.contains("[licenses]"));
    }
}
