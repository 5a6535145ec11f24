//! Validated configuration: everything the user can get wrong is caught here, before any
//! socket is opened, and reported in one line.

use crate::cli::RulesArgs;
use verdict_model::{Cidr, NodePortAddresses, ProxyConfig};

/// Invalid configuration (exit code 64).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Settings that shape the rules, validated.
#[derive(Clone, Debug)]
pub struct RulesConfig {
    /// This node's name.
    pub node_name: String,
    /// The model's configuration.
    pub proxy: ProxyConfig,
    /// The table name.
    pub table: String,
}

fn bad(msg: String) -> ConfigError {
    ConfigError(msg)
}

impl RulesConfig {
    /// Validates the rule flags.
    pub fn from_args(args: &RulesArgs) -> Result<RulesConfig, ConfigError> {
        let node_name = match &args.hostname_override {
            Some(n) if n.trim().is_empty() => return Err(bad("--hostname-override must not be empty".into())),
            Some(n) => n.trim().to_lowercase(),
            None => nix::unistd::gethostname()
                .map_err(|e| bad(format!("cannot read the host name ({e}); set --hostname-override")))?
                .to_string_lossy()
                .trim()
                .to_lowercase(),
        };
        let mut cluster_cidrs: Vec<Cidr> = Vec::new();
        for raw in args.cluster_cidr.iter().filter(|s| !s.trim().is_empty()) {
            let cidr = Cidr::parse_tolerant(raw).ok_or_else(|| bad(format!("--cluster-cidr {raw:?} is not a CIDR")))?;
            if cluster_cidrs.iter().any(|c| c.family() == cidr.family()) {
                return Err(bad(format!("--cluster-cidr has more than one {} network", cidr.family())));
            }
            cluster_cidrs.push(cidr);
        }
        let nodeport_addresses = match args
            .nodeport_addresses
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .as_slice()
        {
            [] | ["primary"] => NodePortAddresses::Primary,
            list => {
                let mut cidrs = Vec::new();
                for raw in list {
                    if *raw == "primary" {
                        return Err(bad("--nodeport-addresses: `primary` cannot be combined with CIDRs".into()));
                    }
                    cidrs.push(
                        Cidr::parse_tolerant(raw)
                            .ok_or_else(|| bad(format!("--nodeport-addresses {raw:?} is not a CIDR")))?,
                    );
                }
                NodePortAddresses::Cidrs(cidrs)
            }
        };
        if args.masquerade_bit > 31 {
            return Err(bad(format!("--masquerade-bit {} is not a bit of a 32-bit mark (0-31)", args.masquerade_bit)));
        }
        let table = args.table.trim().to_string();
        if table.is_empty()
            || table.len() > 200
            || !table.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(format!("--table {:?} is not a valid nftables table name", args.table)));
        }
        Ok(RulesConfig {
            node_name,
            proxy: ProxyConfig {
                cluster_cidrs,
                nodeport_addresses,
                masquerade_all: args.masquerade_all,
                masquerade_bit: args.masquerade_bit,
                ..ProxyConfig::default()
            },
            table,
        })
    }
}
