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
    let status = cargo_command()?.args(args).envs(envs.iter().copied()).status()?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// `cargo` in the workspace root, without the variables `cargo run` set for xtask itself. Some
/// build scripts (ring's) rerun when `CARGO_PKG_NAME` or `CARGO_MANIFEST_DIR` differ from the
/// last build's, so with xtask's values every build under xtask recompiled ring and everything
/// above it, and the next plain `cargo` did it again.
pub fn cargo_command() -> Result<Command> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || ["CARGO_CRATE_NAME", "CARGO_BIN_NAME", "CARGO_PRIMARY_PACKAGE"].contains(&name.as_ref())
        {
            cargo.env_remove(name.as_ref());
        }
    }
    cargo.current_dir(workspace_root()?);
    Ok(cargo)
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
