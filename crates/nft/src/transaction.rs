//! A transaction: the typed operations one sync sends to the kernel in one batch.

use crate::rule::Rule;
use crate::ruleset::{BaseChain, Blob, Elem, Elements, SetDecl, Table};
use std::fmt;

/// Elements to add: a list, or every element of a set (shared with the ruleset, not copied).
#[derive(Clone, Debug, PartialEq)]
pub enum ElementList {
    /// These elements.
    List(Vec<(Blob, Elem)>),
    /// All elements of a (new) set.
    All(Elements),
}

impl ElementList {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ElementList::List(v) => v.len(),
            ElementList::All(m) => m.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in key order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&Blob, &Elem)> + '_> {
        match self {
            ElementList::List(v) => Box::new(v.iter().map(|(k, e)| (k, e))),
            ElementList::All(m) => Box::new(m.iter()),
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
}

impl Op {
    /// How many kernel objects this operation touches: one per element, one otherwise. This is
    /// the number upstream kube-proxy's tests count.
    pub fn objects(&self) -> usize {
        match self {
            Op::AddElements { elements, .. } => elements.len(),
            Op::DeleteElements { keys, .. } => keys.len(),
            _ => 1,
        }
    }

    /// A short description for error messages: what, and on which object.
    pub fn describe(&self) -> String {
        match self {
            Op::AddTable(t) => format!("add table {}", t.name),
            Op::DeleteTable => "delete table".into(),
            Op::AddChain { name, .. } => format!("add chain {name}"),
            Op::FlushChain(name) => format!("flush chain {name}"),
            Op::DeleteChain(name) => format!("delete chain {name}"),
            Op::AddRule { chain, rule } => format!("add rule to chain {chain}: {}", crate::text::rule_text(rule)),
            Op::AddSet(d) => format!("add set {}", d.name),
            Op::DeleteSet(name) => format!("delete set {name}"),
            Op::AddElements { set, elements, .. } => format!("add {} element(s) to {set}", elements.len()),
            Op::DeleteElements { set, keys, .. } => format!("delete {} element(s) from {set}", keys.len()),
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
}

impl fmt::Display for Transaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::script(self))
    }
}
