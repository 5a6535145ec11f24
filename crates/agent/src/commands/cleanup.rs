//! `verdict cleanup`: remove verdict's table, and only it (the way back to kube-proxy must
//! never touch the rules of the kube-proxy it restores); and `kube-proxy --cleanup`, which
//! keeps upstream's meaning: every mode's proxy rules go.

use crate::cli::CleanupArgs;
use crate::config::parse_duration;
use anyhow::{Context, Result, anyhow, bail};
use std::time::Duration;
use verdict_controller::leftovers::remove_leftovers;
use verdict_nft::netlink::{Netlink, TableFamily};

/// `verdict cleanup`.
pub fn run(args: &CleanupArgs) -> Result<()> {
    crate::privileges::ensure_net_admin()?;
    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    let table = &args.table;
    if args.check {
        return match table_exists(&mut nl, table)? {
            false => Ok(()),
            true => bail!("table inet {table} exists"),
        };
    }
    if args.after_kube_proxy {
        let duration =
            |flag: &str, raw: &str| parse_duration(raw).ok_or_else(|| anyhow!("{flag} {raw:?} is not a duration"));
        let settle = duration("--settle", &args.settle)?;
        let timeout = args.timeout.as_deref().map(|t| duration("--timeout", t)).transpose()?;
        if table_exists(&mut nl, table)? {
            super::handback::wait_for_kube_proxy(&mut nl, table, settle, timeout)?;
        }
    }
    delete_table(&mut nl, table)?;
    if args.keep_running {
        tracing::info!("done; running until signalled");
        wait_for_signal()?;
    }
    Ok(())
}

/// `kube-proxy --cleanup` (`verdict run --cleanup`): verdict's table and kube-proxy's rules of
/// every mode, as upstream's cleanup removes every mode's.
pub fn remove_all(table: &str) -> Result<()> {
    crate::privileges::ensure_net_admin()?;
    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    delete_table(&mut nl, table)?;
    let report = remove_leftovers();
    super::leftovers::log_report(&report);
    if !report.failed.is_empty() {
        bail!("could not remove every leftover of kube-proxy: {}", report.failed.join("; "));
    }
    Ok(())
}

fn delete_table(nl: &mut Netlink, table: &str) -> Result<()> {
    if nl.delete_foreign_table(TableFamily::Inet, table).context("deleting the table")? {
        tracing::info!("deleted table inet {table}");
    } else {
        tracing::info!("table inet {table} does not exist");
    }
    Ok(())
}

/// Whether `inet <table>` exists.
pub fn table_exists(nl: &mut Netlink, table: &str) -> Result<bool> {
    let objects = nl.tables_and_chains().context("listing nftables tables")?;
    Ok(objects.iter().any(|o| o.family == TableFamily::Inet && o.table == table && o.chain.is_none()))
}

fn wait_for_signal() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(())
}

/// How often the rules are compared while waiting.
pub(super) const POLL: Duration = Duration::from_secs(1);
