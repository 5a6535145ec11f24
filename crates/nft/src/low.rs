//! Kernel expressions: the form a rule takes on the wire, one variant per nf_tables expression
//! verdict uses. `lower` produces these from the rule tree, the netlink glue encodes and
//! decodes them, and `raise` turns them back into rules.

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
}

/// Kernel constants (linux/netfilter/nf_tables.h and friends).
#[allow(missing_docs)]
pub mod k {
    pub const NFT_REG_VERDICT: u32 = 0;
    pub const NFT_REG_1: u32 = 1;
    pub const NFT_REG32_00: u32 = 8;

    pub const NFT_META_MARK: u32 = 3;
    pub const NFT_META_IIFNAME: u32 = 6;
    pub const NFT_META_NFTRACE: u32 = 12;
    pub const NFT_META_NFPROTO: u32 = 15;
    pub const NFT_META_L4PROTO: u32 = 16;

    pub const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
    pub const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;

    pub const NFT_CMP_EQ: u32 = 0;
    pub const NFT_CMP_NEQ: u32 = 1;

    pub const NFT_CT_STATE: u32 = 0;
    pub const NFT_CT_STATUS: u32 = 2;

    pub const NFT_NG_RANDOM: u32 = 1;

    pub const NFT_NAT_DNAT: u32 = 1;
    pub const NFPROTO_IPV4: u32 = 2;
    pub const NFPROTO_IPV6: u32 = 10;
    pub const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;

    pub const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
    pub const NFTA_FIB_F_SADDR: u32 = 1;
    pub const NFTA_FIB_F_DADDR: u32 = 2;

    pub const NFT_REJECT_ICMP_UNREACH: u32 = 0;
    pub const NFT_REJECT_ICMPX_UNREACH: u32 = 2;
    pub const ICMP_PORT_UNREACH: u8 = 3;
    pub const ICMPV6_PORT_UNREACH: u8 = 4;
    pub const NFT_REJECT_ICMPX_PORT_UNREACH: u8 = 1;

    pub const NFT_DYNSET_OP_UPDATE: u32 = 1;

    pub const NF_DROP: i32 = 0;
    pub const NF_ACCEPT: i32 = 1;
    pub const NFT_JUMP: i32 = -3;
    pub const NFT_GOTO: i32 = -4;
    pub const NFT_RETURN: i32 = -5;

    /// The kernel's register numbering for a 32-bit slot: whole 128-bit registers keep their
    /// old names (1..4), everything else is NFT_REG32_xx. The kernel dumps registers this way,
    /// and nft sends them this way.
    pub fn reg(slot: usize) -> u32 {
        if slot.is_multiple_of(4) { NFT_REG_1 + (slot / 4) as u32 } else { NFT_REG32_00 + slot as u32 }
    }
}
