//! Which Service port owns each address and NodePort, so that two Services never claim the
//! same traffic: among the ports that want a key, the first in (namespace, name, port,
//! protocol) order owns it; the others are left without it and told why. Kept as an index so
//! that adding or removing one Service settles ownership without looking at the others.

use crate::net::Protocol;
use crate::problem::{ObjectKind, ObjectRef, Problem};
use crate::types::{OutsideAccess, ServicePort, ServicePortName};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// A claimable key: an address with protocol and port, or a NodePort.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Claim {
    Address(IpAddr, Protocol, u16),
    NodePort(Protocol, u16),
}

/// What a port claims, as built (before ownership is settled): all the cache keeps of a port
/// to settle ownership from, a fifth of the size of the port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortClaims {
    pub name: ServicePortName,
    pub port: u16,
    pub cluster_ips: Box<[IpAddr]>,
    pub node_port: Option<u16>,
    pub external_ips: Box<[IpAddr]>,
    pub load_balancer_ips: Box<[IpAddr]>,
}

impl PortClaims {
    pub fn of(port: &ServicePort) -> PortClaims {
        PortClaims {
            name: port.name.clone(),
            port: port.port,
            cluster_ips: port.cluster_ips.clone(),
            node_port: port.node_port,
            external_ips: port.external_ips().into(),
            load_balancer_ips: port.load_balancer_ips().into(),
        }
    }

    /// `settled` with these claims back (a rival that went away may give some back).
    pub fn restore(&self, settled: &ServicePort) -> ServicePort {
        let outside = OutsideAccess {
            external_ips: self.external_ips.to_vec(),
            load_balancer_ips: self.load_balancer_ips.to_vec(),
            source_ranges: settled.source_ranges().to_vec(),
        };
        ServicePort {
            cluster_ips: self.cluster_ips.clone(),
            outside: outside.boxed(),
            node_port: self.node_port,
            ..settled.clone()
        }
    }

    /// The keys the port wants, sorted, without duplicates.
    fn wanted(&self) -> Vec<Claim> {
        let p = self.name.protocol;
        let mut out: Vec<Claim> =
            Vec::with_capacity(self.cluster_ips.len() + self.external_ips.len() + self.load_balancer_ips.len() + 1);
        out.extend(
            self.cluster_ips
                .iter()
                .chain(&self.external_ips)
                .chain(&self.load_balancer_ips)
                .map(|ip| Claim::Address(*ip, p, self.port)),
        );
        if let Some(np) = self.node_port {
            out.push(Claim::NodePort(p, np));
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Every claim and who wants it.
#[derive(Debug, Default)]
pub(crate) struct ClaimIndex {
    /// Sorted, without duplicates. Nearly every key has one contender: a one-element vector
    /// costs a tenth of a one-element `BTreeSet` (whose node has room for eleven).
    contenders: BTreeMap<Claim, Vec<ServicePortName>>,
}

impl ClaimIndex {
    /// Registers `port`'s wishes.
    pub fn register(&mut self, port: &PortClaims) {
        for c in port.wanted() {
            let names = self.contenders.entry(c).or_default();
            if let Err(at) = names.binary_search(&port.name) {
                names.insert(at, port.name.clone());
                names.shrink_to_fit();
            }
        }
    }

    /// Withdraws `port`'s wishes.
    pub fn unregister(&mut self, port: &PortClaims) {
        for c in port.wanted() {
            if let Some(set) = self.contenders.get_mut(&c) {
                if let Ok(at) = set.binary_search(&port.name) {
                    set.remove(at);
                }
                if set.is_empty() {
                    self.contenders.remove(&c);
                }
            }
        }
    }

    /// Everybody else who wants one of `port`'s keys (whose ownership may change with it),
    /// added to `out`.
    pub fn rivals_into(&self, port: &PortClaims, out: &mut BTreeSet<ServicePortName>) {
        for c in port.wanted() {
            for name in self.contenders.get(&c).into_iter().flatten() {
                if *name != port.name && !out.contains(name) {
                    out.insert(name.clone());
                }
            }
        }
    }

    fn owner(&self, c: &Claim) -> Option<&ServicePortName> {
        self.contenders.get(c).and_then(|s| s.first())
    }

    /// `port` with the keys it does not own removed, and a problem for each.
    pub fn settle(&self, mut port: ServicePort) -> (ServicePort, Vec<Problem>) {
        let mut problems = Vec::new();
        let name = port.name.clone();
        let (p, number) = (port.protocol(), port.port);
        let mut lost = |what: String, other: &ServicePortName| {
            let object = ObjectRef::new(ObjectKind::Service, &name.namespace, &name.name);
            problems.push(Problem::new(
                object,
                "AddressConflict",
                format!("{what} is already used by {other}; left out of {name}"),
            ));
        };
        let mut keep = |ip: &IpAddr, kind: &str| match self.owner(&Claim::Address(*ip, p, number)) {
            Some(owner) if *owner != name => {
                lost(format!("{kind} {ip} {p}/{number}"), owner);
                false
            }
            _ => true,
        };
        let mut cluster_ips = std::mem::take(&mut port.cluster_ips).into_vec();
        cluster_ips.retain(|ip| keep(ip, "clusterIP"));
        port.cluster_ips = cluster_ips.into();
        if let Some(mut outside) = port.outside.take() {
            outside.external_ips.retain(|ip| keep(ip, "externalIP"));
            outside.load_balancer_ips.retain(|ip| keep(ip, "load balancer IP"));
            port.outside = (*outside).boxed();
        }
        if let Some(np) = port.node_port
            && let Some(owner) = self.owner(&Claim::NodePort(p, np))
            && *owner != name
        {
            lost(format!("nodePort {p}/{np}"), owner);
            port.node_port = None;
        }
        (port, problems)
    }
}
