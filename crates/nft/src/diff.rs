//! The difference between what the kernel holds and what it should hold, as one transaction
//! whose size follows the change, not the table.
//!
//! Two callers produce a [`ChangeSet`]: [`diff`] compares two whole rulesets (at start, after a
//! failure, periodically), and verdict-layout's `DesiredTable` records what it touched since the
//! last commit. [`emit`] orders the operations the kernel's way for both.

use crate::ruleset::{Blob, Chain, Elem, ElementMap, Flowtable, Ruleset, Set, SetDecl};
use crate::transaction::{ElementList, Op, Transaction};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A transaction and the ruleset the kernel holds once it commits.
#[derive(Clone, Debug)]
pub struct Plan {
    /// What to send.
    pub transaction: Transaction,
    /// The table after the transaction: `desired`, except that capacities and endpoint slots
    /// already in the kernel are kept where they still fit.
    pub result: Ruleset,
}

/// One element's key, before and after.
pub type ElementChange = (Blob, Option<Elem>, Option<Elem>);

/// What differs, object by object: before (kernel) and after (desired) of each.
#[derive(Default, Debug)]
pub struct ChangeSet {
    /// Chains whose rules or hook differ.
    pub chains: Vec<(String, Option<Chain>, Option<Chain>)>,
    /// Sets created, removed or recreated (declaration or capacity changed).
    pub sets: Vec<(String, Option<SetDecl>, Option<SetDecl>)>,
    /// Element changes of sets that stay as they are declared.
    pub elements: BTreeMap<String, Vec<ElementChange>>,
    /// Flowtables created, removed or recreated (their devices are not compared: see
    /// [`Flowtable`]).
    pub flowtables: Vec<(String, Option<Flowtable>, Option<Flowtable>)>,
}

/// Plans the move from `committed` (`None`: our table does not exist) to `desired`.
pub fn diff(committed: Option<&Ruleset>, desired: &Ruleset) -> Plan {
    // Cheap: element maps are shared, not copied.
    let mut result = desired.clone();
    let empty = Ruleset::new(desired.table.clone());
    let have = committed.unwrap_or(&empty);
    let mut changes = ChangeSet::default();

    for (name, want) in &mut result.sets {
        match have.sets.get(name) {
            // The packet path fills dynamic sets (client affinity): their elements are the
            // kernel's, never a difference.
            Some(old) if keeps(&old.decl, want) && want.decl.timeout.is_some() => {
                want.decl.size = old.decl.size;
                want.elements = Arc::clone(&old.elements);
            }
            Some(old) if keeps(&old.decl, want) && old.elements == want.elements => {
                want.decl.size = old.decl.size;
            }
            Some(old) if keeps(&old.decl, want) => {
                want.decl.size = old.decl.size;
                keep_slots(old, want);
                let elements = element_changes(&old.elements, &want.elements);
                if !elements.is_empty() {
                    changes.elements.insert(name.clone(), elements);
                }
            }
            old => changes.sets.push((name.clone(), old.map(|o| o.decl.clone()), Some(want.decl.clone()))),
        }
    }
    for (name, old) in &have.sets {
        if !result.sets.contains_key(name) {
            changes.sets.push((name.clone(), Some(old.decl.clone()), None));
        }
    }
    for (name, want) in &mut result.flowtables {
        match have.flowtables.get(name) {
            Some(old) if old.declaration() == want.declaration() => want.devices = old.devices.clone(),
            old => {
                want.devices.clear();
                changes.flowtables.push((name.clone(), old.cloned(), Some(want.clone())));
            }
        }
    }
    for (name, old) in &have.flowtables {
        if !result.flowtables.contains_key(name) {
            changes.flowtables.push((name.clone(), Some(old.clone()), None));
        }
    }
    let names: BTreeSet<&String> = have.chains.keys().chain(result.chains.keys()).collect();
    for name in names {
        let (before, after) = (have.chains.get(name), result.chains.get(name));
        if before != after {
            changes.chains.push((name.clone(), before.cloned(), after.cloned()));
        }
    }
    let transaction = emit(changes, &result, committed.is_some());
    Plan { transaction, result }
}

/// Whether a set in the kernel can stay (only its elements change): same declaration, and its
/// capacity still holds what is wanted.
pub(crate) fn keeps(old: &SetDecl, want: &Set) -> bool {
    old.same_except_size(&want.decl)
        && old.size.is_some() == want.decl.size.is_some()
        && old.size.is_none_or(|size| want.elements.len() <= size as usize)
}

/// Elements that differ between two maps (a merge of the two sorted key sequences).
fn element_changes(old: &ElementMap, new: &ElementMap) -> Vec<(Blob, Option<Elem>, Option<Elem>)> {
    let mut out = Vec::new();
    let (mut a, mut b) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((ka, _)), Some((kb, _))) if ka == kb => {
                let ((k, ea), (_, eb)) = (a.next().unwrap(), b.next().unwrap());
                if ea != eb {
                    out.push((k, Some(ea), Some(eb)));
                }
            }
            (Some((ka, _)), Some((kb, _))) if ka < kb => {
                let (k, e) = a.next().unwrap();
                out.push((k, Some(e), None));
            }
            (Some(_), None) => {
                let (k, e) = a.next().unwrap();
                out.push((k, Some(e), None));
            }
            _ => {
                let (k, e) = b.next().unwrap();
                out.push((k, None, Some(e)));
            }
        }
    }
    out
}

/// Orders the operations of a change set. `desired` supplies the rules of chains to (re)write
/// and the elements of sets to (re)create; `table_exists` is false when the table itself is new.
pub fn emit(changes: ChangeSet, desired: &Ruleset, table_exists: bool) -> Transaction {
    let mut tx = Transaction::new(&desired.table.name);
    if !table_exists {
        tx.ops.push(Op::AddTable(desired.table.clone()));
    }
    let new_sets: Vec<&String> =
        changes.sets.iter().filter(|(_, b, a)| b.is_none() && a.is_some()).map(|s| &s.0).collect();
    let removed_sets: Vec<&String> =
        changes.sets.iter().filter(|(_, b, a)| b.is_some() && a.is_none()).map(|s| &s.0).collect();
    let recreated: Vec<&String> =
        changes.sets.iter().filter(|(_, b, a)| b.is_some() && a.is_some()).map(|s| &s.0).collect();

    let mut new_chains = Vec::new();
    let mut rebased = Vec::new();
    let mut rewritten: BTreeSet<String> = BTreeSet::new();
    let mut removed_chains = Vec::new();
    for (name, before, after) in &changes.chains {
        match (before, after) {
            (None, Some(_)) => new_chains.push(name.clone()),
            (Some(_), None) => removed_chains.push(name.clone()),
            (Some(b), Some(a)) if b.base != a.base => rebased.push(name.clone()),
            (Some(_), Some(_)) => {
                rewritten.insert(name.clone());
            }
            (None, None) => {}
        }
    }
    let flowtables_gone: Vec<&String> =
        changes.flowtables.iter().filter(|(_, b, _)| b.is_some()).map(|f| &f.0).collect();
    // A set or flowtable that is recreated must first lose every rule that uses it; those rules
    // come back after it (unchanged chains included).
    for (name, chain) in &desired.chains {
        let uses_recreated = chain.rules.iter().flat_map(|r| r.set_refs()).any(|s| recreated.iter().any(|r| *r == s))
            || chain.rules.iter().flat_map(|r| r.flowtable_refs()).any(|f| flowtables_gone.iter().any(|g| *g == f));
        if uses_recreated && !new_chains.contains(name) && !rebased.contains(name) {
            rewritten.insert(name.clone());
        }
    }

    // 1. New objects first, so everything added later can refer to them.
    for name in &rebased {
        tx.ops.push(Op::DeleteChain(name.clone()));
    }
    for name in new_chains.iter().chain(&rebased) {
        tx.ops.push(Op::AddChain { name: name.clone(), base: desired.chains[name].base });
    }
    for name in &new_sets {
        tx.ops.push(Op::AddSet(desired.sets[*name].decl.clone()));
    }
    for (_, before, after) in &changes.flowtables {
        if let (None, Some(ft)) = (before, after) {
            tx.ops.push(Op::AddFlowtable(Flowtable { devices: Default::default(), ..ft.clone() }));
        }
    }
    // 2. Drop references: flush the rules of every chain that changes or goes away.
    for name in rewritten.iter().chain(&removed_chains) {
        tx.ops.push(Op::FlushChain(name.clone()));
    }
    // 3. Element deletions (including vmap entries that point at chains about to go).
    for (set, elems) in &changes.elements {
        let keys: Vec<Blob> = elems.iter().filter(|(_, b, a)| b.is_some() && b != a).map(|(k, _, _)| *k).collect();
        if !keys.is_empty() {
            tx.ops.push(Op::DeleteElements { set: set.clone(), decl: desired.sets[set].decl.clone(), keys });
        }
    }
    // 4. Sets that go away or are recreated, now that no rule refers to them.
    for name in recreated.iter().chain(&removed_sets) {
        tx.ops.push(Op::DeleteSet((*name).clone()));
    }
    for name in &recreated {
        tx.ops.push(Op::AddSet(desired.sets[*name].decl.clone()));
    }
    for (name, before, after) in &changes.flowtables {
        if before.is_some() {
            tx.ops.push(Op::DeleteFlowtable(name.clone()));
            if let Some(ft) = after {
                tx.ops.push(Op::AddFlowtable(Flowtable { devices: Default::default(), ..ft.clone() }));
            }
        }
    }
    // 5. Element additions: all of a new or recreated set (shared, not copied), or what changed.
    for name in new_sets.iter().chain(&recreated) {
        let set = &desired.sets[*name];
        if !set.elements.is_empty() {
            let elements = ElementList::All(Arc::clone(&set.elements));
            tx.ops.push(Op::AddElements { set: (*name).clone(), decl: set.decl.clone(), elements });
        }
    }
    for (set, elems) in changes.elements {
        let add: Vec<(Blob, Elem)> = elems
            .into_iter()
            .filter(|(_, b, a)| a.is_some() && b != a)
            .map(|(k, _, a)| (k, a.expect("checked")))
            .collect();
        if !add.is_empty() {
            let decl = desired.sets[&set].decl.clone();
            tx.ops.push(Op::AddElements { set, decl, elements: ElementList::List(add) });
        }
    }
    // 6. Rules of new, rebased and rewritten chains.
    for name in new_chains.iter().chain(&rebased).chain(&rewritten) {
        for rule in &desired.chains[name].rules {
            tx.ops.push(Op::AddRule { chain: name.clone(), rule: rule.clone() });
        }
    }
    // 7. Chains that went away, last: nothing refers to them any more.
    for name in &removed_chains {
        tx.ops.push(Op::DeleteChain(name.clone()));
    }
    tx
}

/// Keeps each endpoint in the slot it already occupies (slots are picked at random per
/// connection, so any assignment is correct, and keeping them makes a one-endpoint change one
/// element swap instead of a reshuffle).
fn keep_slots(old: &Set, want: &mut Set) {
    let Some(prefix) = want.decl.slot_prefix_len() else { return };
    if old.elements.is_empty() {
        return;
    }
    // Both maps are in key order, and a Service address's slots are contiguous in it: walk
    // them group by group, and touch (and copy) the wanted map only where a group's endpoints
    // sit in other slots than the kernel's. A restart with nothing changed copies nothing.
    let mut old_groups = groups(&old.elements, prefix).peekable();
    let mut moved: Vec<(Blob, Elem)> = Vec::new();
    for (gkey, wanted) in groups(&want.elements, prefix) {
        while old_groups.next_if(|(k, _)| *k < gkey).is_some() {}
        let Some((_, current)) = old_groups.next_if(|(k, _)| *k == gkey) else { continue };
        if current == wanted {
            continue;
        }
        let stable = stable_slots(&current, wanted);
        moved.extend(stable.into_iter().filter(|(k, e)| want.elements.get(k).as_ref() != Some(e)));
    }
    if !moved.is_empty() {
        let elements = Arc::make_mut(&mut want.elements);
        for (k, e) in moved {
            elements.insert(k, e);
        }
    }
}

/// The elements of a slot-keyed map, grouped by the key prefix before the slot.
fn groups(elements: &ElementMap, prefix: usize) -> impl Iterator<Item = (Blob, Vec<(Blob, Elem)>)> + '_ {
    let mut it = elements.iter().peekable();
    std::iter::from_fn(move || {
        let (k, e) = it.next()?;
        let gkey = k.prefix(prefix);
        let mut members = vec![(k, e)];
        while let Some(next) = it.next_if(|(k, _)| k.prefix(prefix) == gkey) {
            members.push(next);
        }
        Some((gkey, members))
    })
}

/// One Service address's endpoints in slots: those already in the kernel stay in their slot,
/// newcomers take the slots that were freed. Only when the slot keys are the same on both
/// sides (same number of endpoints); otherwise `wanted` is returned as it is.
pub fn stable_slots(current: &[(Blob, Elem)], wanted: Vec<(Blob, Elem)>) -> Vec<(Blob, Elem)> {
    if current.len() != wanted.len() || !current.iter().map(|m| m.0).eq(wanted.iter().map(|m| m.0)) {
        return wanted;
    }
    let mut newcomers: Vec<Elem> = wanted.into_iter().map(|m| m.1).collect();
    let mut out = Vec::with_capacity(current.len());
    let mut free = Vec::new();
    for (slot_key, elem) in current {
        if let Some(pos) = newcomers.iter().position(|w| w == elem) {
            newcomers.swap_remove(pos);
            out.push((*slot_key, elem.clone()));
        } else {
            free.push(*slot_key);
        }
    }
    out.extend(free.into_iter().zip(newcomers));
    out
}
