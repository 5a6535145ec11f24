//! A cold start in short transactions that no packet can see half-done.
//!
//! At 100k Services x 10 endpoints a cold start is 1.35 million objects; as one transaction it
//! holds the kernel's nftables commit mutex for over a second, and every other nftables user
//! on the node (the CNI, kubelet, a firewall) waits for it. But a table whose base chains have
//! no rules is never consulted by a packet: its chains, sets and elements can be written in as
//! many transactions as it takes, and the table goes live when its base chains get their rules.
//! So a plan for such a table ([`dormant`]) is [`split`] into transactions of at most
//! [`MAX_OBJECTS`] objects each (the table, chains and sets, the rules of regular chains, then
//! the elements) and one last, small transaction that adds the base chains' rules: the switch.
//!
//! No objects of other names are involved: an interrupted cold start leaves verdict's own table,
//! partly filled and still dormant, and the next start's reconcile finishes it the same way
//! (its diff against what it reads is again a plan for a dormant table). A live table is never
//! split: there, each transaction would be seen.

use crate::ruleset::{DataSpec, Ruleset, SetDecl};
use crate::transaction::{ElementList, Op, Transaction};
use std::collections::BTreeSet;

/// Objects per transaction of a split cold start, weighed by their cost in the kernel (see
/// [`split`]). The kernel commits about 1.2 million plain elements a second on the machine of
/// docs/benchmarks.md: 50,000 are about 40 ms, leaving room for a loaded node under 250 ms,
/// and cost a few milliseconds each in per-batch overhead.
pub const MAX_OBJECTS: usize = 50_000;

/// Slots of a set's `size` that cost the kernel about as much as one element: creating a set
/// allocates and zeroes a hash table for its whole size. On the machine of docs/benchmarks.md a
/// set sized 2,097,152 (the endpoint map at 100k x 10) took 80 ms to create, what 100,000
/// elements take; in the first part with the elements that fit, it made that part the longest
/// (150 ms against 40 ms for the others).
pub const SIZE_PER_OBJECT: u32 = 20;

/// What an element of a verdict map costs the kernel, in elements of other sets, at most: each
/// one's jump or goto is checked against the chains it reaches, when it is added to a map a
/// rule uses or, for those already in, when a rule binds the map. Measured at 100k x 10 on
/// 6.18, 2.9 µs an element against 0.84 µs where the binding rule came after 40,000
/// `service-ips` elements (114 ms); with the rules first (as [`split`] sends them), 0.84 µs
/// like any element. Kernels that check each element's chains as it is added pay it there,
/// in parts weighed for it.
pub const VERDICT_ELEMENT_COST: usize = 3;

fn element_cost(decl: &SetDecl) -> usize {
    match decl.data {
        Some(DataSpec::Verdict) => VERDICT_ELEMENT_COST,
        _ => 1,
    }
}

/// What an operation costs in the kernel, in objects: a set's creation counts its size.
fn cost(op: &Op) -> usize {
    match op {
        Op::AddSet(decl) => decl.size.map_or(1, |size| (size / SIZE_PER_OBJECT).max(1) as usize),
        op => op.objects(),
    }
}

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
/// `max_objects` objects each in the plan's order (weighed by what they cost the kernel: a set's
/// creation by its size, see [`SIZE_PER_OBJECT`], so that a large one gets a transaction of
/// its own; a verdict map's elements by [`VERDICT_ELEMENT_COST`]), followed by one that adds
/// the rules of `desired`'s base chains (the switch). A plan of at most `max_objects` objects
/// stays whole.
pub fn split(tx: Transaction, desired: &Ruleset, max_objects: usize) -> Vec<Transaction> {
    let max_objects = max_objects.max(1);
    if tx.object_count() <= max_objects {
        return vec![tx];
    }
    let base: BTreeSet<&str> = desired.chains.values().filter(|c| c.base.is_some()).map(|c| c.name.as_str()).collect();
    let mut switch = Transaction::new(&tx.table);
    let mut batches = Batches { table: tx.table.clone(), max: max_objects, done: Vec::new(), open: None, filled: 0 };
    for op in rules_before_elements(tx.ops, &base) {
        match op {
            Op::AddRule { ref chain, .. } if base.contains(chain.as_str()) => switch.ops.push(op),
            Op::AddElements { set, decl, elements } => {
                let (total, each) = (elements.len(), element_cost(&decl));
                let mut from = 0;
                while from < total {
                    let n = (batches.room_for(each) / each).min(total - from);
                    let part = part_of(&elements, from, n);
                    batches.push(Op::AddElements { set: set.clone(), decl: decl.clone(), elements: part }, n * each);
                    from += n;
                }
            }
            Op::DeleteElements { set, decl, keys } => {
                let each = element_cost(&decl);
                let mut rest = keys.as_slice();
                while !rest.is_empty() {
                    let (part, tail) = rest.split_at((batches.room_for(each) / each).min(rest.len()));
                    let n = part.len();
                    let op = Op::DeleteElements { set: set.clone(), decl: decl.clone(), keys: part.to_vec() };
                    batches.push(op, n * each);
                    rest = tail;
                }
            }
            op => {
                let n = cost(&op);
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

/// `ops` with the rules of regular chains (not those of `base`) moved ahead of the first
/// element, where every chain and set they refer to exists already. A rule that binds a
/// verdict map makes the kernel check the jump of each element the map holds then, all in
/// the one transaction that holds the rule: 100,000 `service-ips` elements took 88 ms there,
/// the longest part of a cold start at 100k x 10. Bound while still empty, the map has its
/// elements checked as they are added, in the parts that carry them: on 6.18 that costs nothing
/// measurable (16,666 `service-ips` elements take 14 ms either way), and the binding part took
/// 12 ms.
fn rules_before_elements(ops: Vec<Op>, base: &BTreeSet<&str>) -> Vec<Op> {
    let Some(first) = ops.iter().position(|op| matches!(op, Op::AddElements { .. })) else { return ops };
    let regular_rule = |op: &Op| matches!(op, Op::AddRule { chain, .. } if !base.contains(chain.as_str()));
    let mut ops = ops.into_iter();
    let mut out: Vec<Op> = ops.by_ref().take(first).collect();
    let (rules, rest): (Vec<Op>, Vec<Op>) = ops.partition(regular_rule);
    out.extend(rules);
    out.extend(rest);
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
    /// Objects the open transaction still takes, at least `each` (a new one is opened when it
    /// has less room; one larger than `max` gets a transaction of its own).
    fn room_for(&mut self, each: usize) -> usize {
        if self.filled > 0 && self.filled + each > self.max {
            self.close();
        }
        (self.max - self.filled).max(each)
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
