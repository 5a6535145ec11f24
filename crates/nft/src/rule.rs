//! Rules as a small nft syntax tree: the vocabulary of rules verdict writes.
//!
//! A rule is a sequence of [`Item`]s, matches and statements in the order nft prints them. The
//! same tree is printed by `text`, lowered to kernel expressions by `lower`, raised back from a
//! kernel dump by `raise`, and evaluated by `explain`.

use crate::primitives::{Blob, Datatype, Verdict, padded};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use verdict_net::{Cidr, IpFamily};

/// A value a rule can load from a packet (nft's left-hand expressions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Selector {
    /// `ip saddr` / `ip6 saddr`.
    Saddr(IpFamily),
    /// `ip daddr` / `ip6 daddr`.
    Daddr(IpFamily),
    /// `meta l4proto`.
    L4Proto,
    /// `th dport`: the destination port of TCP, UDP or SCTP.
    ThDport,
    /// `meta mark`.
    Mark,
    /// `iifname`.
    IifName,
    /// `numgen random mod N`.
    Numgen(u32),
    /// `fib saddr type`.
    FibSaddrType,
    /// `fib daddr type`.
    FibDaddrType,
    /// `ct state`.
    CtState,
    /// `ct status`.
    CtStatus,
}

impl Selector {
    /// The datatype this selector yields.
    pub fn datatype(self) -> Datatype {
        match self {
            Selector::Saddr(IpFamily::V4) | Selector::Daddr(IpFamily::V4) => Datatype::Ipv4Addr,
            Selector::Saddr(IpFamily::V6) | Selector::Daddr(IpFamily::V6) => Datatype::Ipv6Addr,
            Selector::L4Proto => Datatype::InetProto,
            Selector::ThDport => Datatype::InetService,
            Selector::Mark => Datatype::Mark,
            Selector::IifName => Datatype::Ifname,
            Selector::Numgen(_) => Datatype::Integer,
            Selector::FibSaddrType | Selector::FibDaddrType => Datatype::FibAddrType,
            Selector::CtState => Datatype::CtState,
            Selector::CtStatus => Datatype::CtStatus,
        }
    }

    /// The address family a selector is specific to, if any.
    pub fn family(self) -> Option<IpFamily> {
        match self {
            Selector::Saddr(f) | Selector::Daddr(f) => Some(f),
            _ => None,
        }
    }
}

/// A constant in a rule or a set element part.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// An address.
    Addr(IpAddr),
    /// An IP protocol number.
    Proto(u8),
    /// A port.
    Port(u16),
    /// A 32-bit integer (marks, numgen slots).
    Int(u32),
    /// `fib ... type local`.
    Local,
    /// An interface name.
    Ifname(String),
}

impl Value {
    /// Appends the value in the kernel's byte layout.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut buf = [0u8; 16];
        let n = self.encode_into(&mut buf);
        out.extend_from_slice(&buf[..n]);
    }

    /// Writes the value in the kernel's byte layout into `out` (at least 16 bytes) and returns
    /// its length.
    pub fn encode_into(&self, out: &mut [u8]) -> usize {
        let mut put = |b: &[u8]| {
            out[..b.len()].copy_from_slice(b);
            b.len()
        };
        match self {
            Value::Addr(IpAddr::V4(a)) => put(&a.octets()),
            Value::Addr(IpAddr::V6(a)) => put(&a.octets()),
            Value::Proto(p) => put(&[*p]),
            Value::Port(p) => put(&p.to_be_bytes()),
            Value::Int(i) => put(&i.to_ne_bytes()),
            Value::Local => put(&RTN_LOCAL.to_ne_bytes()),
            Value::Ifname(name) => {
                let mut b = [0u8; 16];
                let n = name.len().min(15);
                b[..n].copy_from_slice(&name.as_bytes()[..n]);
                put(&b)
            }
        }
    }

    /// Decodes one value of `ty` from the start of `bytes`.
    pub fn decode(ty: Datatype, bytes: &[u8]) -> Option<Value> {
        let take4 = || bytes.get(..4).map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
        Some(match ty {
            Datatype::Ipv4Addr => Value::Addr(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes.get(..4)?).ok()?))),
            Datatype::Ipv6Addr => Value::Addr(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes.get(..16)?).ok()?))),
            Datatype::InetProto => Value::Proto(*bytes.first()?),
            Datatype::InetService => Value::Port(u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?)),
            Datatype::Mark | Datatype::Integer | Datatype::CtState | Datatype::CtStatus => Value::Int(take4()?),
            Datatype::FibAddrType => {
                if take4()? == RTN_LOCAL {
                    Value::Local
                } else {
                    return None;
                }
            }
            Datatype::Ifname => {
                let raw = bytes.get(..16)?;
                let end = raw.iter().position(|b| *b == 0).unwrap_or(16);
                Value::Ifname(String::from_utf8(raw[..end].to_vec()).ok()?)
            }
        })
    }
}

/// The routing type `local` that `fib ... type` compares against.
pub(crate) const RTN_LOCAL: u32 = 2;

/// Encodes a concatenation of values in the kernel's layout (each part padded to 4 bytes, a
/// lone value unpadded).
pub fn encode_concat(values: &[Value]) -> Blob {
    let mut buf = [0u8; Blob::MAX + 16];
    if let [single] = values {
        let n = single.encode_into(&mut buf);
        return Blob::new(&buf[..n]);
    }
    let mut len = 0;
    for v in values {
        len = padded(len + v.encode_into(&mut buf[len..]));
    }
    Blob::new(&buf[..len])
}

/// Decodes a concatenation laid out by [`encode_concat`].
pub(crate) fn decode_concat(types: &[Datatype], blob: &[u8]) -> Option<Vec<Value>> {
    if let [single] = types {
        return Value::decode(*single, blob).map(|v| vec![v]);
    }
    let mut out = Vec::with_capacity(types.len());
    let mut offset = 0;
    for ty in types {
        out.push(Value::decode(*ty, blob.get(offset..)?)?);
        offset += padded(ty.bytes());
    }
    (offset == blob.len()).then_some(out)
}

/// A rule: matches and statements, in order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Rule {
    /// Matches and statements as nft prints them.
    pub items: Vec<Item>,
    /// Rule comment.
    pub comment: Option<String>,
}

impl Rule {
    /// A rule from items.
    pub fn new(items: Vec<Item>) -> Rule {
        Rule { items, comment: None }
    }

    /// With a comment.
    pub fn comment(mut self, c: &str) -> Rule {
        self.comment = Some(c.to_string());
        self
    }

    /// Chains this rule jumps or goes to.
    pub fn chain_refs(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|item| match item {
            Item::Stmt(Stmt::Verdict(v)) => v.chain(),
            _ => None,
        })
    }

    /// Named sets this rule uses.
    pub fn set_refs(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|item| match item {
            Item::Match(Match::InSet { set, .. }) => Some(set.as_str()),
            Item::Stmt(Stmt::Vmap { map, .. }) => Some(map.as_str()),
            Item::Stmt(Stmt::Dnat { target: DnatTarget::Map { map, .. }, .. }) => Some(map.as_str()),
            Item::Stmt(Stmt::Update { set, .. }) => Some(set.as_str()),
            _ => None,
        })
    }

    /// Flowtables this rule offloads to.
    pub fn flowtable_refs(&self) -> impl Iterator<Item = &str> {
        self.items.iter().filter_map(|item| match item {
            Item::Stmt(Stmt::FlowAdd { flowtable }) => Some(flowtable.as_str()),
            _ => None,
        })
    }
}

/// One part of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A condition; the rule stops here when it does not hold.
    Match(Match),
    /// An action.
    Stmt(Stmt),
}

/// How a match compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `==` (printed as nothing).
    Eq,
    /// `!=`.
    Neq,
}

/// A condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// `<selector> [!=] <value>`.
    Cmp {
        /// What is compared.
        left: Selector,
        /// Equal or not.
        op: Op,
        /// The constant.
        right: Value,
    },
    /// `ip saddr [!=] 10.0.0.0/8`.
    Prefix {
        /// An address selector.
        left: Selector,
        /// Inside or not.
        op: Op,
        /// The network.
        net: Cidr,
    },
    /// `iifname [!=] "veth*"`.
    IfnamePrefix {
        /// Matches or not.
        op: Op,
        /// The name prefix (without the `*`).
        prefix: String,
    },
    /// `ct state new`, `ct status dnat`: at least one of the flag bits is set.
    Flags {
        /// `ct state` or `ct status`.
        left: Selector,
        /// The flag bits.
        flags: u32,
    },
    /// `meta mark & 0x00004000 [!=] 0x00000000`.
    Masked {
        /// The selector (a mark).
        left: Selector,
        /// The mask.
        mask: u32,
        /// Equal or not.
        op: Op,
        /// The value after masking.
        right: u32,
    },
    /// `ip daddr . meta l4proto . th dport [!=] @set`.
    InSet {
        /// The key parts.
        key: Vec<Selector>,
        /// The named set.
        set: String,
        /// In (`Eq`) or not in (`Neq`).
        op: Op,
    },
    /// `meta l4proto { tcp, udp, sctp }`.
    InAnonSet {
        /// The selector.
        left: Selector,
        /// The constants.
        values: Vec<Value>,
    },
}

/// Where `dnat` sends a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnatTarget {
    /// One fixed address and port.
    Addr {
        /// Address.
        addr: IpAddr,
        /// Port.
        port: u16,
    },
    /// `<key> map @map` yielding `addr . port`.
    Map {
        /// The key parts.
        key: Vec<Selector>,
        /// The map.
        map: String,
    },
}

/// The kind of ICMP error `reject` sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// `reject`: port unreachable of the packet's own family (ICMPX).
    PortUnreachable,
    /// `reject with icmp port-unreachable` (IPv4 context).
    Icmp,
    /// `reject with icmpv6 port-unreachable` (IPv6 context).
    Icmpv6,
}

/// An action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// A verdict.
    Verdict(Verdict),
    /// `<key> vmap @map`.
    Vmap {
        /// The key parts.
        key: Vec<Selector>,
        /// The verdict map.
        map: String,
    },
    /// `<selector> vmap { value : verdict, ... }`.
    AnonVmap {
        /// The key.
        key: Selector,
        /// The entries.
        entries: Vec<(Value, Verdict)>,
    },
    /// `meta mark set meta mark | <bits>`.
    MarkOr(u32),
    /// `meta mark set meta mark ^ <bits>`.
    MarkXor(u32),
    /// `dnat ip[6] to ...`.
    Dnat {
        /// Address family of the translation.
        family: IpFamily,
        /// The target.
        target: DnatTarget,
    },
    /// `masquerade [fully-random]`.
    Masquerade {
        /// `fully-random` source ports.
        fully_random: bool,
    },
    /// `reject ...`.
    Reject(Reject),
    /// `counter`.
    Counter,
    /// `meta nftrace set 1`: the kernel reports every rule the packet passes from here on
    /// (`verdict trace`'s temporary chains; never rendered).
    NfTrace,
    /// `update @set { <selector> }`.
    Update {
        /// The dynamic set.
        set: String,
        /// The key.
        key: Selector,
    },
    /// `flow add @<flowtable>`: the packet's connection is offloaded to the flowtable, whose
    /// ingress hook forwards its later packets without the netfilter hooks.
    FlowAdd {
        /// The flowtable.
        flowtable: String,
    },
}

/// Shorthands that keep the renderer readable.
pub mod build {
    use super::*;

    /// `<sel> <value>`.
    pub fn is(left: Selector, right: Value) -> Item {
        Item::Match(Match::Cmp { left, op: Op::Eq, right })
    }
    /// `<sel> != <value>`.
    pub fn is_not(left: Selector, right: Value) -> Item {
        Item::Match(Match::Cmp { left, op: Op::Neq, right })
    }
    /// `<sel> [!=] <net>`.
    pub fn in_net(left: Selector, op: Op, net: Cidr) -> Item {
        Item::Match(Match::Prefix { left, op, net })
    }
    /// `<key> @set`.
    pub fn in_set(key: &[Selector], set: &str) -> Item {
        Item::Match(Match::InSet { key: key.to_vec(), set: set.to_string(), op: Op::Eq })
    }
    /// `ct state new`.
    pub fn ct_state_new() -> Item {
        Item::Match(Match::Flags { left: Selector::CtState, flags: CT_STATE_NEW })
    }
    /// `ct state invalid`: conntrack could not make sense of the packet (e.g. a TCP segment
    /// outside the window).
    pub fn ct_state_invalid() -> Item {
        Item::Match(Match::Flags { left: Selector::CtState, flags: CT_STATE_INVALID })
    }
    /// `ct state established`.
    pub fn ct_state_established() -> Item {
        Item::Match(Match::Flags { left: Selector::CtState, flags: CT_STATE_ESTABLISHED })
    }
    /// `ct status dnat`.
    pub fn ct_status_dnat() -> Item {
        Item::Match(Match::Flags { left: Selector::CtStatus, flags: CT_STATUS_DNAT })
    }
    /// `meta l4proto { tcp, udp, sctp }`.
    pub fn l4proto_any() -> Item {
        Item::Match(Match::InAnonSet {
            left: Selector::L4Proto,
            values: verdict_net::Protocol::ALL.iter().map(|p| Value::Proto(p.number())).collect(),
        })
    }
    /// A verdict statement.
    pub fn verdict(v: Verdict) -> Item {
        Item::Stmt(Stmt::Verdict(v))
    }
    /// `jump <chain>`.
    pub fn jump(chain: &str) -> Item {
        verdict(Verdict::Jump(Arc::from(chain)))
    }
    /// `goto <chain>`.
    pub fn goto(chain: &str) -> Item {
        verdict(Verdict::Goto(Arc::from(chain)))
    }
    /// `<key> vmap @map`.
    pub fn vmap(key: &[Selector], map: &str) -> Item {
        Item::Stmt(Stmt::Vmap { key: key.to_vec(), map: map.to_string() })
    }
    /// A statement.
    pub fn stmt(s: Stmt) -> Item {
        Item::Stmt(s)
    }
}

/// `ct state invalid` bit.
pub(crate) const CT_STATE_INVALID: u32 = 1;
/// `ct state new` bit.
pub(crate) const CT_STATE_NEW: u32 = 8;
/// `ct state established` bit.
pub(crate) const CT_STATE_ESTABLISHED: u32 = 2;
/// `ct status dnat` bit.
pub(crate) const CT_STATUS_DNAT: u32 = 0x20;
