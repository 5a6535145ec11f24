//! Which UDP entries are stale: upstream kube-proxy's `conntrack.CleanStaleEntries` rule.

use crate::entry::{Entry, IPPROTO_UDP};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

#[cfg(test)]
mod tests;

/// One UDP Service port, as the cleanup sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpTarget {
    /// The addresses the port answers on: ClusterIPs, external IPs, load balancer IPs (either
    /// family; each is matched against entries of its own family). A port is programmed in the
    /// families it has a ClusterIP of, so these name its families too.
    pub addresses: Vec<IpAddr>,
    /// The Service port.
    pub port: u16,
    /// The NodePort, if the Service has one: matched on the node's addresses of the families
    /// of `addresses` only (a single-stack Service has no NodePort in the other family).
    pub node_port: Option<u16>,
    /// The IPs of the port's current *serving* endpoints (ready or not, terminating or not:
    /// like upstream, traffic policies and topology are not taken into account, so that a
    /// policy change does not break existing flows).
    pub serving_endpoints: Vec<IpAddr>,
}

/// The UDP entries that belong to one of `targets` but whose reply source is not one of that
/// target's serving endpoints.
///
/// An entry belongs to a target when
/// - its original destination is one of the target's `addresses` and its original destination
///   port is the target's `port`, or
/// - its original destination port is the target's `node_port` and its original destination
///   is one of `node_addresses` (the addresses on which this node accepts NodePort traffic) of
///   a family the target has an address of.
///
/// Like upstream kube-proxy:
/// - only UDP entries are ever selected (TCP and SCTP are never touched);
/// - a target without serving endpoints selects every entry to it: a one-way sender (statsd,
///   syslog) refreshes its `[UNREPLIED]` entry with every packet, so it would otherwise keep
///   being DNATed to the removed endpoint forever and never meet the reject rule (kubernetes
///   #139628, fixed upstream by #139629). A deleted Service port is a target without serving
///   endpoints too (kubernetes #141371);
/// - an entry that was never DNATed (reply source = the Service address, e.g. created while
///   the Service had no endpoints) is stale once the target has serving endpoints.
///
/// Where more than one target claims the same address and port (which Kubernetes does not
/// allow), an entry is kept if its reply source serves any of them.
///
/// Addresses are compared in canonical form (`::ffff:a.b.c.d` equals `a.b.c.d`).
pub fn stale_entries<'a>(entries: &'a [Entry], targets: &[UdpTarget], node_addresses: &[IpAddr]) -> Vec<&'a Entry> {
    let index = Index::new(targets, node_addresses);
    if index.is_empty() {
        return Vec::new();
    }
    entries.iter().filter(|e| index.is_stale(e)).collect()
}

/// The targets, indexed for one pass over a large table.
struct Index {
    /// The serving endpoints of each target (empty: every entry to it is stale).
    serving: Vec<HashSet<IpAddr>>,
    /// (service address, port) -> the targets (indices into `serving`) with that frontend.
    by_address: HashMap<(IpAddr, u16), Vec<usize>>,
    /// (node port, IPv6) -> the targets with that node port in that family.
    by_node_port: HashMap<(u16, bool), Vec<usize>>,
    node_addresses: HashSet<IpAddr>,
}

impl Index {
    fn new(targets: &[UdpTarget], node_addresses: &[IpAddr]) -> Index {
        let mut index = Index {
            serving: Vec::new(),
            by_address: HashMap::new(),
            by_node_port: HashMap::new(),
            node_addresses: node_addresses.iter().map(IpAddr::to_canonical).collect(),
        };
        for target in targets {
            let i = index.serving.len();
            index.serving.push(target.serving_endpoints.iter().map(IpAddr::to_canonical).collect());
            for address in &target.addresses {
                index.by_address.entry((address.to_canonical(), target.port)).or_default().push(i);
            }
            if let Some(node_port) = target.node_port.filter(|&p| p != 0) {
                for v6 in [false, true] {
                    if target.addresses.iter().any(|a| a.to_canonical().is_ipv6() == v6) {
                        index.by_node_port.entry((node_port, v6)).or_default().push(i);
                    }
                }
            }
        }
        index
    }

    fn is_empty(&self) -> bool {
        self.by_address.is_empty() && self.by_node_port.is_empty()
    }

    fn is_stale(&self, e: &Entry) -> bool {
        if e.protocol != IPPROTO_UDP {
            return false;
        }
        let dst = e.orig_dst.to_canonical();
        let reply_src = e.reply_src.to_canonical();
        // Stale for these targets unless one of them is served by the reply source.
        let stale_for = |targets: &Vec<usize>| !targets.iter().any(|&i| self.serving[i].contains(&reply_src));
        if self.by_address.get(&(dst, e.orig_dport)).is_some_and(stale_for) {
            return true;
        }
        self.node_addresses.contains(&dst)
            && self.by_node_port.get(&(e.orig_dport, dst.is_ipv6())).is_some_and(stale_for)
    }
}
