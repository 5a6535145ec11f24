//! The nftables objects verdict owns, as plain data: one table, its chains and its sets.
//!
//! A [`Ruleset`] is what verdict-layout's `render` produces from the model, what `observe` reads back from the
//! kernel, and what `diff` compares. Element keys and data are kept in the kernel's own byte
//! layout ([`Blob`]), so 10^6 elements stay compact and need no conversion to be sent.

pub use crate::elements::ElementMap;
pub use crate::primitives::{Blob, Datatype, Elem, ElemData, Verdict};
/// Layout arithmetic, at its old path for `netlink/` (elsewhere: `crate::primitives`).
pub(crate) use crate::primitives::{concat_len, concat_type_id, padded};
use crate::rule::{Rule, Selector};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The default table name, as upstream kube-proxy's.
pub const DEFAULT_TABLE: &str = "kube-proxy";

/// One `inet` table and everything in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// The table itself.
    pub table: Table,
    /// Chains by name.
    pub chains: BTreeMap<String, Chain>,
    /// Named sets and maps by name (anonymous sets live inside the rules that use them).
    pub sets: BTreeMap<String, Set>,
    /// Flowtables by name (the opt-in fast path; none by default).
    pub flowtables: BTreeMap<String, Flowtable>,
}

impl Ruleset {
    /// An empty table.
    pub fn new(table: Table) -> Ruleset {
        Ruleset { table, chains: BTreeMap::new(), sets: BTreeMap::new(), flowtables: BTreeMap::new() }
    }

    /// Total number of set and map elements.
    pub fn element_count(&self) -> usize {
        self.sets.values().map(|s| s.elements.len()).sum()
    }

    /// Whether two rulesets program the same behaviour: equal except for set capacities
    /// (`size`, a sizing hint chosen at creation) and for which slot of an endpoint map holds
    /// which endpoint (the slot is chosen at random per connection, so only the multiset of a
    /// Service's endpoints matters), and for the elements of dynamic sets, which the packet
    /// path fills.
    pub fn equivalent(&self, other: &Ruleset) -> bool {
        if self.table != other.table || self.chains != other.chains {
            return false;
        }
        if !self
            .flowtables
            .values()
            .map(Flowtable::declaration)
            .eq(other.flowtables.values().map(Flowtable::declaration))
        {
            return false;
        }
        if self.sets.len() != other.sets.len() {
            return false;
        }
        self.sets.iter().zip(other.sets.iter()).all(|((na, a), (nb, b))| {
            let dynamic = a.decl.timeout.is_some();
            na == nb
                && a.decl.same_except_size(&b.decl)
                && (dynamic || a.canonical_elements() == b.canonical_elements())
        })
    }
}

/// The table: always family `inet`, so IPv4 and IPv6 live side by side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Table name.
    pub name: String,
    /// Table comment.
    pub comment: Option<String>,
}

impl Default for Table {
    fn default() -> Self {
        Table { name: DEFAULT_TABLE.to_string(), comment: Some("rules for kube-proxy".to_string()) }
    }
}

/// A flowtable: the software fast path that forwards the later packets of an offloaded
/// connection from the ingress hook of `devices`, past routing and the netfilter hooks.
///
/// Its devices are not part of what a sync renders: they are the node's interfaces of the
/// moment, which come and go with pods, so `diff` creates the flowtable bare and
/// [`Flowtable::device_changes`] joins and removes them in transactions of their own, which a
/// vanished interface can fail without failing a Service change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flowtable {
    /// Flowtable name.
    pub name: String,
    /// The ingress hook's priority.
    pub priority: i32,
    /// The interfaces whose ingress hook looks up offloaded flows (as read from the kernel).
    pub devices: std::collections::BTreeSet<String>,
}

impl Flowtable {
    /// A flowtable at the ingress hook with priority `filter` and no devices.
    pub fn new(name: impl Into<String>) -> Flowtable {
        Flowtable { name: name.into(), priority: 0, devices: Default::default() }
    }

    /// What `diff` compares: everything but the devices.
    pub fn declaration(&self) -> (&str, i32) {
        (&self.name, self.priority)
    }

    /// The devices to add and to remove so that the flowtable holds `wanted`.
    pub fn device_changes(&self, wanted: &std::collections::BTreeSet<String>) -> (Vec<String>, Vec<String>) {
        let add = wanted.difference(&self.devices).cloned().collect();
        let remove = self.devices.difference(wanted).cloned().collect();
        (add, remove)
    }
}

/// A chain: a list of rules, and a hook when it is a base chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Chain name.
    pub name: String,
    /// Set for base chains.
    pub base: Option<BaseChain>,
    /// The rules, in order.
    pub rules: Vec<Rule>,
}

impl Chain {
    /// A regular chain.
    pub fn regular(name: impl Into<String>, rules: Vec<Rule>) -> Chain {
        Chain { name: name.into(), base: None, rules }
    }

    /// A base chain with policy accept.
    pub fn base(name: impl Into<String>, kind: ChainKind, hook: Hook, priority: i32, rules: Vec<Rule>) -> Chain {
        Chain { name: name.into(), base: Some(BaseChain { kind, hook, priority }), rules }
    }
}

/// How a base chain is attached to the netfilter hooks (policy accept: a chain read from the
/// kernel with another policy is read as no base chain, see `observe::base_chain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BaseChain {
    /// `type filter` or `type nat`.
    pub kind: ChainKind,
    /// The hook.
    pub hook: Hook,
    /// The priority (dstnat = -100, filter = 0, srcnat = 100).
    pub priority: i32,
}

/// The chain type of a base chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChainKind {
    /// `type filter`.
    Filter,
    /// `type nat`.
    Nat,
}

impl ChainKind {
    /// nft's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            ChainKind::Filter => "filter",
            ChainKind::Nat => "nat",
        }
    }
}

/// A netfilter hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    /// `prerouting`.
    Prerouting,
    /// `input`.
    Input,
    /// `forward`.
    Forward,
    /// `output`.
    Output,
    /// `postrouting`.
    Postrouting,
}

impl Hook {
    /// The kernel's hook number (NF_INET_*).
    pub fn number(self) -> u32 {
        match self {
            Hook::Prerouting => 0,
            Hook::Input => 1,
            Hook::Forward => 2,
            Hook::Output => 3,
            Hook::Postrouting => 4,
        }
    }

    /// The hook with a kernel hook number.
    pub fn from_number(n: u32) -> Option<Hook> {
        [Hook::Prerouting, Hook::Input, Hook::Forward, Hook::Output, Hook::Postrouting]
            .into_iter()
            .find(|h| h.number() == n)
    }

    /// nft's name for the hook.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// Elements by key. Shared, so that a transaction can send a whole set without copying a
/// million elements; changed with `Arc::make_mut`.
pub type Elements = Arc<ElementMap>;

/// A named set or map and its elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    /// The declaration.
    pub decl: SetDecl,
    /// Elements by key.
    pub elements: Elements,
}

impl Set {
    /// An empty set.
    pub fn new(decl: SetDecl) -> Set {
        Set { decl, elements: Arc::new(ElementMap::new()) }
    }

    /// The elements with slot-keyed groups sorted by value, so that two maps holding the same
    /// endpoints in different slots compare equal (see [`Ruleset::equivalent`]).
    pub fn canonical_elements(&self) -> BTreeMap<Blob, Elem> {
        let Some(prefix) = self.decl.slot_prefix_len() else {
            return self.elements.iter().collect();
        };
        let mut groups: BTreeMap<Blob, Vec<(Blob, Elem)>> = BTreeMap::new();
        for (key, elem) in self.elements.iter() {
            groups.entry(key.prefix(prefix)).or_default().push((key, elem));
        }
        let mut out = BTreeMap::new();
        for mut members in groups.into_values() {
            let mut keys: Vec<Blob> = members.iter().map(|m| m.0).collect();
            keys.sort();
            members.sort_by(|a, b| a.1.cmp(&b.1));
            for (key, (_, elem)) in keys.into_iter().zip(members) {
                out.insert(key, elem);
            }
        }
        out
    }
}

/// How a set or map is declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDecl {
    /// Name.
    pub name: String,
    /// The key.
    pub key: KeySpec,
    /// The data, for maps.
    pub data: Option<DataSpec>,
    /// `size`: the capacity the kernel sizes its hash table for (also a hard maximum).
    pub size: Option<u32>,
    /// `flags dynamic,timeout` with this `timeout` in seconds (affinity sets).
    pub timeout: Option<u32>,
    /// Comment.
    pub comment: Option<String>,
    /// `counter`: every element carries a counter of the lookups that hit it (the per-Service
    /// connection counters).
    pub counter: bool,
}

impl SetDecl {
    /// A set keyed by `key`.
    pub fn set(name: &str, key: KeySpec) -> SetDecl {
        SetDecl { name: name.to_string(), key, data: None, size: None, timeout: None, comment: None, counter: false }
    }

    /// A map from `key` to `data`.
    pub fn map(name: &str, key: KeySpec, data: DataSpec) -> SetDecl {
        SetDecl { data: Some(data), ..SetDecl::set(name, key) }
    }

    /// With a comment.
    pub fn with_comment(mut self, comment: &str) -> SetDecl {
        self.comment = Some(comment.to_string());
        self
    }

    /// With a counter on every element.
    pub fn with_counter(mut self) -> SetDecl {
        self.counter = true;
        self
    }

    /// With a capacity.
    pub fn with_size(mut self, size: u32) -> SetDecl {
        self.size = Some(size);
        self
    }

    /// Equal but for the capacity.
    pub fn same_except_size(&self, other: &SetDecl) -> bool {
        SetDecl { size: None, ..self.clone() } == SetDecl { size: None, ..other.clone() }
    }

    /// For maps whose key ends in `numgen random mod N` (endpoint maps): the length of the key
    /// before that slot number. Elements that share it belong to one Service address.
    pub fn slot_prefix_len(&self) -> Option<usize> {
        match &self.key {
            KeySpec::Typeof(sels) if matches!(sels.last(), Some(Selector::Numgen(_))) => {
                Some(sels[..sels.len() - 1].iter().map(|s| padded(s.datatype().bytes())).sum())
            }
            _ => None,
        }
    }

    /// The key's datatypes.
    pub fn key_types(&self) -> Vec<Datatype> {
        self.key.datatypes()
    }

    /// The byte length of a key.
    pub fn key_len(&self) -> usize {
        concat_len(&self.key_types())
    }
}

/// A set key declaration: `type a . b` or `typeof expr . expr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySpec {
    /// `type ...`.
    Type(Vec<Datatype>),
    /// `typeof ...` (needed when a part has no fixed-size named type, such as `numgen`).
    Typeof(Vec<Selector>),
}

impl KeySpec {
    /// The datatypes of the parts.
    pub fn datatypes(&self) -> Vec<Datatype> {
        match self {
            KeySpec::Type(t) => t.clone(),
            KeySpec::Typeof(s) => s.iter().map(|s| s.datatype()).collect(),
        }
    }
}

/// What a map maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSpec {
    /// A verdict (`vmap`).
    Verdict,
    /// `typeof ...` values.
    Typeof(Vec<Selector>),
}

impl DataSpec {
    /// The datatypes of the data parts (empty for verdicts).
    pub fn datatypes(&self) -> Vec<Datatype> {
        match self {
            DataSpec::Verdict => Vec::new(),
            DataSpec::Typeof(s) => s.iter().map(|s| s.datatype()).collect(),
        }
    }
}
