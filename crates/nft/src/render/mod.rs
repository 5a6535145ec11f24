//! The model as one nftables table: deterministic, sorted, pure.
//!
//! Shape (see docs/design.md for the measurements behind it): Service addresses are dispatched
//! by the `service-ips` verdict map to one chain per *endpoint count* N (`endpoints-N`), which
//! DNATs through a hash map keyed by `daddr . l4proto . dport . numgen random mod N`. The chain
//! count therefore stays small and constant as Services grow, no anonymous set is created per
//! Service, and every endpoint change is an element swap in a hash map: O(1) in the kernel.

pub mod names;
mod scaffold;
mod service;

use crate::rule::Selector;
use crate::ruleset::{Blob, Chain, DataSpec, Elem, KeySpec, Ruleset, Set, SetDecl, Table};
use verdict_model::{IpFamily, ProxyModel};

/// Options that do not come from the model.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    /// The table name (`kube-proxy`).
    pub table: String,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions { table: crate::ruleset::DEFAULT_TABLE.to_string() }
    }
}

/// The smallest capacity a set is created with.
pub const MIN_CAPACITY: u32 = 1024;

/// The capacity a set holding `count` elements is created with: room to double before it must
/// be recreated. The kernel sizes a fixed hash table for it, which loads 2.5x faster than a
/// table that grows while a large transaction fills it (docs/design.md).
pub fn capacity(count: usize) -> u32 {
    let want = (count.saturating_mul(2)).max(MIN_CAPACITY as usize);
    u32::try_from(want.next_power_of_two()).unwrap_or(u32::MAX)
}

/// Renders the whole table for a model.
pub fn render(model: &ProxyModel, opts: &RenderOptions) -> Ruleset {
    let mut b = Builder::new(Table { name: opts.table.clone(), ..Table::default() });
    let families = model.families();
    scaffold::render(model, &families, &mut b);
    for family in &families {
        // In address order the large maps (keyed by address) arrive sorted, which makes
        // building them linear.
        let mut ports: Vec<_> = model.services.values().filter_map(|p| Some((p.cluster_ip(*family)?, p))).collect();
        ports.sort_by_key(|(ip, p)| (*ip, p.protocol(), p.port));
        for (_, port) in ports {
            service::render(model, port, *family, &mut b);
        }
    }
    b.finish()
}

/// Accumulates a ruleset; sets are declared before their elements are added.
///
/// Elements are collected per set and sorted once at the end: building a map of a million
/// elements from sorted input is several times faster than a million ordered inserts.
pub(crate) struct Builder {
    rs: Ruleset,
    pending: std::collections::HashMap<String, Vec<(Blob, Elem)>>,
}

impl Builder {
    fn new(table: Table) -> Builder {
        Builder { rs: Ruleset::new(table), pending: std::collections::HashMap::new() }
    }

    pub(crate) fn declare(&mut self, decl: SetDecl) {
        self.rs.sets.entry(decl.name.clone()).or_insert_with(|| Set::new(decl));
    }

    pub(crate) fn chain(&mut self, chain: Chain) {
        self.rs.chains.insert(chain.name.clone(), chain);
    }

    pub(crate) fn has_chain(&self, name: &str) -> bool {
        self.rs.chains.contains_key(name)
    }

    /// Adds an element; the set must be declared. Shared elements (hairpin entries) are added
    /// by every Service that needs them and kept once.
    pub(crate) fn element(&mut self, set: &str, key: Blob, elem: Elem) {
        match self.pending.get_mut(set) {
            Some(v) => v.push((key, elem)),
            None => {
                assert!(self.rs.sets.contains_key(set), "render bug: element for undeclared set {set}");
                self.pending.insert(set.to_string(), vec![(key, elem)]);
            }
        }
    }

    fn finish(mut self) -> Ruleset {
        for (name, elements) in self.pending.drain() {
            // Collecting sorts (in place) and bulk-builds the map; of equal keys (shared
            // elements such as hairpin entries, all alike) one is kept.
            self.rs.sets.get_mut(&name).expect("declared").elements =
                std::sync::Arc::new(elements.into_iter().collect());
        }
        for set in self.rs.sets.values_mut() {
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
