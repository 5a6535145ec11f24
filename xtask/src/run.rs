//! Running commands, failing loudly.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (xtask lives in `<root>/xtask`).
pub fn workspace_root() -> Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    Ok(dir.parent().context("xtask has no parent directory")?.to_path_buf())
}

/// Where `cargo build --release` puts binaries: under `CARGO_TARGET_DIR` when it is set
/// (a relative one is taken from the workspace root, where xtask runs cargo), else `target/release`.
pub fn release_dir() -> Result<PathBuf> {
    let root = workspace_root()?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    Ok(target.join("release"))
}

/// A binary built by `cargo build --release`, as a string for argument lists.
pub fn release_bin(name: &str) -> Result<String> {
    Ok(release_dir()?.join(name).display().to_string())
}

/// Runs `cargo <args>` in the workspace root.
pub fn cargo(args: &[&str]) -> Result<()> {
    cargo_env(args, &[])
}

/// Runs `cargo <args>` with extra environment.
pub fn cargo_env(args: &[&str], envs: &[(&str, &str)]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo).args(args).envs(envs.iter().copied()).current_dir(workspace_root()?).status()?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Runs a program.
pub fn program(path: &Path, args: &[String], envs: &[(&str, &str)]) -> Result<()> {
    let status = Command::new(path)
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("starting {}", path.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", path.display());
    }
    Ok(())
}

/// Runs a program found on PATH.
pub fn program_env(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Result<()> {
    let status = Command::new(name)
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("starting {name}"))?;
    if !status.success() {
        bail!("`{name} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}
