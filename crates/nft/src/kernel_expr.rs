//! Kernel expressions: the form a rule takes on the wire, one variant per nf_tables expression
//! verdict uses. `lower` produces these from the rule tree, the netlink glue encodes and
//! decodes them, and `raise` turns them back into rules.
//!
//! (This was `low.rs`, a name that read as a typo of `lower.rs` beside it.)

/// A rule as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LowRule {
    /// The expressions in order.
    pub exprs: Vec<LowExpr>,
    /// Anonymous sets the rule's lookups use, referred to by index from [`SetRef::Anon`].
    pub anon_sets: Vec<AnonSet>,
    /// Rule comment.
    pub comment: Option<String>,
}

/// How a lookup names its set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetRef {
    /// A named set.
    Named(String),
    /// The n-th anonymous set of the same rule.
    Anon(usize),
}

/// A constant anonymous set (`{ tcp, udp, sctp }`) or map (`{ 0 : goto a, 1 : goto b }`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnonSet {
    /// Key datatype.
    pub key_type: crate::ruleset::Datatype,
    /// The selector the key came from (nft records it as the set's `typeof`).
    pub key_selector: crate::rule::Selector,
    /// Whether the elements carry verdicts.
    pub verdict_map: bool,
    /// Keys (and verdicts for maps).
    pub elements: Vec<(Vec<u8>, Option<crate::ruleset::Verdict>)>,
}

/// Immediate data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImmData {
    /// A verdict code and, for jump/goto, a chain.
    Verdict(i32, Option<String>),
    /// Bytes.
    Value(Vec<u8>),
}

/// One nf_tables expression.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // fields mirror the kernel's NFTA_* attributes one to one
pub enum LowExpr {
    Meta { key: u32, dreg: u32 },
    MetaSet { key: u32, sreg: u32 },
    Payload { base: u32, offset: u32, len: u32, dreg: u32 },
    Cmp { sreg: u32, op: u32, data: Vec<u8> },
    Bitwise { sreg: u32, dreg: u32, len: u32, mask: Vec<u8>, xor: Vec<u8> },
    Lookup { sreg: u32, dreg: Option<u32>, set: SetRef, invert: bool },
    Immediate { dreg: u32, data: ImmData },
    Numgen { dreg: u32, modulus: u32, kind: u32, offset: u32 },
    Ct { key: u32, dreg: u32 },
    Fib { flags: u32, result: u32, dreg: u32 },
    Nat { kind: u32, family: u32, reg_addr: u32, reg_proto: Option<u32>, flags: Option<u32> },
    Masq { flags: Option<u32> },
    Reject { kind: u32, code: u8 },
    Counter,
    Dynset { op: u32, sreg_key: u32, set: String },
    FlowOffload { flowtable: String },
}
