//! `verdict cleanup`: remove verdict's table.

use crate::cli::CleanupArgs;
use anyhow::{Context, Result};
use verdict_nft::netlink::Netlink;
use verdict_nft::transaction::{Op, Transaction};

/// Deletes the table if it exists.
pub fn run(args: &CleanupArgs) -> Result<()> {
    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    let exists = verdict_nft::observe::observe(&mut nl, &args.table).context("reading the table")?.is_some();
    if !exists {
        tracing::info!("table inet {} does not exist; nothing to clean up", args.table);
        return Ok(());
    }
    let mut tx = Transaction::new(&args.table);
    tx.ops.push(Op::DeleteTable);
    nl.commit(&tx).context("deleting the table")?;
    tracing::info!("deleted table inet {}", args.table);
    Ok(())
}
