//! The model as a whole ([`ProxyModel`]): the node's facts, the configuration and every
//! Service port, with the questions the renderer asks of all three together.
//!
//! It sits above `types` (one port, one endpoint, the configuration), `ports` (the ports in
//! name order) and `nodeport` (which addresses take NodePorts), which import nothing back.

use crate::ports::ServicePorts;
use crate::types::{DetectLocal, NodeFacts, PodMatch, ProxyConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use verdict_net::{Cidr, IpFamily};

/// Everything the nftables side needs to program one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProxyModel {
    /// Facts about the node being programmed.
    pub node: NodeFacts,
    /// Configuration that shapes the rules.
    pub config: ProxyConfig,
    /// One entry per (namespace, Service, port name, protocol). Shared with the changes a
    /// rebuild reports ([`crate::PortChange`]), which at a cold start are every port: a copy
    /// of each was a fifth of the agent's peak.
    pub services: ServicePorts,
    /// The networks ClusterIPs are allocated from (`--service-cluster-ip-range` and
    /// networking.k8s.io/v1 ServiceCIDR objects): traffic to an unallocated address in them is
    /// dropped.
    pub service_cidrs: Vec<Cidr>,
}

impl ProxyModel {
    /// The families this node programs: every family its kernel supports
    /// ([`ProxyConfig::families`]), as upstream runs dual-stack whenever the platform allows it,
    /// whatever addresses the Node object lists. The node's addresses decide only NodePorts
    /// (see [`ProxyModel::families_without_nodeports`]).
    pub fn families(&self) -> Vec<IpFamily> {
        let mut families = self.config.families.clone();
        families.sort();
        families.dedup();
        if families.is_empty() { IpFamily::ALL.to_vec() } else { families }
    }

    /// The cluster CIDR of a family.
    pub fn cluster_cidr(&self, family: IpFamily) -> Option<Cidr> {
        self.config.cluster_cidrs.iter().find(|c| c.family() == family).copied()
    }

    /// How traffic from pods is recognised for a family (`None`: it is not, and neither
    /// off-cluster masquerading nor the pod short-circuit of Local policies apply).
    pub fn pod_match(&self, family: IpFamily) -> Option<PodMatch> {
        match &self.config.detect_local {
            DetectLocal::ClusterCidr => self.cluster_cidr(family).map(PodMatch::Cidr),
            DetectLocal::NodeCidr => {
                self.node.pod_cidrs.iter().find(|c| c.family() == family).copied().map(PodMatch::Cidr)
            }
            DetectLocal::BridgeInterface(name) => Some(PodMatch::Interface(name.clone())),
            DetectLocal::InterfaceNamePrefix(prefix) => Some(PodMatch::InterfacePrefix(prefix.clone())),
            DetectLocal::None => None,
        }
    }

    /// Service ports whose Local policy finds no local endpoint while endpoints exist elsewhere
    /// (upstream's `sync_proxy_rules_no_local_endpoints_total`): (internal, external).
    pub fn no_local_endpoints(&self) -> (usize, usize) {
        let mut internal = 0;
        let mut external = 0;
        for port in self.services.values() {
            let without_local = [&port.v4, &port.v6].iter().any(|s| s.has_any && s.local.is_empty());
            if port.internal_policy_local && without_local {
                internal += 1;
            }
            if port.external_policy_local && port.externally_accessible() && without_local {
                external += 1;
            }
        }
        (internal, external)
    }
}

/// NodePorts: which addresses and families take them.
impl ProxyModel {
    /// The programmed families in which every local address accepts NodePort traffic: the
    /// table matches them with `fib daddr type local` instead of the `nodeport-ips` set.
    pub fn nodeport_all_local_families(&self) -> Vec<IpFamily> {
        self.families().into_iter().filter(|f| self.config.nodeport_addresses.all_local(*f)).collect()
    }

    /// The programmed families in which no node address accepts NodePort traffic (with
    /// `--nodeport-addresses primary`: the Node lists no address of that family). Their
    /// Services get ClusterIPs, external and load balancer IPs, but no NodePorts, as upstream.
    /// IPv4 with localhost NodePorts still has 127.0.0.0/8.
    pub fn families_without_nodeports(&self) -> Vec<IpFamily> {
        let nodeport_ips = self.nodeport_ips();
        let all_local = self.nodeport_all_local_families();
        self.families()
            .into_iter()
            .filter(|f| !all_local.contains(f) && !nodeport_ips.iter().any(|ip| IpFamily::of(ip) == *f))
            .filter(|f| !(*f == IpFamily::V4 && self.config.localhost_nodeports))
            .collect()
    }

    /// The node addresses that accept NodePort traffic (the `nodeport-ips` elements), in
    /// order, in the families that do not accept it on every local address (those are in
    /// [`ProxyModel::nodeport_all_local_families`] and have no list).
    pub fn nodeport_ips(&self) -> Vec<IpAddr> {
        let npa = &self.config.nodeport_addresses;
        let primary = if npa.primary { self.node.primary_ips.as_slice() } else { &[] };
        // Loopback is never a list element: localhost NodePorts have rules of their own
        // (`ProxyConfig::localhost_nodeports`), reached only by the node's own connections.
        let in_cidrs =
            self.node.addresses.iter().filter(|ip| !ip.is_loopback() && npa.cidrs.iter().any(|c| c.contains(ip)));
        let mut ips: Vec<IpAddr> =
            primary.iter().chain(in_cidrs).filter(|ip| !npa.all_local(IpFamily::of(ip))).copied().collect();
        ips.sort();
        ips.dedup();
        ips
    }

    /// Where NodePort-related listeners (healthCheckNodePorts) bind: the NodePort addresses,
    /// and the unspecified address of each family that accepts NodePorts on every address.
    pub fn nodeport_listen_addresses(&self) -> Vec<IpAddr> {
        let mut ips = self.nodeport_ips();
        ips.extend(self.nodeport_all_local_families().into_iter().map(|f| match f {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }));
        ips
    }
}
