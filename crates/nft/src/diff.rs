//! The difference between what the kernel holds and what it should hold, as one transaction
//! whose size follows the change, not the table.

use crate::ruleset::{Blob, Chain, Elem, Ruleset, Set};
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

/// Plans the move from `committed` (`None`: our table does not exist) to `desired`.
pub fn diff(committed: Option<&Ruleset>, desired: &Ruleset) -> Plan {
    // Cheap: element maps are shared, not copied.
    let mut result = desired.clone();
    let empty = Ruleset::new(desired.table.clone());
    let (have, mut tx) = match committed {
        Some(c) => (c, Transaction::new(&desired.table.name)),
        None => {
            let mut tx = Transaction::new(&desired.table.name);
            tx.ops.push(Op::AddTable(desired.table.clone()));
            (&empty, tx)
        }
    };

    // Sets: new, recreated (declaration changed or capacity outgrown), removed, or edited.
    let mut new_sets = Vec::new();
    let mut recreated = Vec::new();
    let mut removed_sets = Vec::new();
    for (name, want) in &mut result.sets {
        match have.sets.get(name) {
            None => new_sets.push(name.clone()),
            Some(old) => {
                let fits = old.decl.size.is_none_or(|size| want.elements.len() <= size as usize);
                if old.decl.same_except_size(&want.decl) && fits && want.decl.size.is_some() == old.decl.size.is_some()
                {
                    want.decl.size = old.decl.size;
                    keep_slots(old, want);
                } else {
                    recreated.push(name.clone());
                }
            }
        }
    }
    for name in have.sets.keys() {
        if !result.sets.contains_key(name) {
            removed_sets.push(name.clone());
        }
    }
    let dropped_sets: BTreeSet<&String> = recreated.iter().chain(&removed_sets).collect();

    // Chains: new, rewritten, re-based (hook or priority changed), removed.
    let mut new_chains = Vec::new();
    let mut rewritten = Vec::new();
    let mut rebased = Vec::new();
    let mut removed_chains = Vec::new();
    for (name, want) in &result.chains {
        match have.chains.get(name) {
            None => new_chains.push(name.clone()),
            Some(old) if old.base != want.base => rebased.push(name.clone()),
            Some(old) => {
                let uses_dropped =
                    old.rules.iter().flat_map(|r| r.set_refs()).any(|s| dropped_sets.contains(&s.to_string()));
                if old.rules != want.rules || uses_dropped {
                    rewritten.push(name.clone());
                }
            }
        }
    }
    for name in have.chains.keys() {
        if !result.chains.contains_key(name) {
            removed_chains.push(name.clone());
        }
    }

    // 1. New objects first, so everything added later can refer to them.
    for name in &rebased {
        tx.ops.push(Op::DeleteChain(name.clone()));
    }
    for name in new_chains.iter().chain(&rebased) {
        tx.ops.push(Op::AddChain { name: name.clone(), base: result.chains[name].base });
    }
    for name in &new_sets {
        tx.ops.push(Op::AddSet(result.sets[name].decl.clone()));
    }
    // 2. Drop references: flush the rules of every chain that changes or goes away.
    for name in rewritten.iter().chain(&removed_chains) {
        tx.ops.push(Op::FlushChain(name.clone()));
    }
    // 3. Element deletions (including vmap entries that point at chains about to go).
    for (name, want) in &result.sets {
        if let Some(old) = have.sets.get(name)
            && !recreated.contains(name)
        {
            let keys: Vec<Blob> =
                old.elements.iter().filter(|(k, e)| want.elements.get(*k) != Some(*e)).map(|(k, _)| *k).collect();
            if !keys.is_empty() {
                tx.ops.push(Op::DeleteElements { set: name.clone(), decl: old.decl.clone(), keys });
            }
        }
    }
    // 4. Sets that go away or are recreated, now that no rule refers to them.
    for name in recreated.iter().chain(&removed_sets) {
        tx.ops.push(Op::DeleteSet(name.clone()));
    }
    for name in &recreated {
        tx.ops.push(Op::AddSet(result.sets[name].decl.clone()));
    }
    // 5. Element additions: all of a new set (shared, not copied), or what changed.
    for (name, want) in &result.sets {
        let elements = match have.sets.get(name).filter(|_| !recreated.contains(name)) {
            None => ElementList::All(Arc::clone(&want.elements)),
            Some(old) => ElementList::List(
                want.elements
                    .iter()
                    .filter(|(k, e)| old.elements.get(*k) != Some(*e))
                    .map(|(k, e)| (*k, e.clone()))
                    .collect(),
            ),
        };
        if !elements.is_empty() {
            tx.ops.push(Op::AddElements { set: name.clone(), decl: want.decl.clone(), elements });
        }
    }
    // 6. Rules of new, rebased and rewritten chains.
    for name in new_chains.iter().chain(&rebased).chain(&rewritten) {
        let chain: &Chain = &result.chains[name];
        for rule in &chain.rules {
            tx.ops.push(Op::AddRule { chain: name.clone(), rule: rule.clone() });
        }
    }
    // 7. Chains that went away, last: nothing refers to them any more.
    for name in &removed_chains {
        tx.ops.push(Op::DeleteChain(name.clone()));
    }
    Plan { transaction: tx, result }
}

/// Keeps each endpoint in the slot it already occupies (slots are picked at random per
/// connection, so any assignment is correct, and keeping them makes a one-endpoint change one
/// element swap instead of a reshuffle).
fn keep_slots(old: &Set, want: &mut Set) {
    let Some(prefix) = want.decl.slot_prefix_len() else { return };
    let group = |elements: &BTreeMap<Blob, Elem>| {
        let mut groups: BTreeMap<Blob, Vec<(Blob, Elem)>> = BTreeMap::new();
        for (k, e) in elements {
            groups.entry(k.prefix(prefix)).or_default().push((*k, e.clone()));
        }
        groups
    };
    let old_groups = group(&old.elements);
    if old_groups.is_empty() {
        return;
    }
    let mut adjusted = BTreeMap::new();
    for (gkey, mut members) in group(&want.elements) {
        if let Some(old_members) = old_groups.get(&gkey)
            && old_members.len() == members.len()
            && old_members.iter().map(|m| m.0).eq(members.iter().map(|m| m.0))
        {
            // Same slots on both sides: keep every endpoint that stays where it is, and put the
            // newcomers into the slots that were freed.
            let mut wanted: Vec<Elem> = members.iter().map(|m| m.1.clone()).collect();
            let mut free = Vec::new();
            for (slot_key, elem) in old_members {
                if let Some(pos) = wanted.iter().position(|w| w == elem) {
                    wanted.swap_remove(pos);
                    adjusted.insert(*slot_key, elem.clone());
                } else {
                    free.push(*slot_key);
                }
            }
            for (slot_key, elem) in free.into_iter().zip(wanted) {
                adjusted.insert(slot_key, elem);
            }
            continue;
        }
        for (k, e) in members.drain(..) {
            adjusted.insert(k, e);
        }
    }
    want.elements = Arc::new(adjusted);
}
