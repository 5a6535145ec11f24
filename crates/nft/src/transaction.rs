//! A transaction: the typed operations one sync sends to the kernel in one batch.

use crate::rule::Rule;
use crate::ruleset::{BaseChain, Blob, Elem, Elements, Flowtable, SetDecl, Table};

/// Elements to add: a list, or every element of a set (shared with the ruleset, not copied).
#[derive(Clone, Debug, PartialEq)]
pub enum ElementList {
    /// These elements.
    List(Vec<(Blob, Elem)>),
    /// All elements of a (new) set.
    All(Elements),
    /// `len` elements of a set from its `start`-th on: a share of [`ElementList::All`] when a
    /// cold start is sent in several transactions (see [`crate::coldstart`]).
    Range {
        /// The set's elements.
        elements: Elements,
        /// Index of the first element sent.
        start: usize,
        /// How many.
        len: usize,
    },
}

impl ElementList {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ElementList::List(v) => v.len(),
            ElementList::All(m) => m.len(),
            ElementList::Range { len, .. } => *len,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in key order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (Blob, Elem)> + '_> {
        match self {
            ElementList::List(v) => Box::new(v.iter().cloned()),
            ElementList::All(m) => Box::new(m.iter()),
            ElementList::Range { elements, start, len } => Box::new(elements.iter_from(*start).take(*len)),
        }
    }
}

/// Operations on one table, in the order the kernel must see them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transaction {
    /// The table every operation applies to (family `inet`).
    pub table: String,
    /// The operations.
    pub ops: Vec<Op>,
}

/// One operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Create the table.
    AddTable(Table),
    /// Delete the table and everything in it.
    DeleteTable,
    /// Create a chain (empty).
    AddChain {
        /// Chain name.
        name: String,
        /// Hook, for base chains.
        base: Option<BaseChain>,
    },
    /// Remove every rule of a chain.
    FlushChain(String),
    /// Delete an empty, unreferenced chain.
    DeleteChain(String),
    /// Append a rule.
    AddRule {
        /// The chain.
        chain: String,
        /// The rule.
        rule: Rule,
    },
    /// Create a set or map (empty).
    AddSet(SetDecl),
    /// Delete an unreferenced set or map.
    DeleteSet(String),
    /// Add elements.
    AddElements {
        /// The set.
        set: String,
        /// Its declaration (how keys and data are laid out).
        decl: SetDecl,
        /// Keys and their data.
        elements: ElementList,
    },
    /// Delete elements.
    DeleteElements {
        /// The set.
        set: String,
        /// Its declaration.
        decl: SetDecl,
        /// The keys.
        keys: Vec<Blob>,
    },
    /// Create a flowtable, or add its devices to the one that exists (the kernel keeps the
    /// devices it has and hooks the ones it lacks).
    AddFlowtable(Flowtable),
    /// Unhook these devices from a flowtable.
    DeleteFlowtableDevices {
        /// The flowtable.
        name: String,
        /// The devices.
        devices: Vec<String>,
    },
    /// Delete an unreferenced flowtable.
    DeleteFlowtable(String),
}

impl Op {
    /// How many kernel objects this operation touches: one per element, one otherwise. This is
    /// the number upstream kube-proxy's tests count.
    pub fn objects(&self) -> usize {
        match self {
            Op::AddElements { elements, .. } => elements.len(),
            Op::DeleteElements { keys, .. } => keys.len(),
            Op::DeleteFlowtableDevices { devices, .. } => devices.len(),
            _ => 1,
        }
    }
}

impl Transaction {
    /// An empty transaction on `table`.
    pub fn new(table: &str) -> Transaction {
        Transaction { table: table.to_string(), ops: Vec::new() }
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Total kernel objects touched (see [`Op::objects`]).
    pub fn object_count(&self) -> usize {
        self.ops.iter().map(Op::objects).sum()
    }

    /// Takes out the deletions of chains that go away (not those deleted to be re-added with
    /// another hook), and returns their names. The chains are flushed in this transaction all
    /// the same, so once it commits they are empty and nothing refers to them; a later
    /// transaction deletes them ([`Transaction::delete_chains`]).
    ///
    /// This is for kernels without mainline 628bd3e49cba (6.4; stable 6.1.36, 5.10.188): there,
    /// the elements of an anonymous vmap keep their chains in use until the set is destroyed,
    /// after the commit, so deleting those chains in the transaction that flushes the vmap's
    /// rule fails with `EBUSY`.
    pub(crate) fn take_chain_deletions(&mut self) -> Vec<String> {
        let added: std::collections::BTreeSet<String> = self
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::AddChain { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let (mut taken, mut kept) = (Vec::new(), Vec::new());
        for op in std::mem::take(&mut self.ops) {
            match op {
                Op::DeleteChain(name) if !added.contains(&name) => taken.push(name),
                op => kept.push(op),
            }
        }
        self.ops = kept;
        taken
    }

    /// A transaction that makes flowtable `ft` (as the kernel holds it) hold the devices
    /// `wanted`: those it lacks joined, those not wanted removed. Empty when it holds them.
    pub fn flowtable_devices(table: &str, ft: &Flowtable, wanted: &std::collections::BTreeSet<String>) -> Transaction {
        let (add, remove) = ft.device_changes(wanted);
        let mut tx = Transaction::new(table);
        if !remove.is_empty() {
            tx.ops.push(Op::DeleteFlowtableDevices { name: ft.name.clone(), devices: remove });
        }
        if !add.is_empty() {
            tx.ops.push(Op::AddFlowtable(Flowtable { devices: add.into_iter().collect(), ..ft.clone() }));
        }
        tx
    }

    /// A transaction that deletes these (empty, unreferenced) chains of `table`.
    pub fn delete_chains(table: &str, chains: impl IntoIterator<Item = String>) -> Transaction {
        Transaction { table: table.to_string(), ops: chains.into_iter().map(Op::DeleteChain).collect() }
    }
}

/// Whether unused chains should be deleted in a later transaction from the start on a kernel of
/// this release (as `uname -r` prints it, e.g. `6.1.0-18-amd64`): before 6.4, the first mainline
/// release with the fix (see [`Transaction::take_chain_deletions`]). A guess either way: stable
/// kernels from 6.1.36 and 5.10.188 have the fix backported, and 6.3.y and 6.2.y kernels may or
/// may not; deferring where it is not needed costs a second before an unused chain goes, not
/// deferring where it is needed costs one failed sync (which switches deferring on). A release
/// that does not parse is treated as old.
pub fn kernel_needs_deferred_chain_deletion(release: &str) -> bool {
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) < (6, 4),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_deletions_are_taken_out_but_not_rebased_chains() {
        let mut tx = Transaction::new("kube-proxy");
        tx.ops = vec![
            Op::DeleteChain("nat-prerouting".into()),
            Op::AddChain { name: "nat-prerouting".into(), base: None },
            Op::FlushChain("service-A/ns/tcp/p".into()),
            Op::DeleteSet("affinity-A".into()),
            Op::DeleteChain("service-A/ns/tcp/p".into()),
            Op::FlushChain("endpoint-B/ns/tcp/p__10.0.0.1/80".into()),
            Op::DeleteChain("endpoint-B/ns/tcp/p__10.0.0.1/80".into()),
        ];
        let taken = tx.take_chain_deletions();
        assert_eq!(taken, vec!["service-A/ns/tcp/p".to_string(), "endpoint-B/ns/tcp/p__10.0.0.1/80".to_string()]);
        assert_eq!(tx.ops.len(), 5, "{:?}", tx.ops);
        assert!(matches!(&tx.ops[0], Op::DeleteChain(n) if n == "nat-prerouting"), "a rebased chain stays");
        assert!(tx.ops.iter().filter(|op| matches!(op, Op::FlushChain(_))).count() == 2, "still flushed");

        let later = Transaction::delete_chains("kube-proxy", taken);
        assert_eq!(
            later.ops,
            vec![
                Op::DeleteChain("service-A/ns/tcp/p".into()),
                Op::DeleteChain("endpoint-B/ns/tcp/p__10.0.0.1/80".into())
            ]
        );
    }

    #[test]
    fn kernels_before_6_4_need_deferred_chain_deletion() {
        let old = ["5.15.0-113-generic", "6.1.0-18-amd64", "5.14.0-427.el9.x86_64", "4.19.0", "garbage", ""];
        // Mainline 6.2 and 6.3 lack the fix, which arrived in 6.4.
        for old in old.into_iter().chain(["6.2.0-39-generic", "6.3.13", "6.3.0-rc1"]) {
            assert!(kernel_needs_deferred_chain_deletion(old), "{old}");
        }
        for new in ["6.4.0", "6.8.0-45-generic", "6.18.44", "7.0.1-arch1", "10.0"] {
            assert!(!kernel_needs_deferred_chain_deletion(new), "{new}");
        }
    }
}
