//! `verdict run`: program the table.

use crate::cli::RunArgs;
use crate::config::RulesConfig;
use crate::source;
use anyhow::{Context, Result, bail};
use std::time::Instant;
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;
use verdict_nft::{RenderOptions, diff, render};

/// Runs one sync from a manifests directory: read the kernel, diff, commit.
pub fn run(args: &RunArgs, cfg: &RulesConfig) -> Result<()> {
    let Some(dir) = &args.manifests else {
        bail!("watching an API server is not available in this build; use --manifests DIR");
    };
    if !args.once {
        bail!("daemon mode is not available in this build; use --once");
    }
    let started = Instant::now();
    let built = source::model_from_manifests(dir, cfg, &source::local_addresses())?;
    source::report(&built.problems);
    let desired = render(&built.model, &RenderOptions { table: cfg.table.clone() });
    let mut nl = Netlink::open().context("opening netlink (verdict needs CAP_NET_ADMIN)")?;
    let current = observe(&mut nl, &cfg.table).context("reading the current table")?;
    if let Some(o) = &current {
        for f in &o.foreign {
            tracing::warn!("replacing an object verdict did not write: {f}");
        }
    }
    let plan = diff(current.as_ref().map(|o| &o.ruleset), &desired);
    let stats = nl.commit(&plan.transaction).context("programming nftables")?;
    tracing::info!(
        services = built.model.services.len(),
        problems = built.problems.len(),
        operations = plan.transaction.object_count(),
        bytes = stats.bytes,
        kernel_ms = stats.kernel_us as f64 / 1000.0,
        total_ms = started.elapsed().as_secs_f64() * 1000.0,
        "table {} programmed",
        cfg.table
    );
    Ok(())
}
