//! The desired table, kept up to date one Service port at a time.
//!
//! A sync after a few changes must cost what the changes cost, not what the cluster costs:
//! [`DesiredTable::update`] re-renders only the old and new version of a changed Service port
//! and applies the difference to the table it holds, remembering the state each touched object
//! had at the last commit. [`DesiredTable::plan`] turns those before-states into a transaction.
//! After a successful commit [`DesiredTable::committed`] forgets them; after a failure the
//! caller reconciles against the kernel ([`verdict_nft::diff`]) and [`DesiredTable::adopt`]s the result.

use crate::render::service::is_shared;
use crate::render::{
    Class, ClassNames, MapClass, RenderOptions, SharedCounts, Sink, capacity, render_counted, service,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use verdict_model::{ProxyModel, ServicePort};
use verdict_nft::diff::{ChangeSet, emit, stable_slots};
use verdict_nft::ruleset::{Blob, Chain, Elem, Ruleset, Set, SetDecl};
use verdict_nft::transaction::Transaction;

/// The desired table and what changed in it since the last commit.
#[derive(Debug)]
pub struct DesiredTable {
    /// Node facts and configuration, without Services: what ports are rendered against.
    facts: ProxyModel,
    ruleset: Ruleset,
    shared: SharedCounts,
    classes: HashMap<Class, u32>,
    maps: HashMap<MapClass, u32>,
    pending: Pending,
}

/// Before-states of everything touched since the last commit.
#[derive(Debug, Default)]
struct Pending {
    chains: HashMap<String, Option<Chain>>,
    sets: HashMap<String, Option<SetDecl>>,
    elements: HashMap<(String, Blob), Option<Elem>>,
}

/// One Service port's share of the table, for one family.
#[derive(Default)]
struct Fragment {
    elements: Vec<(String, Blob, Elem)>,
    classes: Vec<Class>,
    chains: Vec<Chain>,
    sets: Vec<SetDecl>,
}

impl Sink for Fragment {
    fn element(&mut self, set: &str, key: Blob, elem: Elem) {
        self.elements.push((set.to_string(), key, elem));
    }

    fn class(&mut self, class: Class) -> ClassNames {
        self.classes.push(class);
        ClassNames::of(class)
    }

    fn chain(&mut self, chain: Chain) {
        self.chains.push(chain);
    }

    fn set(&mut self, decl: SetDecl) {
        self.sets.push(decl);
    }
}

impl DesiredTable {
    /// The table for a whole model. Nothing is pending: the caller reconciles it against the
    /// kernel before the first commit.
    pub fn new(model: &ProxyModel, opts: &RenderOptions) -> DesiredTable {
        let (ruleset, counts) = render_counted(model, opts);
        let facts = ProxyModel {
            node: model.node.clone(),
            config: model.config.clone(),
            service_cidrs: model.service_cidrs.clone(),
            services: Default::default(),
        };
        DesiredTable {
            facts,
            ruleset,
            shared: counts.shared,
            classes: counts.classes,
            maps: counts.maps,
            pending: Pending::default(),
        }
    }

    /// The table as it should be.
    pub fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// Whether `model`'s node facts and configuration are the ones this table was built for
    /// (if not, rebuild it with [`DesiredTable::new`]).
    pub fn fits(&self, model: &ProxyModel) -> bool {
        self.facts.node == model.node
            && self.facts.config == model.config
            && self.facts.service_cidrs == model.service_cidrs
    }

    /// Replaces Service port `old` by `new` (either may be absent: added, removed).
    pub fn update(&mut self, old: Option<&ServicePort>, new: Option<&ServicePort>) {
        for family in self.facts.families() {
            let mut before = Fragment::default();
            let mut after = Fragment::default();
            if let Some(p) = old {
                service::render(&self.facts, p, family, &mut before);
            }
            if let Some(p) = new {
                service::render(&self.facts, p, family, &mut after);
            }
            self.apply(before, after);
        }
    }

    fn apply(&mut self, mut before: Fragment, mut after: Fragment) {
        // Classes and the port's own objects first (a map or set must exist before its
        // elements), removals last.
        let mut delta: BTreeMap<Class, i64> = BTreeMap::new();
        for c in &after.classes {
            *delta.entry(*c).or_default() += 1;
        }
        for c in &before.classes {
            *delta.entry(*c).or_default() -= 1;
        }
        for (class, d) in &delta {
            if *d > 0 {
                self.class_ref(*class, *d as u32);
            }
        }
        let gone_sets = self.own_objects(&mut before, &mut after);

        let old: HashMap<(&str, Blob), &Elem> = before.elements.iter().map(|(s, k, e)| ((s.as_str(), *k), e)).collect();
        let wanted = self.keep_slots(&before, after.elements);
        let new_keys: std::collections::HashSet<(&str, Blob)> =
            wanted.iter().map(|(s, k, _)| (s.as_str(), *k)).collect();
        for ((set, key), elem) in &old {
            if new_keys.contains(&(*set, *key)) {
                continue;
            }
            // A port that took the key over in this sync (an address whose ownership passed
            // to it, applied before the port that lost it) already wrote its own element.
            if !is_shared(set) && self.current(set, key).as_ref() != Some(*elem) {
                continue;
            }
            self.remove_element(set, *key);
        }
        for (set, key, elem) in &wanted {
            match old.get(&(set.as_str(), *key)) {
                // Shared elements are all alike: the reference simply carries over.
                Some(_) if is_shared(set) => {}
                Some(prev) if *prev == elem && self.current(set, key).as_ref() == Some(elem) => {}
                Some(_) => self.set_element(set, *key, elem.clone()),
                None => self.add_element(set, *key, elem.clone()),
            }
        }

        for (class, d) in delta {
            if d < 0 {
                self.class_unref(class, (-d) as u32);
            }
        }
        for name in gone_sets {
            self.touch_set(&name);
            self.ruleset.sets.remove(&name);
        }
    }

    /// Writes the port's own chains and sets that are new or changed, removes its chains that
    /// are gone, and returns its sets that are gone (removed once their elements are).
    fn own_objects(&mut self, before: &mut Fragment, after: &mut Fragment) -> Vec<String> {
        for decl in std::mem::take(&mut after.sets) {
            before.sets.retain(|d| d.name != decl.name);
            if self.ruleset.sets.get(&decl.name).map(|s| &s.decl) != Some(&decl) {
                self.touch_set(&decl.name);
                self.ruleset.sets.insert(decl.name.clone(), Set::new(decl));
            }
        }
        for chain in std::mem::take(&mut after.chains) {
            before.chains.retain(|c| c.name != chain.name);
            if self.ruleset.chains.get(&chain.name) != Some(&chain) {
                self.touch_chain(&chain.name);
                self.ruleset.chains.insert(chain.name.clone(), chain);
            }
        }
        for chain in std::mem::take(&mut before.chains) {
            self.touch_chain(&chain.name);
            self.ruleset.chains.remove(&chain.name);
        }
        std::mem::take(&mut before.sets).into_iter().map(|d| d.name).collect()
    }

    /// Endpoints already in a slot keep it (see `diff::stable_slots`).
    fn keep_slots(&self, before: &Fragment, after: Vec<(String, Blob, Elem)>) -> Vec<(String, Blob, Elem)> {
        let mut groups: BTreeMap<(String, Blob), Vec<(Blob, Elem)>> = BTreeMap::new();
        let mut out = Vec::with_capacity(after.len());
        for (set, key, elem) in after {
            match self.ruleset.sets.get(&set).and_then(|s| s.decl.slot_prefix_len()) {
                Some(prefix) => groups.entry((set, key.prefix(prefix))).or_default().push((key, elem)),
                None => out.push((set, key, elem)),
            }
        }
        for ((set, prefix), wanted) in groups {
            let slot_len = self.ruleset.sets[&set].decl.slot_prefix_len().unwrap_or(0);
            let current: Vec<(Blob, Elem)> = before
                .elements
                .iter()
                .filter(|(s, k, _)| *s == set && k.prefix(slot_len) == prefix)
                .filter_map(|(_, k, _)| Some((*k, self.current(&set, k)?.clone())))
                .collect();
            out.extend(stable_slots(&current, wanted).into_iter().map(|(k, e)| (set.clone(), k, e)));
        }
        out
    }

    fn current(&self, set: &str, key: &Blob) -> Option<Elem> {
        self.ruleset.sets.get(set)?.elements.get(key)
    }

    fn touch_element(&mut self, set: &str, key: Blob) {
        let before = self.current(set, &key);
        self.pending.elements.entry((set.to_string(), key)).or_insert(before);
    }

    fn touch_set(&mut self, name: &str) {
        let before = self.ruleset.sets.get(name).map(|s| s.decl.clone());
        self.pending.sets.entry(name.to_string()).or_insert(before);
    }

    fn touch_chain(&mut self, name: &str) {
        let before = self.ruleset.chains.get(name).cloned();
        self.pending.chains.entry(name.to_string()).or_insert(before);
    }

    fn add_element(&mut self, set: &str, key: Blob, elem: Elem) {
        if is_shared(set) && self.current(set, &key).is_some() {
            // Wanted once already (no count is kept for one).
            *self.shared.entry(set.to_string()).or_default().entry(&key, 1) += 1;
            return;
        }
        self.set_element(set, key, elem);
    }

    fn set_element(&mut self, set: &str, key: Blob, elem: Elem) {
        self.touch_element(set, key);
        let s = self.ruleset.sets.get_mut(set).unwrap_or_else(|| panic!("element for undeclared set {set}"));
        Arc::make_mut(&mut s.elements).insert(key, elem);
        // A set that outgrows its capacity is recreated with twice the room.
        let (len, size) = (s.elements.len(), s.decl.size);
        if size.is_some_and(|size| len > size as usize) {
            self.touch_set(set);
            self.ruleset.sets.get_mut(set).expect("exists").decl.size = Some(capacity(len));
        }
    }

    fn remove_element(&mut self, set: &str, key: Blob) {
        if is_shared(set)
            && let Some(per_set) = self.shared.get_mut(set)
            && let Some(n) = per_set.get_mut(&key)
        {
            *n -= 1;
            if *n <= 1 {
                per_set.remove(&key);
            }
            return;
        }
        self.touch_element(set, key);
        if let Some(s) = self.ruleset.sets.get_mut(set) {
            Arc::make_mut(&mut s.elements).remove(&key);
        }
    }

    fn class_ref(&mut self, class: Class, n: u32) {
        let count = self.classes.entry(class).or_default();
        *count += n;
        if *count == n {
            let chain = class.chain_for(&self.facts.config);
            self.touch_chain(&chain.name);
            self.ruleset.chains.insert(chain.name.clone(), chain);
        }
        let map = class.map();
        let count = self.maps.entry(map).or_default();
        *count += n;
        if *count == n {
            let decl = map.decl().with_size(capacity(0));
            self.touch_set(&decl.name);
            self.ruleset.sets.insert(decl.name.clone(), Set::new(decl));
        }
    }

    fn class_unref(&mut self, class: Class, n: u32) {
        let count = self.classes.entry(class).or_default();
        *count = count.saturating_sub(n);
        if *count == 0 {
            self.classes.remove(&class);
            let name = class.name();
            self.touch_chain(&name);
            self.ruleset.chains.remove(&name);
        }
        let map = class.map();
        let count = self.maps.entry(map).or_default();
        *count = count.saturating_sub(n);
        if *count == 0 {
            self.maps.remove(&map);
            let name = map.name();
            self.touch_set(&name);
            self.ruleset.sets.remove(&name);
        }
    }

    /// Kernel objects touched since the last commit.
    pub fn pending(&self) -> usize {
        self.pending.chains.len() + self.pending.sets.len() + self.pending.elements.len()
    }

    /// The transaction that brings the kernel (as of the last commit) to this table.
    pub fn plan(&self) -> Transaction {
        let mut changes = ChangeSet::default();
        for (name, before) in &self.pending.sets {
            let after = self.ruleset.sets.get(name).map(|s| &s.decl);
            if before.as_ref() != after {
                changes.sets.push((name.clone(), before.clone(), after.cloned()));
            }
        }
        changes.sets.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, before) in &self.pending.chains {
            let after = self.ruleset.chains.get(name);
            if before.as_ref() != after {
                changes.chains.push((name.clone(), before.clone(), after.cloned()));
            }
        }
        changes.chains.sort_by(|a, b| a.0.cmp(&b.0));
        let whole_sets: std::collections::HashSet<&String> = changes.sets.iter().map(|s| &s.0).collect();
        for ((set, key), before) in &self.pending.elements {
            if whole_sets.contains(set) || !self.ruleset.sets.contains_key(set) {
                continue;
            }
            let after = self.current(set, key);
            if *before != after {
                changes.elements.entry(set.clone()).or_default().push((*key, before.clone(), after));
            }
        }
        for elems in changes.elements.values_mut() {
            elems.sort_by_key(|e| e.0);
        }
        emit(changes, &self.ruleset, true)
    }

    /// The kernel now holds this table.
    pub fn committed(&mut self) {
        self.pending = Pending::default();
    }

    /// Takes a reconciled table (a full diff's result: this table with the kernel's slots and
    /// capacities), which the kernel now holds.
    pub fn adopt(&mut self, result: Ruleset) {
        self.ruleset = result;
        self.pending = Pending::default();
    }
}
