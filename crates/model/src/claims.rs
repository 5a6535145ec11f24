//! Which Service port owns each address and NodePort, so that two Services never claim the
//! same traffic. Precedence follows trust: a ClusterIP (allocated and de-duplicated by the API
//! server) beats a load balancer IP (written by a controller through the status subresource),
//! which beats an externalIP (free text any user who may create a Service can write). Only
//! among claims of the same kind does (namespace, name, port, protocol) order decide. The
//! losers are left without the key and told why. Kept as an index, each contender filed under
//! its (kind, name), so that adding or removing one Service settles ownership without looking
//! at the others.

use crate::problem::{ObjectKind, ObjectRef, Problem};
use crate::types::{OutsideAccess, ServicePort, ServicePortName};
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use verdict_net::Protocol;

/// How much a claim is trusted: the lower, the stronger. A port that wants one key as two kinds
/// (its own ClusterIP listed as an externalIP) contends with the stronger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Rank {
    /// A ClusterIP, or a NodePort (allocated by the API server as well).
    Allocated,
    /// A load balancer ingress IP.
    LoadBalancer,
    /// An externalIP.
    External,
}

impl Rank {
    fn kind(self) -> &'static str {
        match self {
            Rank::Allocated => "clusterIP",
            Rank::LoadBalancer => "load balancer IP",
            Rank::External => "externalIP",
        }
    }
}

/// A claimable key: an address with protocol and port, or a NodePort.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Claim {
    Address(IpAddr, Protocol, u16),
    NodePort(Protocol, u16),
}

/// What a port claims, as built (before ownership is settled): all the cache keeps of a port
/// to settle ownership from. 88 bytes: the addresses of all three kinds in one slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortClaims {
    pub name: ServicePortName,
    pub port: u16,
    pub node_port: Option<u16>,
    /// The ClusterIPs, then the external IPs from `external_from`, then the load balancer IPs
    /// from `load_balancer_from`.
    addresses: Box<[IpAddr]>,
    external_from: u32,
    load_balancer_from: u32,
}

impl PortClaims {
    pub fn of(port: &ServicePort) -> PortClaims {
        let (cluster, external, lb) = (&port.cluster_ips, port.external_ips(), port.load_balancer_ips());
        // An object is at most a few megabytes: its addresses number far fewer than 2^32.
        let at = |n: usize| n as u32;
        PortClaims {
            name: port.name.clone(),
            port: port.port,
            node_port: port.node_port,
            addresses: cluster.iter().chain(external).chain(lb).copied().collect(),
            external_from: at(cluster.len()),
            load_balancer_from: at(cluster.len() + external.len()),
        }
    }

    fn cluster_ips(&self) -> &[IpAddr] {
        &self.addresses[..self.external_from as usize]
    }

    fn external_ips(&self) -> &[IpAddr] {
        &self.addresses[self.external_from as usize..self.load_balancer_from as usize]
    }

    fn load_balancer_ips(&self) -> &[IpAddr] {
        &self.addresses[self.load_balancer_from as usize..]
    }

    /// `settled` with these claims back (a rival that went away may give some back).
    pub fn restore(&self, settled: &ServicePort) -> ServicePort {
        let outside = OutsideAccess {
            external_ips: self.external_ips().to_vec(),
            load_balancer_ips: self.load_balancer_ips().to_vec(),
            source_ranges: settled.source_ranges().to_vec(),
            closed: settled.firewall_closed(),
        };
        ServicePort {
            cluster_ips: self.cluster_ips().into(),
            outside: outside.boxed(),
            node_port: self.node_port,
            ..settled.clone()
        }
    }

    /// The keys the port wants, each with the strongest rank it wants it as, sorted, without
    /// duplicates.
    fn wanted(&self) -> Vec<(Claim, Rank)> {
        let p = self.name.protocol;
        let mut out: Vec<(Claim, Rank)> = Vec::with_capacity(self.addresses.len() + 1);
        let ranked = |ips: &[IpAddr], rank: Rank| {
            ips.iter().map(move |ip| (Claim::Address(*ip, p, self.port), rank)).collect::<Vec<_>>()
        };
        out.extend(ranked(self.cluster_ips(), Rank::Allocated));
        out.extend(ranked(self.load_balancer_ips(), Rank::LoadBalancer));
        out.extend(ranked(self.external_ips(), Rank::External));
        if let Some(np) = self.node_port {
            out.push((Claim::NodePort(p, np), Rank::Allocated));
        }
        // Sorted by (key, rank): the first of each key is its strongest rank.
        out.sort_unstable();
        out.dedup_by(|later, first| later.0 == first.0);
        out
    }
}

/// Every claim and who wants it.
#[derive(Debug, Default)]
pub(crate) struct ClaimIndex {
    /// Looked up by key only, never walked in order: a hash map's entries cost less than a
    /// B-tree's half-filled nodes.
    contenders: HashMap<Claim, Contenders>,
}

/// A contender: its rank for the key, then its name, so that sorted contenders put the owner
/// first.
type Contender = (Rank, ServicePortName);

/// Who wants a key, sorted by (rank, name), without duplicates. Nearly every key has one
/// contender, held inline: a one-element vector beside it cost 64 bytes per Service.
#[derive(Debug)]
enum Contenders {
    One(Contender),
    Many(Vec<Contender>),
}

impl Contenders {
    fn all(&self) -> &[Contender] {
        match self {
            Contenders::One(c) => std::slice::from_ref(c),
            Contenders::Many(all) => all,
        }
    }

    fn insert(&mut self, c: Contender) {
        let Err(at) = self.all().binary_search(&c) else { return };
        let mut all = match std::mem::replace(self, Contenders::Many(Vec::new())) {
            Contenders::One(first) => vec![first],
            Contenders::Many(all) => all,
        };
        all.insert(at, c);
        *self = Contenders::Many(all);
    }

    /// Removes `c` (registered with the same rank it is withdrawn with); `false` when nobody
    /// is left.
    fn remove(&mut self, c: &Contender) -> bool {
        match self {
            Contenders::One(only) => only != c,
            Contenders::Many(all) => {
                if let Ok(at) = all.binary_search(c) {
                    all.remove(at);
                }
                if all.len() == 1 {
                    *self = Contenders::One(all.remove(0));
                }
                !self.all().is_empty()
            }
        }
    }
}

impl ClaimIndex {
    /// Registers `port`'s wishes.
    pub fn register(&mut self, port: &PortClaims) {
        for (c, rank) in port.wanted() {
            match self.contenders.get_mut(&c) {
                Some(all) => all.insert((rank, port.name.clone())),
                None => {
                    self.contenders.insert(c, Contenders::One((rank, port.name.clone())));
                }
            }
        }
    }

    /// Withdraws `port`'s wishes.
    pub fn unregister(&mut self, port: &PortClaims) {
        for (c, rank) in port.wanted() {
            if let Some(all) = self.contenders.get_mut(&c)
                && !all.remove(&(rank, port.name.clone()))
            {
                self.contenders.remove(&c);
            }
        }
    }

    /// Everybody else who wants one of `port`'s keys (whose ownership may change with it),
    /// added to `out`.
    pub fn rivals_into(&self, port: &PortClaims, out: &mut BTreeSet<ServicePortName>) {
        for (c, _) in port.wanted() {
            for (_, name) in self.contenders.get(&c).map_or(&[][..], Contenders::all) {
                if *name != port.name && !out.contains(name) {
                    out.insert(name.clone());
                }
            }
        }
    }

    fn owner(&self, c: &Claim) -> Option<&Contender> {
        self.contenders.get(c).and_then(|s| s.all().first())
    }

    /// `port` with the keys it does not own removed, and a problem for each.
    pub fn settle(&self, mut port: ServicePort) -> (ServicePort, Vec<Problem>) {
        let mut problems = Vec::new();
        let name = port.name.clone();
        let (p, number) = (port.protocol(), port.port);
        let mut lost = |what: String, as_its: &str, other: &ServicePortName| {
            let object = ObjectRef::new(ObjectKind::Service, &name.namespace, &name.name);
            problems.push(Problem::new(
                object,
                "AddressConflict",
                format!("{what} is already used by {other} (its {as_its}); left out of {name}"),
            ));
        };
        let mut keep = |ip: &IpAddr, kind: &str| match self.owner(&Claim::Address(*ip, p, number)) {
            Some(owner) if owner.1 != name => {
                lost(format!("{kind} {ip} {p}/{number}"), owner.0.kind(), &owner.1);
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
            && owner.1 != name
        {
            lost(format!("nodePort {p}/{np}"), "nodePort", &owner.1);
            port.node_port = None;
        }
        (port, problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_net::Protocol;

    /// Contenders added and withdrawn in any order are the sorted set of those still there,
    /// the first of which owns the key.
    #[test]
    fn contenders_are_the_sorted_set_of_those_left() {
        let names: Vec<ServicePortName> =
            ["c", "a", "d", "b"].iter().map(|n| ServicePortName::new("ns", n, "", Protocol::Tcp)).collect();
        // Each name always contends with the same rank, as a port registers and withdraws.
        let ranks = [Rank::External, Rank::Allocated, Rank::LoadBalancer, Rank::External];
        let mut seed = 3u64;
        let mut held: Option<Contenders> = None;
        let mut plain: BTreeSet<Contender> = BTreeSet::new();
        for _ in 0..2000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % names.len();
            let c = (ranks[i], names[i].clone());
            if (seed >> 20).is_multiple_of(2) {
                match held.as_mut() {
                    Some(all) => all.insert(c.clone()),
                    None => held = Some(Contenders::One(c.clone())),
                }
                plain.insert(c);
            } else {
                if let Some(all) = held.as_mut()
                    && !all.remove(&c)
                {
                    held = None;
                }
                plain.remove(&c);
            }
            let got = held.as_ref().map_or(&[][..], Contenders::all);
            assert_eq!(got, plain.iter().cloned().collect::<Vec<_>>().as_slice());
            assert!(!matches!(held, Some(Contenders::Many(ref v)) if v.len() < 2), "one contender is held inline");
        }
    }

    /// Each kind of address comes back as its own kind (an offset off by one moves an
    /// external IP among the load balancer IPs).
    #[test]
    fn claims_restore_each_kind_of_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut port = crate::ports::tests::port("web", 80);
        let outside = OutsideAccess {
            external_ips: vec![ip("192.0.2.1"), ip("192.0.2.2")],
            load_balancer_ips: vec![ip("198.51.100.1")],
            ..OutsideAccess::default()
        };
        std::sync::Arc::make_mut(&mut port).outside = outside.boxed();
        let claims = PortClaims::of(&port);
        let bare = ServicePort { cluster_ips: Box::default(), outside: None, ..(*port).clone() };
        let restored = claims.restore(&bare);
        assert_eq!(&*restored.cluster_ips, &[ip("10.96.0.1")]);
        assert_eq!(restored.external_ips(), &[ip("192.0.2.1"), ip("192.0.2.2")]);
        assert_eq!(restored.load_balancer_ips(), &[ip("198.51.100.1")]);
        assert_eq!(claims.wanted().len(), 4);
    }
}
