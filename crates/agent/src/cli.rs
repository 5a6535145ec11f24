//! What the user typed. Validation into an [`crate::config::Config`] happens in `config`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// verdict: an nftables-native Kubernetes Service proxy.
#[derive(Debug, Parser)]
#[command(name = "verdict", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Program the node's nftables table from the cluster (or a manifests directory).
    Run(RunArgs),
    /// Print the nft text of the table that would be programmed (no root, no kernel).
    Render(RenderArgs),
    /// Delete verdict's table.
    Cleanup(CleanupArgs),
}

/// Flags that shape the rules, shared by `run` and `render` (kube-proxy's names).
#[derive(Debug, Clone, Args)]
pub struct RulesArgs {
    /// The name of this node (default: the host name).
    #[arg(long, value_name = "NODE")]
    pub hostname_override: Option<String>,
    /// The pod network(s), at most one per family; traffic to a ClusterIP from outside it is
    /// masqueraded. Comma-separated or repeated.
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    pub cluster_cidr: Vec<String>,
    /// Which node addresses accept NodePort traffic: `primary` (the default: the Node's
    /// InternalIPs) or a comma-separated list of CIDRs.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub nodeport_addresses: Vec<String>,
    /// Masquerade all traffic sent to ClusterIPs.
    #[arg(long)]
    pub masquerade_all: bool,
    /// The packet-mark bit (0-31) that asks for masquerading.
    #[arg(long, value_name = "BIT", default_value_t = 14)]
    pub masquerade_bit: u8,
    /// The nftables table (family inet) verdict owns.
    #[arg(long, value_name = "NAME", default_value = verdict_nft::ruleset::DEFAULT_TABLE)]
    pub table: String,
}

/// `verdict run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Read Services, EndpointSlices and Nodes from YAML files in this directory instead of an
    /// API server.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Program the table once and exit: 0 on success, non-zero with the reason on failure.
    #[arg(long)]
    pub once: bool,
    /// Rule flags.
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// `verdict render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The manifests directory.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    /// Rule flags.
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// `verdict cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// The nftables table (family inet) to delete.
    #[arg(long, value_name = "NAME", default_value = verdict_nft::ruleset::DEFAULT_TABLE)]
    pub table: String,
}
