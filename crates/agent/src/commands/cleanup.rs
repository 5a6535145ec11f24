//! `verdict cleanup`: remove verdict's table.

use crate::cli::CleanupArgs;
use anyhow::{Context, Result};
use verdict_nft::netlink::Netlink;
use verdict_nft::transaction::{Op, Transaction};

/// `verdict cleanup`.
pub fn run(args: &CleanupArgs) -> Result<()> {
    remove(&args.table)
}

/// Deletes the table if it exists.
pub fn remove(table: &str) -> Result<()> {
    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    let exists = verdict_nft::observe::observe(&mut nl, table).context("reading the table")?.is_some();
    if !exists {
        tracing::info!("table inet {table} does not exist; nothing to clean up");
        return Ok(());
    }
    let mut tx = Transaction::new(table);
    tx.ops.push(Op::DeleteTable);
    nl.commit(&tx).context("deleting the table")?;
    tracing::info!("deleted table inet {table}");
    Ok(())
}
