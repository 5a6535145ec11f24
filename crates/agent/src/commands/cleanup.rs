//! `verdict cleanup`: remove verdict's table, and what upstream kube-proxy left behind.

use crate::cli::CleanupArgs;
use anyhow::{Context, Result, bail};
use verdict_controller::leftovers::{LeftoverReport, remove_leftovers};
use verdict_nft::netlink::{Netlink, TableFamily};

/// `verdict cleanup`.
pub fn run(args: &CleanupArgs) -> Result<()> {
    remove(&args.table)
}

/// Deletes verdict's table and kube-proxy's leftovers (as `kube-proxy --cleanup` does).
pub fn remove(table: &str) -> Result<()> {
    crate::privileges::ensure_net_admin()?;
    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    if nl.delete_foreign_table(TableFamily::Inet, table).context("deleting the table")? {
        tracing::info!("deleted table inet {table}");
    } else {
        tracing::info!("table inet {table} does not exist");
    }
    let report = remove_leftovers();
    log_leftovers(&report);
    if !report.failed.is_empty() {
        bail!("could not remove every leftover of kube-proxy: {}", report.failed.join("; "));
    }
    Ok(())
}

/// Logs what leftover removal did.
pub fn log_leftovers(report: &LeftoverReport) {
    for line in &report.removed {
        tracing::info!("removed kube-proxy leftover: {line}");
    }
    for line in &report.failed {
        tracing::warn!("could not remove kube-proxy leftover: {line}");
    }
}
