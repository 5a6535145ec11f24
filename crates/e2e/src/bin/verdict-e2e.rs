//! `verdict-e2e` (run through `cargo xtask e2e`): the two-node namespace cluster with a real
//! `verdict run` daemon per node watching the test API server, and the scenarios, with
//! progress as they go. Exit status 0 when every scenario passed.
//!
//! Usage: verdict-e2e --verdict PATH --echo PATH [--only TEXT]

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::time::Instant;
use verdict_e2e::cluster::{Binaries, NsCluster, scenarios};

fn main() -> Result<()> {
    let mut bins = Binaries { verdict: "verdict".into(), echo: "verdict-echo".into() };
    let mut only = None;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).cloned().context("a flag without a value")?;
        match pair[0].as_str() {
            "--verdict" => bins.verdict = PathBuf::from(value),
            "--echo" => bins.echo = PathBuf::from(value),
            "--only" => only = Some(value),
            other => bail!("unknown flag {other}; usage: verdict-e2e --verdict PATH --echo PATH [--only TEXT]"),
        }
    }
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the e2e cluster needs root: it creates network namespaces and programs nftables");
    }
    let started = Instant::now();
    println!("e2e: starting a two-node namespace cluster, the test API server and one verdict agent per node");
    let mut cluster = NsCluster::start("e2e", &bins)?;
    println!("e2e: cluster up in {:.1} s", started.elapsed().as_secs_f64());
    let n = scenarios::run(&mut cluster, only.as_deref())?;
    println!("e2e: all {n} scenarios passed in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
