//! The model as one nftables table: deterministic, sorted, pure.
//!
//! Shape (see docs/design.md for the measurements behind it): Service addresses are dispatched
//! by the `service-ips` verdict map to one chain per *endpoint count* N (`endpoints-N`), which
//! DNATs through a hash map keyed by `daddr . l4proto . dport . numgen random mod N`. The chain
//! count therefore stays small and constant as Services grow, no anonymous set is created per
//! Service, and every endpoint change is an element swap in a hash map: O(1) in the kernel.
//!
//! The table has two parts: the scaffolding every table has ([`scaffold`]), and what each
//! Service port adds ([`service`]). A Service port writes into a [`Sink`], so the same code
//! renders a whole table ([`render`]) or one Service's share of it (for incremental syncs, see
//! `crate::desired`).

pub mod counted_keys;
pub mod counters;
mod key_counts;
mod matches;
pub(crate) mod names;
pub use names::FAST_PATH;
mod own;
mod port_view;
mod scaffold;
pub(crate) mod service;

use crate::FastMap;
use key_counts::KeyCounts;
use std::sync::Arc;
use verdict_model::{IpFamily, ProxyModel, ServicePort};
use verdict_nft::rule::build::{l4proto_any, stmt};
use verdict_nft::rule::{DnatTarget, Rule, Selector, Stmt};
use verdict_nft::ruleset::ElementMap;
use verdict_nft::ruleset::{Blob, Chain, DataSpec, Elem, KeySpec, Ruleset, Set, SetDecl, Table};

/// Options that do not come from the model.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    /// The table name (`kube-proxy`).
    pub table: String,
    /// The opt-in fast path: a flowtable, and a rule in `filter-forward` that offloads
    /// established connections to Service endpoints to it (see [`names::FAST_PATH`]).
    pub fast_path: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions { table: verdict_nft::ruleset::DEFAULT_TABLE.to_string(), fast_path: false }
    }
}

/// The smallest capacity a set is created with.
pub(crate) const MIN_CAPACITY: u32 = 1024;

/// The capacity a set holding `count` elements is created with: room to double before it must
/// be recreated. The kernel sizes a fixed hash table for it, which loads 2.5x faster than a
/// table that grows while a large transaction fills it (docs/design.md).
pub fn capacity(count: usize) -> u32 {
    let want = (count.saturating_mul(2)).max(MIN_CAPACITY as usize);
    u32::try_from(want.next_power_of_two()).unwrap_or(u32::MAX)
}

/// Reference counts of shared elements above one, by set and key: an element of a shared set
/// without a count is wanted by exactly one Service port, as nearly all are (a count for every
/// hairpin pair cost 540 bytes per Service of 10 endpoints).
pub(crate) type SharedCounts = FastMap<String, KeyCounts>;

/// Renders the whole table for a model.
pub fn render(model: &ProxyModel, opts: &RenderOptions) -> Ruleset {
    render_with(model, opts, false).0
}

/// How many Service ports share each shared element (by set, then key) and each [`Class`]:
/// what the incremental table needs to know when one of them goes away.
#[derive(Default, Debug)]
pub(crate) struct Counts {
    pub shared: SharedCounts,
    pub classes: std::collections::HashMap<Class, u32>,
    pub maps: std::collections::HashMap<MapClass, u32>,
}

/// Renders the whole table and counts the references to shared elements and classes.
pub(crate) fn render_counted(model: &ProxyModel, opts: &RenderOptions) -> (Ruleset, Counts) {
    render_with(model, opts, true)
}

/// Below this many Service ports one thread renders the table; above it two, each half of
/// the ports (a cold sync at 100k waits for its render, and the second core is idle then).
const PARALLEL_PORTS: usize = 20_000;

fn render_with(model: &ProxyModel, opts: &RenderOptions, count: bool) -> (Ruleset, Counts) {
    render_split(model, opts, count, model.services.len() >= PARALLEL_PORTS)
}

fn render_split(model: &ProxyModel, opts: &RenderOptions, count: bool, parallel: bool) -> (Ruleset, Counts) {
    let scaffold = scaffold(model, opts);
    let new_builder = |rs: Ruleset| Builder {
        rs,
        pending: FastMap::default(),
        mark: model.config.masquerade_mark(),
        counting: model.config.service_counters.enabled(),
        counts: Counts::default(),
        count,
        class_names: FastMap::default(),
    };
    // In address order the large maps (keyed by address) arrive sorted, which makes building
    // them linear.
    let mut ports: Vec<(IpFamily, &ServicePort)> = Vec::with_capacity(model.services.len());
    for family in model.families() {
        let start = ports.len();
        ports.extend(model.services.values().filter(|p| p.cluster_ip(family).is_some()).map(|p| (family, &**p)));
        ports[start..].sort_by_key(|(f, p)| (p.cluster_ip(*f), p.protocol(), p.port));
    }
    let render_all = |b: &mut Builder, ports: &[(IpFamily, &ServicePort)]| {
        for (family, port) in ports {
            service::render(model, port, *family, b);
        }
    };
    let mut b = new_builder(scaffold.clone());
    if !parallel {
        render_all(&mut b, &ports);
    } else {
        let (first, second) = ports.split_at(ports.len() / 2);
        let other = std::thread::scope(|s| {
            let other = s.spawn(|| {
                let mut other = new_builder(scaffold);
                render_all(&mut other, second);
                other
            });
            render_all(&mut b, first);
            other.join().expect("the render thread does not panic")
        });
        b.absorb(other);
    }
    let mut counts = std::mem::take(&mut b.counts);
    for per_set in counts.shared.values_mut() {
        per_set.retain_and_shrink(|n| n > 1);
    }
    (b.finish(), counts)
}

/// The scaffolding alone: base chains, dispatch chains and the (empty) sets they use, plus the
/// node's NodePort addresses.
pub(crate) fn scaffold(model: &ProxyModel, opts: &RenderOptions) -> Ruleset {
    let mut rs = Ruleset::new(Table { name: opts.table.clone(), ..Table::default() });
    scaffold::render(model, &model.families(), &mut rs);
    if opts.fast_path {
        scaffold::fast_path(&mut rs);
    }
    for set in rs.sets.values_mut() {
        set.decl.size = Some(capacity(set.elements.len()));
    }
    rs
}

/// A chain shared by every Service address (or NodePort) with the same number of endpoints:
/// it picks one of them through its endpoint map, after setting the masquerade mark when
/// `masquerade` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Class {
    /// Service addresses (ClusterIP, external, load balancer), or NodePorts.
    pub kind: ClassKind,
    /// Address family.
    pub family: IpFamily,
    /// Number of endpoints.
    pub n: usize,
    /// Mark the packet for masquerading first.
    pub masquerade: bool,
}

/// What a [`Class`] dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ClassKind {
    /// Keyed by destination address, protocol and port.
    Address,
    /// Keyed by protocol and NodePort.
    NodePort,
}

/// The endpoint map a [`Class`] DNATs through (shared by its plain and masquerading chains).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct MapClass {
    /// Keyed by address or by NodePort.
    pub kind: ClassKind,
    /// Address family.
    pub family: IpFamily,
    /// Number of endpoints.
    pub n: usize,
}

impl MapClass {
    /// The map's name.
    pub fn name(&self) -> String {
        match self.kind {
            ClassKind::Address => names::endpoints(self.n, self.family),
            ClassKind::NodePort => names::nodeport_endpoints(self.n, self.family),
        }
    }

    /// The map's key.
    pub fn key(&self) -> Vec<Selector> {
        let mut key = match self.kind {
            ClassKind::Address => addr_key(self.family).to_vec(),
            ClassKind::NodePort => vec![Selector::L4Proto, Selector::ThDport],
        };
        key.push(Selector::Numgen(self.n as u32));
        key
    }

    /// The map's declaration (without a capacity).
    pub fn decl(&self) -> SetDecl {
        let data = DataSpec::Typeof(vec![Selector::Daddr(self.family), Selector::ThDport]);
        SetDecl::map(&self.name(), KeySpec::Typeof(self.key()), data)
    }
}

impl Class {
    /// Its endpoint map.
    pub fn map(&self) -> MapClass {
        MapClass { kind: self.kind, family: self.family, n: self.n }
    }

    /// The chain's name: the map's, with `-masq` for the masquerading variant.
    pub fn name(&self) -> String {
        if !self.masquerade {
            return self.map().name();
        }
        let base = match self.kind {
            ClassKind::Address => "endpoints",
            ClassKind::NodePort => "nodeport-endpoints",
        };
        names::masq(base, self.n, self.family)
    }

    /// The chain.
    pub fn chain(&self, masquerade_mark: u32) -> Chain {
        let map = self.map();
        let dnat =
            stmt(Stmt::Dnat { family: self.family, target: DnatTarget::Map { key: map.key(), map: map.name() } });
        let mut items = Vec::new();
        if self.masquerade {
            items.push(stmt(Stmt::MarkOr(masquerade_mark)));
        }
        items.push(l4proto_any());
        items.push(dnat);
        Chain::regular(self.name(), vec![Rule::new(items)])
    }

    /// The chain for a configuration: with `--service-counters`, it first counts the
    /// connection it DNATs (a lookup that misses for ports that are not counted).
    pub fn chain_for(&self, config: &verdict_model::ProxyConfig) -> Chain {
        self.chain_counting(config.masquerade_mark(), config.service_counters.enabled())
    }

    fn chain_counting(&self, masquerade_mark: u32, counting: bool) -> Chain {
        let mut chain = self.chain(masquerade_mark);
        if counting {
            let count = match self.kind {
                ClassKind::Address => counters::count_address(counters::Outcome::Accepted, self.family),
                ClassKind::NodePort => counters::count_node_port(counters::Outcome::Accepted, self.family, Vec::new()),
            };
            chain.rules.insert(0, count);
        }
        chain
    }
}

/// The names of a class's chain and of its endpoint map.
#[derive(Clone, Debug)]
pub(crate) struct ClassNames {
    pub chain: Arc<str>,
    pub map: Arc<str>,
}

impl ClassNames {
    pub fn of(class: Class) -> ClassNames {
        ClassNames { chain: Arc::from(class.name().as_str()), map: Arc::from(class.map().name().as_str()) }
    }
}

/// Where a Service port's share of the table goes.
pub(crate) trait Sink {
    /// An element of a set or map the scaffolding, a class or this port declares.
    fn element(&mut self, set: &str, key: Blob, elem: Elem);
    /// The chain of `class` (and its map) must exist; returns the names of both.
    fn class(&mut self, class: Class) -> ClassNames;
    /// A chain of this port's own (its name is unique to the port).
    fn chain(&mut self, chain: Chain);
    /// A set of this port's own (affinity sets).
    fn set(&mut self, decl: SetDecl);
}

/// Accumulates a whole table. Rendered in address order, the large maps' elements arrive in key
/// order and are appended to their packed chunks; the others are inserted.
struct Builder {
    rs: Ruleset,
    pending: FastMap<String, ElementMap>,
    mark: u32,
    /// `--service-counters` is on: class chains count what they DNAT.
    counting: bool,
    counts: Counts,
    /// Whether to count references (only the incremental table needs them).
    count: bool,
    class_names: FastMap<Class, ClassNames>,
}

impl Sink for Builder {
    fn element(&mut self, set: &str, key: Blob, elem: Elem) {
        if self.count && service::is_shared(set) {
            let per_set = match self.counts.shared.get_mut(set) {
                Some(m) => m,
                None => self.counts.shared.entry(set.to_string()).or_default(),
            };
            let count = per_set.entry(&key, 0);
            *count += 1;
            if *count > 1 {
                return; // shared elements are all alike: it is in already
            }
        }
        match self.pending.get_mut(set) {
            Some(m) => {
                m.insert(key, elem);
            }
            None => {
                assert!(self.rs.sets.contains_key(set), "render bug: element for undeclared set {set}");
                self.pending.insert(set.to_string(), [(key, elem)].into());
            }
        }
    }

    fn class(&mut self, class: Class) -> ClassNames {
        *self.counts.classes.entry(class).or_default() += 1;
        *self.counts.maps.entry(class.map()).or_default() += 1;
        if let Some(names) = self.class_names.get(&class) {
            return names.clone();
        }
        let name = class.name();
        if !self.rs.chains.contains_key(&name) {
            self.rs.chains.insert(name.clone(), class.chain_counting(self.mark, self.counting));
        }
        let map = class.map();
        self.rs.sets.entry(map.name()).or_insert_with(|| Set::new(map.decl()));
        // One copy of each name for every element that points at the chain.
        let names = ClassNames { chain: Arc::from(name.as_str()), map: Arc::from(map.name().as_str()) };
        self.class_names.insert(class, names.clone());
        names
    }

    fn chain(&mut self, chain: Chain) {
        self.rs.chains.insert(chain.name.clone(), chain);
    }

    fn set(&mut self, decl: SetDecl) {
        self.rs.sets.insert(decl.name.clone(), Set::new(decl));
    }
}

impl Builder {
    /// Takes in what another builder rendered of ports after this one's.
    fn absorb(&mut self, other: Builder) {
        for (name, chain) in other.rs.chains {
            self.rs.chains.entry(name).or_insert(chain);
        }
        for (name, set) in other.rs.sets {
            self.rs.sets.entry(name).or_insert(set);
        }
        for (name, elements) in other.pending {
            match self.pending.get_mut(&name) {
                Some(mine) => mine.absorb(elements),
                None => {
                    self.pending.insert(name, elements);
                }
            }
        }
        for (set, counts) in other.counts.shared {
            self.counts.shared.entry(set).or_default().absorb(counts);
        }
        for (class, n) in other.counts.classes {
            *self.counts.classes.entry(class).or_default() += n;
        }
        for (map, n) in other.counts.maps {
            *self.counts.maps.entry(map).or_default() += n;
        }
    }

    fn finish(mut self) -> Ruleset {
        for (name, elements) in self.pending.drain() {
            // Of equal keys (shared elements such as hairpin entries, all alike) one is kept.
            self.rs.sets.get_mut(&name).expect("declared").elements = Arc::new(elements);
        }
        for set in self.rs.sets.values_mut().filter(|s| s.decl.timeout.is_none()) {
            set.decl.size = Some(capacity(set.elements.len()));
        }
        self.rs
    }
}

/// `daddr . l4proto . dport` for a family.
pub(crate) fn addr_key(family: IpFamily) -> [Selector; 3] {
    [Selector::Daddr(family), Selector::L4Proto, Selector::ThDport]
}

/// A `type ... : verdict` map keyed by `addr . proto . port`.
pub(crate) fn addr_vmap(name: &str, family: IpFamily, comment: &str) -> SetDecl {
    SetDecl::map(
        &names::family_name(name, family),
        KeySpec::Type(addr_key(family).map(|s| s.datatype()).to_vec()),
        DataSpec::Verdict,
    )
    .with_comment(comment)
}

/// A `type inet_proto . inet_service : verdict` map.
pub(crate) fn port_vmap(name: &str, family: IpFamily, comment: &str) -> SetDecl {
    SetDecl::map(
        &names::family_name(name, family),
        KeySpec::Type(vec![Selector::L4Proto.datatype(), Selector::ThDport.datatype()]),
        DataSpec::Verdict,
    )
    .with_comment(comment)
}

#[cfg(test)]
mod cost_tests;
#[cfg(test)]
mod tests;
