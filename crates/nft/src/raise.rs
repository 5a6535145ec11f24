//! Kernel expressions back into the rule tree. Only the shapes `lower` (and nft, for the same
//! text) produce are recognised; anything else is reported as foreign, which makes a rule that
//! somebody else wrote into our table visible instead of silently misread.

use crate::kernel_consts;
use crate::kernel_expr::{AnonSet, ImmData, LowExpr, LowRule, SetRef};
use crate::lower::payload_of;
use crate::rule::{DnatTarget, Item, Match, Op, Reject, Rule, Selector, Stmt, Value};
use crate::ruleset::{Verdict, padded};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use verdict_net::{Cidr, IpFamily};

/// Why a kernel rule could not be read as one of verdict's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expression {index} ({expr}) is not part of any rule shape verdict writes")]
pub struct ForeignRule {
    /// Position of the first unrecognised expression.
    pub index: usize,
    /// The expression, for the log.
    pub expr: String,
}

#[derive(Clone, Debug)]
enum Content {
    /// A selector, possibly loaded with fewer bytes than its full length (prefix matches).
    Sel(Selector, u32),
    /// A selector after `& mask ^ xor`.
    Masked(Selector, u32, Vec<u8>, Vec<u8>),
    /// Immediate bytes.
    Data(Vec<u8>),
    /// The result of a map lookup.
    MapResult(Vec<Selector>, String),
}

/// Raises one kernel rule.
pub fn raise(rule: &LowRule) -> Result<Rule, ForeignRule> {
    let mut r = Raising { rule, pending: Vec::new(), items: Vec::new() };
    let mut i = 0;
    while i < rule.exprs.len() {
        i = r.step(i).ok_or_else(|| ForeignRule { index: i, expr: format!("{:?}", rule.exprs[i]) })?;
    }
    if !r.pending.is_empty() {
        return Err(ForeignRule { index: rule.exprs.len(), expr: "unused register load at the end".into() });
    }
    Ok(Rule { items: r.items, comment: rule.comment.clone() })
}

struct Raising<'a> {
    rule: &'a LowRule,
    /// Registers loaded and not yet used, by 32-bit slot.
    pending: Vec<(usize, Content)>,
    items: Vec<Item>,
}

fn slot(reg: u32) -> usize {
    if (kernel_consts::NFT_REG_1..=4).contains(&reg) {
        ((reg - kernel_consts::NFT_REG_1) * 4) as usize
    } else {
        reg.saturating_sub(kernel_consts::NFT_REG32_00) as usize
    }
}

fn op(kernel_op: u32) -> Option<Op> {
    match kernel_op {
        kernel_consts::NFT_CMP_EQ => Some(Op::Eq),
        kernel_consts::NFT_CMP_NEQ => Some(Op::Neq),
        _ => None,
    }
}

fn selector_of_payload(base: u32, offset: u32) -> Option<Selector> {
    [
        Selector::Saddr(IpFamily::V4),
        Selector::Daddr(IpFamily::V4),
        Selector::Saddr(IpFamily::V6),
        Selector::Daddr(IpFamily::V6),
        Selector::ThDport,
    ]
    .into_iter()
    .find(|s| payload_of(*s).is_some_and(|(b, o, _)| b == base && o == offset))
}

fn u32_of(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

fn addr_of(family: IpFamily, bytes: &[u8]) -> Option<IpAddr> {
    Some(match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
    })
}

/// A partial address (prefix bytes) widened to a full address.
fn widen(family: IpFamily, bytes: &[u8]) -> Option<IpAddr> {
    let full = match family {
        IpFamily::V4 => 4,
        IpFamily::V6 => 16,
    };
    if bytes.len() > full {
        return None;
    }
    let mut b = bytes.to_vec();
    b.resize(full, 0);
    addr_of(family, &b)
}

fn verdict_of(code: i32, chain: &Option<String>) -> Option<Verdict> {
    Some(match (code, chain) {
        (kernel_consts::NF_ACCEPT, None) => Verdict::Accept,
        (kernel_consts::NF_DROP, None) => Verdict::Drop,
        (kernel_consts::NFT_RETURN, None) => Verdict::Return,
        (kernel_consts::NFT_JUMP, Some(c)) => Verdict::Jump(Arc::from(c.as_str())),
        (kernel_consts::NFT_GOTO, Some(c)) => Verdict::Goto(Arc::from(c.as_str())),
        _ => return None,
    })
}

impl Raising<'_> {
    fn take(&mut self, reg: u32) -> Option<Content> {
        let s = slot(reg);
        let pos = self.pending.iter().position(|(p, _)| *p == s)?;
        Some(self.pending.remove(pos).1)
    }

    /// Takes the concatenation that starts at `reg`: every pending load from that slot on.
    fn take_concat(&mut self, reg: u32) -> Option<Vec<Selector>> {
        let mut s = slot(reg);
        let mut key = Vec::new();
        while let Some(pos) = self.pending.iter().position(|(p, _)| *p == s) {
            let Content::Sel(sel, len) = self.pending.remove(pos).1 else { return None };
            if len as usize != sel.datatype().bytes() {
                return None;
            }
            s += padded(sel.datatype().bytes()) / 4;
            key.push(sel);
        }
        (!key.is_empty() && self.pending.is_empty()).then_some(key)
    }

    fn load(&mut self, reg: u32, c: Content) {
        let s = slot(reg);
        self.pending.retain(|(p, _)| *p != s);
        self.pending.push((s, c));
    }

    fn anon<'r>(rule: &'r LowRule, set: &SetRef) -> Option<&'r AnonSet> {
        match set {
            SetRef::Anon(i) => rule.anon_sets.get(*i),
            SetRef::Named(_) => None,
        }
    }

    /// Consumes the expression(s) at `i`; returns the next index.
    fn step(&mut self, i: usize) -> Option<usize> {
        let e = &self.rule.exprs[i];
        match e {
            LowExpr::Meta { key: kernel_consts::NFT_META_NFPROTO, dreg } => {
                // The implicit `meta nfproto` guard nft puts before ip/ip6 header access.
                match self.rule.exprs.get(i + 1)? {
                    LowExpr::Cmp { sreg, op: kernel_consts::NFT_CMP_EQ, data }
                        if sreg == dreg
                            && data.len() == 1
                            && matches!(data[0] as u32, kernel_consts::NFPROTO_IPV4 | kernel_consts::NFPROTO_IPV6) =>
                    {
                        Some(i + 2)
                    }
                    _ => None,
                }
            }
            LowExpr::Meta { key, dreg } => {
                let sel = match *key {
                    kernel_consts::NFT_META_L4PROTO => Selector::L4Proto,
                    kernel_consts::NFT_META_MARK => Selector::Mark,
                    kernel_consts::NFT_META_IIFNAME => Selector::IifName,
                    _ => return None,
                };
                self.load(*dreg, Content::Sel(sel, sel.datatype().bytes() as u32));
                Some(i + 1)
            }
            LowExpr::Payload { base, offset, len, dreg } => {
                let sel = selector_of_payload(*base, *offset)?;
                if *len == 0 || *len as usize > sel.datatype().bytes() {
                    return None;
                }
                self.load(*dreg, Content::Sel(sel, *len));
                Some(i + 1)
            }
            LowExpr::Numgen { dreg, modulus, kind: kernel_consts::NFT_NG_RANDOM, offset: 0 } => {
                self.load(*dreg, Content::Sel(Selector::Numgen(*modulus), 4));
                Some(i + 1)
            }
            LowExpr::Fib { flags, result: kernel_consts::NFT_FIB_RESULT_ADDRTYPE, dreg } => {
                let sel = match *flags {
                    kernel_consts::NFTA_FIB_F_SADDR => Selector::FibSaddrType,
                    kernel_consts::NFTA_FIB_F_DADDR => Selector::FibDaddrType,
                    _ => return None,
                };
                self.load(*dreg, Content::Sel(sel, 4));
                Some(i + 1)
            }
            LowExpr::Ct { key, dreg } => {
                let sel = match *key {
                    kernel_consts::NFT_CT_STATE => Selector::CtState,
                    kernel_consts::NFT_CT_STATUS => Selector::CtStatus,
                    _ => return None,
                };
                self.load(*dreg, Content::Sel(sel, 4));
                Some(i + 1)
            }
            LowExpr::Immediate { dreg: kernel_consts::NFT_REG_VERDICT, data: ImmData::Verdict(code, chain) } => {
                self.items.push(Item::Stmt(Stmt::Verdict(verdict_of(*code, chain)?)));
                Some(i + 1)
            }
            LowExpr::Immediate { dreg, data: ImmData::Value(b) } => {
                self.load(*dreg, Content::Data(b.clone()));
                Some(i + 1)
            }
            LowExpr::Bitwise { sreg, dreg, len, mask, xor } => {
                let Content::Sel(sel, loaded) = self.take(*sreg)? else { return None };
                if loaded != *len {
                    return None;
                }
                self.load(*dreg, Content::Masked(sel, *len, mask.clone(), xor.clone()));
                Some(i + 1)
            }
            LowExpr::Cmp { sreg, op: kop, data } => {
                let op = op(*kop)?;
                let m = match self.take(*sreg)? {
                    Content::Sel(Selector::IifName, len) if (len as usize) == data.len() && data.len() == 16 => {
                        Match::Cmp {
                            left: Selector::IifName,
                            op,
                            right: Value::decode(Selector::IifName.datatype(), data)?,
                        }
                    }
                    Content::Sel(Selector::IifName, _) => {
                        Match::IfnamePrefix { op, prefix: String::from_utf8(data.clone()).ok()? }
                    }
                    Content::Sel(sel, len) if (len as usize) == sel.datatype().bytes() => {
                        if data.len() != len as usize {
                            return None;
                        }
                        Match::Cmp { left: sel, op, right: Value::decode(sel.datatype(), data)? }
                    }
                    Content::Sel(sel, len) => {
                        // A byte-aligned prefix, loaded short.
                        let family = sel.family()?;
                        let net = Cidr::new(widen(family, data)?, (len * 8) as u8)?;
                        Match::Prefix { left: sel, op, net }
                    }
                    Content::Masked(sel @ (Selector::CtState | Selector::CtStatus), 4, mask, xor)
                        if op == Op::Neq && xor == [0; 4] && data.as_slice() == [0; 4] =>
                    {
                        Match::Flags { left: sel, flags: u32_of(&mask)? }
                    }
                    Content::Masked(Selector::Mark, 4, mask, xor) if xor == [0; 4] => {
                        Match::Masked { left: Selector::Mark, mask: u32_of(&mask)?, op, right: u32_of(data)? }
                    }
                    Content::Masked(sel, len, mask, xor) if sel.family().is_some() && xor.iter().all(|b| *b == 0) => {
                        // A prefix that does not end on a byte boundary.
                        let prefix: u32 = mask.iter().map(|b| b.count_ones()).sum();
                        if mask.len() != len as usize || data.len() != len as usize {
                            return None;
                        }
                        let net = Cidr::new(widen(sel.family()?, data)?, prefix as u8)?;
                        Match::Prefix { left: sel, op, net }
                    }
                    _ => return None,
                };
                self.items.push(Item::Match(m));
                Some(i + 1)
            }
            LowExpr::MetaSet { key: kernel_consts::NFT_META_NFTRACE, sreg } => {
                let Content::Data(flag) = self.take(*sreg)? else { return None };
                if flag != [1] {
                    return None;
                }
                self.items.push(Item::Stmt(Stmt::NfTrace));
                Some(i + 1)
            }
            LowExpr::MetaSet { key: kernel_consts::NFT_META_MARK, sreg } => {
                let Content::Masked(Selector::Mark, 4, mask, xor) = self.take(*sreg)? else { return None };
                let (mask, xor) = (u32_of(&mask)?, u32_of(&xor)?);
                let stmt = if mask == !xor {
                    Stmt::MarkOr(xor)
                } else if mask == u32::MAX {
                    Stmt::MarkXor(xor)
                } else {
                    return None;
                };
                self.items.push(Item::Stmt(stmt));
                Some(i + 1)
            }
            LowExpr::Lookup { sreg, dreg, set, invert } => {
                if let Some(anon) = Self::anon(self.rule, set) {
                    let Content::Sel(sel, _) = self.take(*sreg)? else { return None };
                    let mut values = anon
                        .elements
                        .iter()
                        .map(|(b, _)| Value::decode(sel.datatype(), b))
                        .collect::<Option<Vec<_>>>()?;
                    let item = match (dreg, anon.verdict_map, invert) {
                        (None, false, false) => {
                            values.sort();
                            Item::Match(Match::InAnonSet { left: sel, values })
                        }
                        (Some(kernel_consts::NFT_REG_VERDICT), true, false) => {
                            let mut entries = values
                                .into_iter()
                                .zip(anon.elements.iter().map(|(_, v)| v.clone()))
                                .map(|(v, verdict)| Some((v, verdict?)))
                                .collect::<Option<Vec<_>>>()?;
                            entries.sort();
                            Item::Stmt(Stmt::AnonVmap { key: sel, entries })
                        }
                        _ => return None,
                    };
                    self.items.push(item);
                    return Some(i + 1);
                }
                let SetRef::Named(name) = set else { return None };
                let key = self.take_concat(*sreg)?;
                match dreg {
                    None => self.items.push(Item::Match(Match::InSet {
                        key,
                        set: name.clone(),
                        op: if *invert { Op::Neq } else { Op::Eq },
                    })),
                    Some(kernel_consts::NFT_REG_VERDICT) if !invert => {
                        self.items.push(Item::Stmt(Stmt::Vmap { key, map: name.clone() }))
                    }
                    Some(d) if !invert => self.load(*d, Content::MapResult(key, name.clone())),
                    _ => return None,
                }
                Some(i + 1)
            }
            // The kernel reports the range flags it derives from the registers given
            // (NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED); we send none.
            LowExpr::Nat {
                kind: kernel_consts::NFT_NAT_DNAT,
                family,
                reg_addr,
                reg_proto: Some(reg_proto),
                flags: None | Some(3),
            } => {
                let family = match *family {
                    kernel_consts::NFPROTO_IPV4 => IpFamily::V4,
                    kernel_consts::NFPROTO_IPV6 => IpFamily::V6,
                    _ => return None,
                };
                let target = match self.take(*reg_addr)? {
                    Content::MapResult(key, map) => DnatTarget::Map { key, map },
                    Content::Data(a) => {
                        let Content::Data(p) = self.take(*reg_proto)? else { return None };
                        DnatTarget::Addr { addr: addr_of(family, &a)?, port: u16::from_be_bytes(p.try_into().ok()?) }
                    }
                    _ => return None,
                };
                self.items.push(Item::Stmt(Stmt::Dnat { family, target }));
                Some(i + 1)
            }
            LowExpr::Masq { flags } => {
                let fully_random = match flags {
                    None => false,
                    Some(kernel_consts::NF_NAT_RANGE_PROTO_RANDOM_FULLY) => true,
                    Some(_) => return None,
                };
                self.items.push(Item::Stmt(Stmt::Masquerade { fully_random }));
                Some(i + 1)
            }
            LowExpr::Reject { kind, code } => {
                let r = match (*kind, *code) {
                    (kernel_consts::NFT_REJECT_ICMPX_UNREACH, kernel_consts::NFT_REJECT_ICMPX_PORT_UNREACH) => {
                        Reject::PortUnreachable
                    }
                    (kernel_consts::NFT_REJECT_ICMP_UNREACH, kernel_consts::ICMP_PORT_UNREACH) => Reject::Icmp,
                    (kernel_consts::NFT_REJECT_ICMP_UNREACH, kernel_consts::ICMPV6_PORT_UNREACH) => Reject::Icmpv6,
                    _ => return None,
                };
                self.items.push(Item::Stmt(Stmt::Reject(r)));
                Some(i + 1)
            }
            LowExpr::Counter => {
                self.items.push(Item::Stmt(Stmt::Counter));
                Some(i + 1)
            }
            LowExpr::Dynset { op: kernel_consts::NFT_DYNSET_OP_UPDATE, sreg_key, set } => {
                let Content::Sel(key, _) = self.take(*sreg_key)? else { return None };
                self.items.push(Item::Stmt(Stmt::Update { set: set.clone(), key }));
                Some(i + 1)
            }
            LowExpr::FlowOffload { flowtable } => {
                self.items.push(Item::Stmt(Stmt::FlowAdd { flowtable: flowtable.clone() }));
                Some(i + 1)
            }
            _ => None,
        }
    }
}
