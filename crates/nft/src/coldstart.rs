//! A cold start in short transactions that no packet can see half-done.
//!
//! At 100k Services x 10 endpoints a cold start is 1.35 million objects; as one transaction it
//! holds the kernel's nftables commit mutex for over a second, and every other nftables user
//! on the node (the CNI, kubelet, a firewall) waits for it. But a table whose base chains have
//! no rules is never consulted by a packet: its chains, sets and elements can be written in as
//! many transactions as it takes, and the table goes live when its base chains get their rules.
//! So a plan for such a table ([`dormant`]) is [`split`] into transactions of at most
//! [`MAX_OBJECTS`] objects each (the table, chains, sets, elements, the rules of regular
//! chains) and one last, small transaction that adds the base chains' rules: the switch.
//!
//! No objects of other names are involved: an interrupted cold start leaves verdict's own table,
//! partly filled and still dormant, and the next start's reconcile finishes it the same way
//! (its diff against what it reads is again a plan for a dormant table). A live table is never
//! split: there, each transaction would be seen.

use crate::ruleset::Ruleset;
use crate::transaction::{ElementList, Op, Transaction};
use std::collections::BTreeSet;

/// Objects per transaction of a split cold start. The kernel commits about a million elements
/// a second on the machine of docs/benchmarks.md; 50,000 keep each transaction well under
/// 250 ms on a loaded node, and cost a few milliseconds each in per-batch overhead.
pub const MAX_OBJECTS: usize = 50_000;

/// Whether no packet can see `current` (the table as the kernel holds it, `None`: absent): no
/// rule in any base chain, neither in a chain the kernel holds as a base chain nor in one
/// `desired` makes a base chain.
pub fn dormant(current: Option<&Ruleset>, desired: &Ruleset) -> bool {
    current.is_none_or(|table| {
        table.chains.iter().all(|(name, chain)| {
            chain.rules.is_empty()
                || (chain.base.is_none() && desired.chains.get(name).is_none_or(|d| d.base.is_none()))
        })
    })
}

/// `tx`, a plan that makes a [`dormant`] table `desired`, as transactions of at most
/// `max_objects` objects each in the plan's order, followed by one that adds the rules of
/// `desired`'s base chains (the switch). A plan of at most `max_objects` objects stays whole.
pub fn split(tx: Transaction, desired: &Ruleset, max_objects: usize) -> Vec<Transaction> {
    let max_objects = max_objects.max(1);
    if tx.object_count() <= max_objects {
        return vec![tx];
    }
    let base: BTreeSet<&str> = desired.chains.values().filter(|c| c.base.is_some()).map(|c| c.name.as_str()).collect();
    let mut switch = Transaction::new(&tx.table);
    let mut batches = Batches { table: tx.table.clone(), max: max_objects, done: Vec::new(), open: None, filled: 0 };
    for op in tx.ops {
        match op {
            Op::AddRule { ref chain, .. } if base.contains(chain.as_str()) => switch.ops.push(op),
            Op::AddElements { set, decl, elements } => {
                let total = elements.len();
                let mut from = 0;
                while from < total {
                    let n = batches.room().min(total - from);
                    let part = part_of(&elements, from, n);
                    batches.push(Op::AddElements { set: set.clone(), decl: decl.clone(), elements: part }, n);
                    from += n;
                }
            }
            Op::DeleteElements { set, decl, keys } => {
                let mut rest = keys.as_slice();
                while !rest.is_empty() {
                    let (part, tail) = rest.split_at(batches.room().min(rest.len()));
                    let n = part.len();
                    batches.push(Op::DeleteElements { set: set.clone(), decl: decl.clone(), keys: part.to_vec() }, n);
                    rest = tail;
                }
            }
            op => {
                let n = op.objects();
                batches.push(op, n);
            }
        }
    }
    let mut out = batches.finish();
    if !switch.is_empty() {
        out.push(switch);
    }
    out
}

/// Transactions being filled up to `max` objects each.
struct Batches {
    table: String,
    max: usize,
    done: Vec<Transaction>,
    open: Option<Transaction>,
    filled: usize,
}

impl Batches {
    /// Objects the open transaction still takes (a new one is opened when it is full).
    fn room(&mut self) -> usize {
        if self.filled >= self.max {
            self.close();
        }
        self.max - self.filled
    }

    /// Adds `op` (of `n` objects) to the open transaction, or to a new one if it does not fit.
    fn push(&mut self, op: Op, n: usize) {
        if self.filled > 0 && self.filled + n > self.max {
            self.close();
        }
        self.open.get_or_insert_with(|| Transaction::new(&self.table)).ops.push(op);
        self.filled += n;
    }

    fn close(&mut self) {
        self.done.extend(self.open.take());
        self.filled = 0;
    }

    fn finish(mut self) -> Vec<Transaction> {
        self.close();
        self.done
    }
}

/// `n` elements of `elements` from the `from`-th on, without copying a shared map.
fn part_of(elements: &ElementList, from: usize, n: usize) -> ElementList {
    match elements {
        ElementList::All(m) => ElementList::Range { elements: m.clone(), start: from, len: n },
        ElementList::Range { elements, start, .. } => {
            ElementList::Range { elements: elements.clone(), start: start + from, len: n }
        }
        ElementList::List(v) => ElementList::List(v[from..from + n].to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::diff;
    use crate::render::{RenderOptions, render};
    use crate::ruleset::Blob;

    fn desired(services: usize) -> Ruleset {
        let (svcs, slices) = verdict_model::synth::cluster(services, 3, services * 3);
        render(&verdict_model::synth::model(&svcs, &slices).model, &RenderOptions::default())
    }

    /// Every (set, key) a list of transactions adds, in order.
    fn added(txs: &[Transaction]) -> Vec<(String, Blob)> {
        let mut out = Vec::new();
        for op in txs.iter().flat_map(|t| &t.ops) {
            if let Op::AddElements { set, elements, .. } = op {
                out.extend(elements.iter().map(|(k, _)| (set.clone(), k)));
            }
        }
        out
    }

    #[test]
    fn a_cold_start_is_split_into_bounded_transactions_and_the_switch_comes_last() {
        let want = desired(400);
        let whole = diff(None, &want).transaction;
        let objects = whole.object_count();
        assert!(objects > 3000, "{objects}");
        let parts = split(whole.clone(), &want, 1000);
        assert!(parts.len() >= objects / 1000, "{} transactions for {objects} objects", parts.len());
        for (i, t) in parts.iter().enumerate() {
            assert!(t.object_count() <= 1000, "transaction {i}: {} objects", t.object_count());
        }
        assert_eq!(parts.iter().map(Transaction::object_count).sum::<usize>(), objects);
        // The same operations in the same order, but for the base chains' rules, which only the
        // last transaction adds, and all of them.
        let is_switch = |op: &Op| matches!(op, Op::AddRule { chain, .. } if want.chains[chain].base.is_some());
        let (last, before) = parts.split_last().unwrap();
        assert!(last.ops.iter().all(is_switch), "the last transaction only switches: {:?}", last.ops);
        assert!(before.iter().flat_map(|t| &t.ops).all(|op| !is_switch(op)));
        let switch_rules: usize = want.chains.values().filter(|c| c.base.is_some()).map(|c| c.rules.len()).sum();
        assert!(switch_rules > 0);
        assert_eq!(last.ops.len(), switch_rules);
        assert_eq!(added(&parts), added(std::slice::from_ref(&whole)));
        assert_eq!(parts[0].ops[0], Op::AddTable(want.table.clone()));
    }

    #[test]
    fn a_small_plan_stays_one_transaction() {
        let want = desired(5);
        let whole = diff(None, &want).transaction;
        assert_eq!(split(whole.clone(), &want, whole.object_count()), vec![whole]);
    }

    #[test]
    fn a_table_is_dormant_until_a_base_chain_has_a_rule() {
        let want = desired(3);
        assert!(dormant(None, &want));
        assert!(!dormant(Some(&want), &want));
        let mut bare = want.clone();
        for chain in bare.chains.values_mut().filter(|c| c.base.is_some()) {
            chain.rules.clear();
        }
        assert!(dormant(Some(&bare), &want), "rules in regular chains only");
        // A chain the kernel does not hold as a base chain, but that should be one.
        let (name, chain) = want.chains.iter().find(|(_, c)| c.base.is_some()).unwrap();
        let mut odd = bare.clone();
        odd.chains.insert(name.clone(), crate::ruleset::Chain { base: None, ..chain.clone() });
        assert!(!dormant(Some(&odd), &want));
    }

    #[test]
    fn ranges_of_a_map_cover_it_once() {
        let want = desired(300);
        let set = want.sets.values().max_by_key(|s| s.elements.len()).unwrap();
        let all: Vec<_> = set.elements.iter().collect();
        for step in [1, 7, 128, 129, 1000] {
            let mut got = Vec::new();
            let mut from = 0;
            while from < all.len() {
                let n = step.min(all.len() - from);
                got.extend(ElementList::Range { elements: set.elements.clone(), start: from, len: n }.iter());
                from += n;
            }
            assert_eq!(got, all, "step {step}");
        }
        assert_eq!(set.elements.iter_from(all.len()).count(), 0);
    }
}
