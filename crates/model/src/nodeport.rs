//! Which node addresses accept NodePort traffic (`nodePortAddresses`, `--nodeport-addresses`).
//!
//! Upstream kube-proxy (kubernetes #138427, 2026; 1.37) accepts CIDRs and the keywords
//! `primary` (the node's primary IPs), `all` (the zero CIDRs) and `localhost` (the loopback
//! CIDRs, 127.0.0.0/8 and ::1/128) in any combination. Per family, NodePorts are then either on
//! *every* local address (`all`, a CIDR covering the whole family, or a list with no CIDR of
//! that family at all, as upstream's per-family `NewNodePortAddresses` falls back to the zero
//! CIDR: the table tests `fib daddr type local`, so an address added later gets NodePorts at
//! once) or on a list of addresses (the primary IPs and the node addresses inside the CIDRs:
//! the `nodeport-ips` set). Loopback is never in that list: localhost NodePorts are their own
//! rules ([`crate::ProxyConfig::localhost_nodeports`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use verdict_net::{Cidr, IpFamily};

/// Which node addresses accept NodePort traffic: the union of what the list names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePortAddresses {
    /// `primary`: the node's primary IPs (upstream's nftables default).
    pub primary: bool,
    /// `all`: every local address of the node, including those added later (the default of
    /// upstream's iptables and ipvs modes).
    pub all: bool,
    /// CIDRs, each once, in the order given; `localhost` stands for 127.0.0.0/8 and ::1/128.
    pub cidrs: Vec<Cidr>,
}

impl Default for NodePortAddresses {
    fn default() -> Self {
        NodePortAddresses::primary()
    }
}

/// Why a `--nodeport-addresses` list is refused; each names the item at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodePortAddressesError {
    /// Neither a CIDR nor a keyword.
    #[error("{0:?} is neither a CIDR nor one of the keywords `primary`, `all`, `localhost`")]
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
}

const PRIMARY: &str = "primary";
const ALL: &str = "all";
const LOCALHOST: &str = "localhost";
const KEYWORDS: [&str; 3] = [PRIMARY, ALL, LOCALHOST];

/// The loopback network of a family: what `localhost` stands for.
pub fn loopback_net(family: IpFamily) -> Cidr {
    match family {
        IpFamily::V4 => Cidr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8).expect("/8"),
        IpFamily::V6 => Cidr::host(IpAddr::V6(Ipv6Addr::LOCALHOST)),
    }
}

/// Whether two networks of one family share an address.
fn overlaps(a: &Cidr, b: &Cidr) -> bool {
    a.contains(&b.addr()) || b.contains(&a.addr())
}

/// Parses a `--nodeport-addresses` list (flag values or the configuration file's
/// `nodePortAddresses`). Items are trimmed and empty ones ignored; nothing left means `unset`,
/// the replaced mode's default (upstream: `primary` in nftables mode, every address in the
/// iptables and ipvs modes). Keywords combine with anything, as upstream allows; a CIDR listed
/// twice is accepted (upstream always did); a keyword listed twice is refused, as upstream's
/// validation does.
pub fn parse_nodeport_addresses(
    items: &[&str],
    unset: NodePortAddresses,
) -> Result<NodePortAddresses, NodePortAddressesError> {
    let mut seen: Vec<&'static str> = Vec::new();
    let mut out = NodePortAddresses { primary: false, all: false, cidrs: Vec::new() };
    let add = |cidrs: &mut Vec<Cidr>, cidr: Cidr| {
        if !cidrs.contains(&cidr) {
            cidrs.push(cidr);
        }
    };
    let mut any = false;
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        any = true;
        if let Some(keyword) = KEYWORDS.into_iter().find(|k| *k == item) {
            if seen.contains(&keyword) {
                return Err(NodePortAddressesError::DuplicateKeyword(keyword));
            }
            seen.push(keyword);
            match keyword {
                PRIMARY => out.primary = true,
                ALL => out.all = true,
                _ => IpFamily::ALL.into_iter().for_each(|f| add(&mut out.cidrs, loopback_net(f))),
            }
            continue;
        }
        if let Some(keyword) = KEYWORDS.into_iter().find(|k| item.eq_ignore_ascii_case(k)) {
            return Err(NodePortAddressesError::KeywordCase { item: item.to_string(), keyword });
        }
        let cidr = Cidr::parse_tolerant(item).ok_or_else(|| NodePortAddressesError::Invalid(item.to_string()))?;
        add(&mut out.cidrs, cidr);
    }
    Ok(if any { out } else { unset })
}

impl NodePortAddresses {
    /// `primary`.
    pub fn primary() -> NodePortAddresses {
        NodePortAddresses { primary: true, all: false, cidrs: Vec::new() }
    }

    /// `all`.
    pub fn all() -> NodePortAddresses {
        NodePortAddresses { primary: false, all: true, cidrs: Vec::new() }
    }

    /// These CIDRs alone.
    pub fn cidrs(cidrs: Vec<Cidr>) -> NodePortAddresses {
        NodePortAddresses { primary: false, all: false, cidrs }
    }

    /// Parses a list with nftables mode's default (`primary`): see [`parse_nodeport_addresses`].
    pub fn parse(items: &[&str]) -> Result<NodePortAddresses, NodePortAddressesError> {
        parse_nodeport_addresses(items, NodePortAddresses::primary())
    }

    fn cidrs_of(&self, family: IpFamily) -> impl Iterator<Item = &Cidr> {
        self.cidrs.iter().filter(move |c| c.family() == family)
    }

    /// Whether the selection depends on the addresses of the node's interfaces: CIDRs select
    /// among them in a family that does not take every address.
    pub fn reads_interfaces(&self) -> bool {
        IpFamily::ALL.into_iter().any(|f| !self.all_local(f) && self.cidrs_of(f).next().is_some())
    }

    /// Whether every local address of `family` accepts NodePorts (upstream's `MatchAll`,
    /// decided per family): `all`, a CIDR of prefix 0 of that family, or a list that names no
    /// CIDR of that family and not `primary` (upstream falls back to the family's zero CIDR;
    /// with `primary` verdict keeps the primary IP's family alone, see docs/semantics.md).
    pub fn all_local(&self, family: IpFamily) -> bool {
        self.all
            || self.cidrs_of(family).any(|c| c.prefix() == 0)
            || (!self.primary && self.cidrs_of(family).next().is_none())
    }

    /// Whether the selection takes the loopback addresses of `family` at all (upstream's
    /// iptables `ContainsIPv4Loopback`): every address, or a CIDR overlapping loopback.
    pub fn covers_loopback(&self, family: IpFamily) -> bool {
        self.all_local(family) || self.cidrs_of(family).any(|c| overlaps(c, &loopback_net(family)))
    }

    /// Whether the list names loopback of `family` explicitly: `localhost`, or a CIDR other than
    /// the zero one that overlaps loopback (`127.0.0.1/32`). Upstream's nftables mode serves
    /// localhost NodePorts only then; `all` is no request for them.
    pub fn names_loopback(&self, family: IpFamily) -> bool {
        self.cidrs_of(family).any(|c| c.prefix() > 0 && overlaps(c, &loopback_net(family)))
    }
}

#[cfg(test)]
mod tests;
