//! The model kept up to date object by object, for the agent's sync loop: a changed Service or
//! EndpointSlice rebuilds only the Service it belongs to, and [`ModelCache::rebuild`] says
//! which Service ports changed (old and new), which is all the nftables side needs.

use crate::build::{build_service, node_facts, select_endpoints};
use crate::claims::{ClaimIndex, PortClaims};
use crate::names::{ServiceNames, Spellings};
use crate::packed::{PackedService, PackedSlice};
use crate::problem::Problem;
use crate::proxy_model::ProxyModel;
use crate::slices::{Interner, StoredSlice, StoredSliceRef};
use crate::source;
use crate::types::{ProxyConfig, ServicePort, ServicePortName};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

/// (namespace, name), spelled once: see [`crate::names`].
type Key = (Arc<str>, Arc<str>);

/// One Service port that changed: what it was and what it is (`None`: absent).
#[derive(Clone, Debug, PartialEq)]
pub struct PortChange {
    /// The port.
    pub name: ServicePortName,
    /// Before.
    pub old: Option<Arc<ServicePort>>,
    /// After (the model's own).
    pub new: Option<Arc<ServicePort>>,
}

/// What [`ModelCache::rebuild`] found.
#[derive(Clone, Debug, Default)]
pub struct Rebuilt {
    /// The node's facts changed (addresses, zone, families): everything must be re-rendered.
    pub facts_changed: bool,
    /// Ports that changed.
    pub changes: Vec<PortChange>,
}

/// Source objects, and the model built from them.
#[derive(Debug)]
pub struct ModelCache {
    node_name: String,
    node: Option<source::Node>,
    local_addresses: Vec<IpAddr>,
    model: ProxyModel,
    node_problems: Vec<Problem>,
    /// Per Service name: see [`Entry`].
    entries: BTreeMap<Key, Entry>,
    /// Packed (see [`PackedSlice`]).
    slices: BTreeMap<Key, PackedSlice>,
    node_names: Interner,
    spellings: Spellings,
    problems: BTreeMap<Key, Vec<Problem>>,
    claim_problems: BTreeMap<ServicePortName, Vec<Problem>>,
    claims: ClaimIndex,
    dirty: BTreeSet<Key>,
    /// Dirty Services a [`ModelCache::rebuild_ahead`] left for later: they had no slice yet.
    waiting: BTreeSet<Key>,
    facts_dirty: bool,
    service_cidr_objects: BTreeMap<String, Vec<crate::Cidr>>,
}

/// A key to look up with.
/// What the cache holds under one Service's name. One entry rather than a map for each part:
/// at 100k Services the entries of three maps cost 300 bytes per Service.
#[derive(Debug, Default)]
struct Entry {
    /// The Service, encoded (see [`PackedService`]); `None` while only its slices are known.
    service: Option<PackedService>,
    /// The names of its slices, sorted (a one-element `BTreeSet` took 300 bytes), shared
    /// with the keys of `slices`. Exactly as long as it must be: a vector grown by one push
    /// kept room for four.
    slices: Box<[Arc<str>]>,
    /// Each built port's claims as built, before conflicts took any away: what ownership is
    /// settled from. The endpoints are not kept here (the full port lives once, in the
    /// model): a second copy of every port's endpoints and their selection cost 7% of the
    /// agent's settled memory at 10k Services x 10 endpoints.
    claims: Box<[PortClaims]>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.service.is_none() && self.slices.is_empty() && self.claims.is_empty()
    }
}

fn key(ns: &str, name: &str) -> Key {
    (Arc::from(ns), Arc::from(name))
}

impl ModelCache {
    /// An empty cache for node `node_name`.
    pub fn new(config: ProxyConfig, node_name: &str) -> ModelCache {
        ModelCache {
            node_name: node_name.to_string(),
            node: None,
            local_addresses: Vec::new(),
            model: ProxyModel { config, ..ProxyModel::default() },
            node_problems: Vec::new(),
            entries: BTreeMap::new(),
            slices: BTreeMap::new(),
            node_names: Interner::default(),
            spellings: Spellings::default(),
            problems: BTreeMap::new(),
            claim_problems: BTreeMap::new(),
            claims: ClaimIndex::default(),
            dirty: BTreeSet::new(),
            waiting: BTreeSet::new(),
            facts_dirty: true,
            service_cidr_objects: BTreeMap::new(),
        }
    }

    /// Adds or replaces a ServiceCIDR object. Unparsable CIDRs in it are skipped without a
    /// problem: the model has no ServiceCIDR object kind to name in one (a known gap).
    pub fn upsert_service_cidr(&mut self, object: source::ServiceCidr) {
        let cidrs: Vec<crate::Cidr> = object.cidrs.iter().filter_map(|c| crate::Cidr::parse_tolerant(c)).collect();
        if self.service_cidr_objects.get(&object.name) != Some(&cidrs) {
            self.service_cidr_objects.insert(object.name, cidrs);
            self.facts_dirty = true;
        }
    }

    /// Removes a ServiceCIDR object.
    pub fn remove_service_cidr(&mut self, name: &str) {
        if self.service_cidr_objects.remove(name).is_some() {
            self.facts_dirty = true;
        }
    }

    /// The Services held, as (namespace, name): what a relist compares its objects with.
    pub fn service_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().filter(|(_, e)| e.service.is_some()).map(|((ns, name), _)| (&**ns, &**name))
    }

    /// The EndpointSlices held, as (namespace, name).
    pub fn slice_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.slices.keys().map(|(ns, name)| (&**ns, &**name))
    }

    /// The ServiceCIDR objects held.
    pub fn service_cidr_names(&self) -> impl Iterator<Item = &str> {
        self.service_cidr_objects.keys().map(String::as_str)
    }

    /// The Node held, if any.
    pub fn node_name(&self) -> Option<&str> {
        self.node.as_ref().map(|n| n.name.as_str())
    }

    /// The model as of the last [`ModelCache::rebuild`].
    pub fn model(&self) -> &ProxyModel {
        &self.model
    }

    /// The Node object of this node (`None`: deleted or not seen yet).
    pub fn set_node(&mut self, node: Option<source::Node>) {
        if self.node != node {
            self.node = node;
            self.facts_dirty = true;
        }
    }

    /// The addresses of the node's interfaces.
    pub fn set_local_addresses(&mut self, mut addresses: Vec<IpAddr>) {
        addresses.sort();
        addresses.dedup();
        if self.local_addresses != addresses {
            self.local_addresses = addresses;
            self.facts_dirty = true;
        }
    }

    /// Adds or replaces a Service.
    pub fn upsert_service(&mut self, svc: source::Service) {
        let packed = PackedService::new(&svc);
        let k = self.shared_key(&svc.namespace, &svc.name);
        let entry = self.entries.entry(k.clone()).or_default();
        if entry.service.as_ref() != Some(&packed) {
            entry.service = Some(packed);
            self.dirty.insert(k);
        }
    }

    /// Removes a Service.
    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        let k = key(namespace, name);
        // The entry goes at the next rebuild, once its claims are released.
        if self.entries.get_mut(&k).and_then(|e| e.service.take()).is_some() {
            self.dirty.insert(k);
        }
    }

    /// Adds or replaces an EndpointSlice.
    pub fn upsert_slice(&mut self, slice: source::EndpointSlice) {
        let stored = PackedSlice::new(&StoredSlice::new(&slice, &mut self.node_names), &self.node_names);
        let k: Key = (self.spellings.get(&slice.namespace), Arc::from(slice.name));
        if self.slices.get(&k) == Some(&stored) {
            return;
        }
        self.remove_slice(&k.0, &k.1);
        let owner = self.shared_key(&k.0, stored.service_name());
        let names = &mut self.entries.entry(owner.clone()).or_default().slices;
        if let Err(at) = names.binary_search_by(|n| (**n).cmp(&*k.1)) {
            let mut grown = std::mem::take(names).into_vec();
            grown.insert(at, k.1.clone());
            *names = grown.into();
        }
        self.dirty.insert(owner);
        self.slices.insert(k, stored);
    }

    /// Removes an EndpointSlice.
    pub fn remove_slice(&mut self, namespace: &str, name: &str) {
        if let Some(old) = self.slices.remove(&key(namespace, name)) {
            let owner = key(namespace, old.service_name());
            if let Some(entry) = self.entries.get_mut(&owner)
                && entry.slices.iter().any(|n| **n == *name)
            {
                entry.slices = entry.slices.iter().filter(|n| ***n != *name).cloned().collect();
            }
            self.dirty.insert(owner);
        }
    }

    /// The key of a Service, sharing the spelling of any key it already has.
    fn shared_key(&mut self, namespace: &str, name: &str) -> Key {
        let probe: Key = (self.spellings.get(namespace), Arc::from(name));
        match self.entries.get_key_value(&probe) {
            Some((k, _)) => k.clone(),
            None => probe,
        }
    }

    /// Whether anything changed since the last rebuild (a [`ModelCache::rebuild_ahead`]
    /// leaves Services without slices for the next [`ModelCache::rebuild`]).
    pub fn is_dirty(&self) -> bool {
        self.facts_dirty || !self.dirty.is_empty() || !self.waiting.is_empty()
    }

    /// Rebuilds what changed.
    pub fn rebuild(&mut self) -> Rebuilt {
        self.rebuild_with(false)
    }

    /// Rebuilds what changed, but Services that have no EndpointSlice yet: while the lists
    /// arrive, a Service built before its slices is built again when they come. They stay
    /// dirty for a later rebuild.
    pub fn rebuild_ahead(&mut self) -> Rebuilt {
        self.rebuild_with(true)
    }

    fn rebuild_with(&mut self, postpone_sliceless: bool) -> Rebuilt {
        let mut out = Rebuilt::default();
        if self.facts_dirty {
            self.facts_dirty = false;
            self.node_problems.clear();
            let facts = node_facts(&self.node_name, self.node.as_ref(), &self.local_addresses, &mut self.node_problems);
            let mut cidrs: Vec<crate::Cidr> = self
                .model
                .config
                .service_cidrs
                .iter()
                .chain(self.service_cidr_objects.values().flatten())
                .copied()
                .collect();
            cidrs.sort();
            cidrs.dedup();
            if cidrs != self.model.service_cidrs {
                self.model.service_cidrs = cidrs;
                out.facts_changed = true;
            }
            if facts != self.model.node {
                self.model.node = facts;
                out.facts_changed = true;
                self.dirty.extend(self.entries.keys().cloned());
            }
        }
        let families = self.model.families();
        // Ports whose ownership of an address may have changed, or that are gone.
        let mut affected: BTreeSet<ServicePortName> = BTreeSet::new();
        let mut fresh: Vec<ServicePort> = Vec::new();
        if !postpone_sliceless {
            self.dirty.append(&mut self.waiting);
        }
        for k in std::mem::take(&mut self.dirty) {
            if postpone_sliceless
                && self
                    .entries
                    .get(&k)
                    .is_some_and(|e| e.service.is_some() && e.slices.is_empty() && e.claims.is_empty())
            {
                self.waiting.insert(k);
                continue;
            }
            self.waiting.remove(&k);
            self.problems.remove(&k);
            let Some(entry) = self.entries.get_mut(&k) else { continue };
            for old in std::mem::take(&mut entry.claims).into_vec() {
                self.claims.rivals_into(&old, &mut affected);
                affected.insert(old.name.clone());
                self.claims.unregister(&old);
            }
            let Some(svc) = entry.service.as_ref().map(PackedService::record) else {
                if entry.is_empty() {
                    self.entries.remove(&k);
                }
                continue;
            };
            let found = |n: &Arc<str>| self.slices.get(&(k.0.clone(), n.clone())).map(|s| s.unpack(&self.node_names));
            let unpacked: Vec<(&str, StoredSlice)> =
                entry.slices.iter().filter_map(|n| Some((&**n, found(n)?))).collect();
            let slices: Vec<StoredSliceRef<'_>> = unpacked.iter().map(|(n, s)| s.view(&k.0, n)).collect();
            let mut problems = Vec::new();
            let names = ServiceNames { namespace: &k.0, name: &k.1, ports: &mut self.spellings };
            let ports = build_service(&self.model, &families, &svc, names, &slices, &mut problems);
            let claims: Box<[PortClaims]> = ports.iter().map(PortClaims::of).collect();
            for c in &claims {
                self.claims.register(c);
            }
            if !problems.is_empty() {
                self.problems.insert(k.clone(), problems);
            }
            entry.claims = claims;
            fresh.extend(ports);
        }
        // Every claim of this rebuild is registered: ownership can be settled.
        for port in &fresh {
            let claims = PortClaims::of(port);
            self.claims.rivals_into(&claims, &mut affected);
        }
        for port in fresh {
            affected.remove(&port.name);
            let name = port.name.clone();
            let (mut port, problems) = self.claims.settle(port);
            if !problems.is_empty() {
                // Losing an address can change what the port reaches externally.
                select_endpoints(&self.model.node, &mut port);
            }
            self.record_claim_problems(&name, problems);
            self.put(name, Some(Arc::new(port)), &mut out);
        }
        // Rivals not rebuilt here: the model's port with its claims as built (a rival that went
        // away may give some back); and ports that are gone.
        for name in affected {
            let raw = self
                .entries
                .get(&(name.namespace.clone(), name.name.clone()))
                .and_then(|entry| entry.claims.iter().find(|p| p.name == name))
                .and_then(|claims| Some(claims.restore(self.model.services.get(&name)?)));
            let new = match raw {
                Some(raw) => {
                    let (mut port, problems) = self.claims.settle(raw);
                    select_endpoints(&self.model.node, &mut port);
                    self.record_claim_problems(&name, problems);
                    Some(Arc::new(port))
                }
                None => {
                    self.claim_problems.remove(&name);
                    None
                }
            };
            self.put(name, new, &mut out);
        }
        // In name order, as ownership is settled (the first in that order owns a key).
        out.changes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn record_claim_problems(&mut self, name: &ServicePortName, problems: Vec<Problem>) {
        if problems.is_empty() {
            self.claim_problems.remove(name);
        } else {
            self.claim_problems.insert(name.clone(), problems);
        }
    }

    /// Sets the model's port `name` to `new`, reporting a change if it is one.
    fn put(&mut self, name: ServicePortName, new: Option<Arc<ServicePort>>, out: &mut Rebuilt) {
        let old = match &new {
            Some(p) => self.model.services.insert(p.clone()),
            None => self.model.services.remove(&name),
        };
        if old != new {
            out.changes.push(PortChange { name, old, new });
        }
    }

    /// Every problem found, sorted.
    pub fn problems(&self) -> Vec<Problem> {
        let mut all: Vec<Problem> = self
            .node_problems
            .iter()
            .chain(self.problems.values().flatten())
            .chain(self.claim_problems.values().flatten())
            .cloned()
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_for_a_name_whose_objects_are_gone() {
        let mut cache = ModelCache::new(ProxyConfig::default(), "node1");
        let svc = source::Service {
            namespace: "ns".into(),
            name: "web".into(),
            cluster_ips: vec!["10.96.0.1".into()],
            ports: vec![source::ServicePortSpec { port: 80, protocol: "TCP".into(), ..Default::default() }],
            ..Default::default()
        };
        let slice = source::EndpointSlice {
            namespace: "ns".into(),
            name: "web-1".into(),
            service_name: "web".into(),
            address_type: "IPv4".into(),
            ..Default::default()
        };
        // Slice first, then the Service: one entry, one spelling of the name.
        cache.upsert_slice(slice);
        cache.upsert_service(svc);
        cache.rebuild();
        assert_eq!(cache.model().services.len(), 1);
        assert_eq!(cache.entries.len(), 1);
        let (key, entry) = cache.entries.iter().next().unwrap();
        assert_eq!((entry.slices.len(), entry.claims.len()), (1, 1));
        let port = cache.model().services.values().next().unwrap();
        assert!(Arc::ptr_eq(&key.1, &port.name.name), "the model's port shares the entry's name");

        cache.remove_service("ns", "web");
        cache.rebuild();
        assert!(cache.model().services.is_empty());
        assert_eq!(cache.entries.len(), 1, "the slice still names the Service");
        cache.remove_slice("ns", "web-1");
        cache.rebuild();
        assert!(cache.entries.is_empty() && cache.slices.is_empty());
    }
}
