//! Building the model from a manifests directory.

use crate::config::RulesConfig;
use anyhow::{Context, Result};
use std::net::IpAddr;
use std::path::Path;
use verdict_model::{BuildOutput, Problem, build_model};

/// The model of a manifests directory, and every problem found (files and objects).
pub fn model_from_manifests(dir: &Path, cfg: &RulesConfig, local_addresses: &[IpAddr]) -> Result<BuildOutput> {
    let manifests = verdict_controller::manifests::load(dir).with_context(|| format!("reading {}", dir.display()))?;
    let node = manifests.node(&cfg.node_name);
    if node.is_none() {
        tracing::warn!(
            node = cfg.node_name,
            "no Node named {:?} in the manifests: NodePorts need its InternalIP (set --hostname-override)",
            cfg.node_name
        );
    }
    let mut config = cfg.proxy.clone();
    for object in &manifests.service_cidrs {
        config.service_cidrs.extend(object.cidrs.iter().filter_map(|c| verdict_model::Cidr::parse_tolerant(c)));
    }
    let mut out = build_model(config, &cfg.node_name, node, local_addresses, &manifests.services, &manifests.slices);
    let mut problems: Vec<Problem> = manifests.problems;
    problems.append(&mut out.problems);
    out.problems = problems;
    Ok(out)
}

/// Logs each problem as a warning: the object is left out, the rest is programmed.
pub fn report(problems: &[Problem]) {
    for p in problems {
        tracing::warn!("{p}; left out");
    }
}
