//! Which node addresses accept NodePort traffic (`nodePortAddresses`, `--nodeport-addresses`).
//!
//! Upstream kube-proxy (kubernetes #138427, 2026) accepts CIDRs and the keywords `primary` and
//! `all` in any combination. Per family, NodePorts are then either on *every* local address
//! (`all`, or a CIDR covering the whole family: the table tests `fib daddr type local`, so an
//! address added later gets NodePorts at once) or on a list of addresses (the primary IPs and
//! the node addresses inside the CIDRs: the `nodeport-ips` set).

use crate::net::{Cidr, IpFamily};

/// Which node addresses accept NodePort traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// The node's primary IPs (upstream's nftables default, `primary`).
    #[default]
    Primary,
    /// Every node address inside one of these networks.
    Cidrs(Vec<Cidr>),
    /// `primary` listed with CIDRs: the primary IPs and the node addresses inside the networks.
    PrimaryAndCidrs(Vec<Cidr>),
    /// `all`: every local address of the node, including those added later.
    All,
}

/// Why a `--nodeport-addresses` list is refused; each names the item at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodePortAddressesError {
    /// Neither a CIDR nor a keyword.
    #[error("{0:?} is neither a CIDR nor one of the keywords `primary`, `all`")]
    Invalid(String),
    /// A keyword in the wrong case: upstream's keywords are case-sensitive.
    #[error("{item:?} is not a keyword (keywords are lower case: did you mean `{keyword}`?)")]
    KeywordCase {
        /// The item as given.
        item: String,
        /// The keyword it resembles.
        keyword: &'static str,
    },
    /// A keyword listed twice (upstream's validation refuses duplicated keywords).
    #[error("the keyword `{0}` is listed more than once")]
    DuplicateKeyword(&'static str),
    /// Upstream's `localhost` keyword: NodePorts on loopback need a userspace proxy verdict
    /// does not have.
    #[error("`localhost` (NodePorts on loopback addresses) is not supported by verdict")]
    Localhost,
}

const PRIMARY: &str = "primary";
const ALL: &str = "all";

/// Parses a `--nodeport-addresses` list (flag values or the configuration file's
/// `nodePortAddresses`). Items are trimmed and empty ones ignored; nothing left means the
/// nftables default, `primary`. `all` may be combined with anything, as upstream allows, and
/// then covers the rest. A CIDR listed twice is accepted (upstream always did); a keyword listed
/// twice is refused, as upstream's validation does.
pub fn parse_nodeport_addresses(items: &[&str]) -> Result<NodePortAddresses, NodePortAddressesError> {
    let (mut primary, mut all) = (false, false);
    let mut cidrs: Vec<Cidr> = Vec::new();
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let seen = match item {
            PRIMARY => Some((&mut primary, PRIMARY)),
            ALL => Some((&mut all, ALL)),
            _ => None,
        };
        if let Some((flag, keyword)) = seen {
            if std::mem::replace(flag, true) {
                return Err(NodePortAddressesError::DuplicateKeyword(keyword));
            }
            continue;
        }
        if item.eq_ignore_ascii_case("localhost") {
            return Err(NodePortAddressesError::Localhost);
        }
        if let Some(keyword) = [PRIMARY, ALL].into_iter().find(|k| item.eq_ignore_ascii_case(k)) {
            return Err(NodePortAddressesError::KeywordCase { item: item.to_string(), keyword });
        }
        let cidr = Cidr::parse_tolerant(item).ok_or_else(|| NodePortAddressesError::Invalid(item.to_string()))?;
        if !cidrs.contains(&cidr) {
            cidrs.push(cidr);
        }
    }
    Ok(match (all, primary, cidrs.is_empty()) {
        (true, _, _) => NodePortAddresses::All,
        (false, _, true) => NodePortAddresses::Primary,
        (false, true, false) => NodePortAddresses::PrimaryAndCidrs(cidrs),
        (false, false, false) => NodePortAddresses::Cidrs(cidrs),
    })
}

impl NodePortAddresses {
    /// Parses a `--nodeport-addresses` list: see [`parse_nodeport_addresses`].
    pub fn parse(items: &[&str]) -> Result<NodePortAddresses, NodePortAddressesError> {
        parse_nodeport_addresses(items)
    }

    /// Whether the selection depends on the addresses of the node's interfaces (CIDRs select
    /// among them; `primary` and `all` do not need them).
    pub fn reads_interfaces(&self) -> bool {
        matches!(self, NodePortAddresses::Cidrs(_) | NodePortAddresses::PrimaryAndCidrs(_))
    }

    /// Whether every local address of `family` accepts NodePorts: `all`, or a CIDR of prefix 0
    /// of that family (upstream's `MatchAll`, decided per family).
    pub fn all_local(&self, family: IpFamily) -> bool {
        match self {
            NodePortAddresses::All => true,
            NodePortAddresses::Primary => false,
            NodePortAddresses::Cidrs(cidrs) | NodePortAddresses::PrimaryAndCidrs(cidrs) => {
                cidrs.iter().any(|c| c.family() == family && c.prefix() == 0)
            }
        }
    }
}

#[cfg(test)]
mod tests;
