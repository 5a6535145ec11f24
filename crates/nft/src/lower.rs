//! Rule tree to kernel expressions, byte for byte what nft 1.0.6 emits for the same text, so
//! that `nft list` prints our rules exactly as `text` does and `nft -f` of that listing
//! recreates identical bytecode.

use crate::kernel_consts;
use crate::kernel_expr::{AnonSet, ImmData, LowExpr, LowRule, SetRef};
use crate::rule::{DnatTarget, Item, Match, Op, Reject, Rule, Selector, Stmt, Value};
use crate::ruleset::{Verdict, padded};
use std::net::IpAddr;
use verdict_net::IpFamily;

/// Lowers one rule.
pub fn lower(rule: &Rule) -> LowRule {
    let mut l = Lowering { out: LowRule { comment: rule.comment.clone(), ..LowRule::default() }, deps: Vec::new() };
    for item in &rule.items {
        match item {
            Item::Match(m) => l.lower_match(m),
            Item::Stmt(s) => l.lower_stmt(s),
        }
    }
    l.out
}

struct Lowering {
    out: LowRule,
    /// Families whose `meta nfproto` dependency this rule already checked.
    deps: Vec<IpFamily>,
}

fn cmp_op(op: Op) -> u32 {
    match op {
        Op::Eq => kernel_consts::NFT_CMP_EQ,
        Op::Neq => kernel_consts::NFT_CMP_NEQ,
    }
}

/// Where a selector lives in the packet: (base, offset, length) for payload selectors.
pub(crate) fn payload_of(sel: Selector) -> Option<(u32, u32, u32)> {
    use kernel_consts::{NFT_PAYLOAD_NETWORK_HEADER as NH, NFT_PAYLOAD_TRANSPORT_HEADER as TH};
    Some(match sel {
        Selector::Saddr(IpFamily::V4) => (NH, 12, 4),
        Selector::Daddr(IpFamily::V4) => (NH, 16, 4),
        Selector::Saddr(IpFamily::V6) => (NH, 8, 16),
        Selector::Daddr(IpFamily::V6) => (NH, 24, 16),
        Selector::ThDport => (TH, 2, 2),
        _ => return None,
    })
}

fn nfproto(family: IpFamily) -> u32 {
    match family {
        IpFamily::V4 => kernel_consts::NFPROTO_IPV4,
        IpFamily::V6 => kernel_consts::NFPROTO_IPV6,
    }
}

impl Lowering {
    fn push(&mut self, e: LowExpr) {
        self.out.exprs.push(e);
    }

    /// nft guards every `ip`/`ip6` header access in an inet table with a `meta nfproto` check,
    /// once per family per rule, right before the first access.
    fn dependency(&mut self, family: IpFamily) {
        if !self.deps.contains(&family) {
            self.deps.push(family);
            self.push(LowExpr::Meta { key: kernel_consts::NFT_META_NFPROTO, dreg: kernel_consts::NFT_REG_1 });
            self.push(LowExpr::Cmp {
                sreg: kernel_consts::NFT_REG_1,
                op: kernel_consts::NFT_CMP_EQ,
                data: vec![nfproto(family) as u8],
            });
        }
    }

    /// Loads `sel` into register `dreg` (full length unless `len` says fewer bytes).
    fn load(&mut self, sel: Selector, dreg: u32, len: Option<u32>) {
        if let Some(family) = sel.family() {
            self.dependency(family);
        }
        let e = match sel {
            Selector::L4Proto => LowExpr::Meta { key: kernel_consts::NFT_META_L4PROTO, dreg },
            Selector::Mark => LowExpr::Meta { key: kernel_consts::NFT_META_MARK, dreg },
            Selector::IifName => LowExpr::Meta { key: kernel_consts::NFT_META_IIFNAME, dreg },
            Selector::Numgen(modulus) => {
                LowExpr::Numgen { dreg, modulus, kind: kernel_consts::NFT_NG_RANDOM, offset: 0 }
            }
            Selector::FibSaddrType => LowExpr::Fib {
                flags: kernel_consts::NFTA_FIB_F_SADDR,
                result: kernel_consts::NFT_FIB_RESULT_ADDRTYPE,
                dreg,
            },
            Selector::FibDaddrType => LowExpr::Fib {
                flags: kernel_consts::NFTA_FIB_F_DADDR,
                result: kernel_consts::NFT_FIB_RESULT_ADDRTYPE,
                dreg,
            },
            Selector::CtState => LowExpr::Ct { key: kernel_consts::NFT_CT_STATE, dreg },
            Selector::CtStatus => LowExpr::Ct { key: kernel_consts::NFT_CT_STATUS, dreg },
            Selector::Saddr(_) | Selector::Daddr(_) | Selector::ThDport => {
                let (base, offset, full) = payload_of(sel).expect("payload selector");
                LowExpr::Payload { base, offset, len: len.unwrap_or(full), dreg }
            }
        };
        self.push(e);
    }

    /// Loads a concatenation into consecutive 32-bit slots from slot 0 and returns the first
    /// register.
    fn load_concat(&mut self, key: &[Selector]) -> u32 {
        let mut slot = 0;
        for sel in key {
            self.load(*sel, kernel_consts::reg(slot), None);
            slot += padded(sel.datatype().bytes()) / 4;
        }
        kernel_consts::NFT_REG_1
    }

    fn anon(&mut self, set: AnonSet) -> SetRef {
        self.out.anon_sets.push(set);
        SetRef::Anon(self.out.anon_sets.len() - 1)
    }

    fn lower_match(&mut self, m: &Match) {
        let r1 = kernel_consts::NFT_REG_1;
        match m {
            Match::Cmp { left, op, right } => {
                self.load(*left, r1, None);
                let mut data = Vec::new();
                right.encode(&mut data);
                self.push(LowExpr::Cmp { sreg: r1, op: cmp_op(*op), data });
            }
            Match::Prefix { left, op, net } => {
                let full = left.datatype().bytes() as u32 * 8;
                let prefix = net.prefix() as u32;
                let mut addr = Vec::new();
                Value::Addr(net.addr()).encode(&mut addr);
                if prefix == full {
                    self.load(*left, r1, None);
                    self.push(LowExpr::Cmp { sreg: r1, op: cmp_op(*op), data: addr });
                } else if prefix.is_multiple_of(8) {
                    // nft narrows a byte-aligned prefix to a shorter load and compare.
                    let bytes = (prefix / 8) as usize;
                    self.load(*left, r1, Some(bytes as u32));
                    self.push(LowExpr::Cmp { sreg: r1, op: cmp_op(*op), data: addr[..bytes].to_vec() });
                } else {
                    let len = addr.len();
                    let mut mask = vec![0u8; len];
                    for bit in 0..prefix as usize {
                        mask[bit / 8] |= 0x80 >> (bit % 8);
                    }
                    // nft loads only the bytes the prefix touches.
                    let bytes = (prefix as usize).div_ceil(8);
                    self.load(*left, r1, Some(bytes as u32));
                    self.push(LowExpr::Bitwise {
                        sreg: r1,
                        dreg: r1,
                        len: bytes as u32,
                        mask: mask[..bytes].to_vec(),
                        xor: vec![0; bytes],
                    });
                    self.push(LowExpr::Cmp { sreg: r1, op: cmp_op(*op), data: addr[..bytes].to_vec() });
                }
            }
            Match::IfnamePrefix { op, prefix } => {
                self.load(Selector::IifName, r1, None);
                self.push(LowExpr::Cmp { sreg: r1, op: cmp_op(*op), data: prefix.as_bytes().to_vec() });
            }
            Match::Flags { left, flags } => {
                self.load(*left, r1, None);
                self.push(LowExpr::Bitwise {
                    sreg: r1,
                    dreg: r1,
                    len: 4,
                    mask: flags.to_ne_bytes().to_vec(),
                    xor: vec![0; 4],
                });
                self.push(LowExpr::Cmp { sreg: r1, op: kernel_consts::NFT_CMP_NEQ, data: vec![0; 4] });
            }
            Match::Masked { left, mask, op, right } => {
                self.load(*left, r1, None);
                self.push(LowExpr::Bitwise {
                    sreg: r1,
                    dreg: r1,
                    len: 4,
                    mask: mask.to_ne_bytes().to_vec(),
                    xor: vec![0; 4],
                });
                self.push(LowExpr::Cmp { sreg: r1, op: cmp_op(*op), data: right.to_ne_bytes().to_vec() });
            }
            Match::InSet { key, set, op } => {
                let sreg = if key.len() == 1 {
                    self.load(key[0], r1, None);
                    r1
                } else {
                    self.load_concat(key)
                };
                self.push(LowExpr::Lookup {
                    sreg,
                    dreg: None,
                    set: SetRef::Named(set.clone()),
                    invert: *op == Op::Neq,
                });
            }
            Match::InAnonSet { left, values } => {
                self.load(*left, r1, None);
                let elements = values
                    .iter()
                    .map(|v| {
                        let mut b = Vec::new();
                        v.encode(&mut b);
                        (b, None)
                    })
                    .collect();
                let set =
                    self.anon(AnonSet { key_type: left.datatype(), key_selector: *left, verdict_map: false, elements });
                self.push(LowExpr::Lookup { sreg: r1, dreg: None, set, invert: false });
            }
        }
    }

    fn lower_stmt(&mut self, s: &Stmt) {
        let r1 = kernel_consts::NFT_REG_1;
        match s {
            Stmt::Verdict(v) => {
                self.push(LowExpr::Immediate { dreg: kernel_consts::NFT_REG_VERDICT, data: verdict_data(v) })
            }
            Stmt::Vmap { key, map } => {
                let sreg = if key.len() == 1 {
                    self.load(key[0], r1, None);
                    r1
                } else {
                    self.load_concat(key)
                };
                self.push(LowExpr::Lookup {
                    sreg,
                    dreg: Some(kernel_consts::NFT_REG_VERDICT),
                    set: SetRef::Named(map.clone()),
                    invert: false,
                });
            }
            Stmt::AnonVmap { key, entries } => {
                self.load(*key, r1, None);
                let elements = entries
                    .iter()
                    .map(|(v, verdict)| {
                        let mut b = Vec::new();
                        v.encode(&mut b);
                        (b, Some(verdict.clone()))
                    })
                    .collect();
                let set =
                    self.anon(AnonSet { key_type: key.datatype(), key_selector: *key, verdict_map: true, elements });
                self.push(LowExpr::Lookup { sreg: r1, dreg: Some(kernel_consts::NFT_REG_VERDICT), set, invert: false });
            }
            Stmt::MarkOr(bits) => self.mark_set(!bits, *bits),
            Stmt::MarkXor(bits) => self.mark_set(u32::MAX, *bits),
            Stmt::Dnat { family, target } => match target {
                DnatTarget::Map { key, map } => {
                    self.load_concat(key);
                    self.push(LowExpr::Lookup {
                        sreg: r1,
                        dreg: Some(r1),
                        set: SetRef::Named(map.clone()),
                        invert: false,
                    });
                    let addr_len = match family {
                        IpFamily::V4 => 4,
                        IpFamily::V6 => 16,
                    };
                    self.push(LowExpr::Nat {
                        kind: kernel_consts::NFT_NAT_DNAT,
                        family: nfproto(*family),
                        reg_addr: r1,
                        reg_proto: Some(kernel_consts::reg(addr_len / 4)),
                        flags: None,
                    });
                }
                DnatTarget::Addr { addr, port } => {
                    let mut a = Vec::new();
                    Value::Addr(*addr).encode(&mut a);
                    let proto_reg = kernel_consts::reg(a.len() / 4);
                    self.push(LowExpr::Immediate { dreg: r1, data: ImmData::Value(a) });
                    self.push(LowExpr::Immediate {
                        dreg: proto_reg,
                        data: ImmData::Value(port.to_be_bytes().to_vec()),
                    });
                    let family = match addr {
                        IpAddr::V4(_) => IpFamily::V4,
                        IpAddr::V6(_) => IpFamily::V6,
                    };
                    self.push(LowExpr::Nat {
                        kind: kernel_consts::NFT_NAT_DNAT,
                        family: nfproto(family),
                        reg_addr: r1,
                        reg_proto: Some(proto_reg),
                        flags: None,
                    });
                }
            },
            Stmt::Masquerade { fully_random } => self
                .push(LowExpr::Masq { flags: fully_random.then_some(kernel_consts::NF_NAT_RANGE_PROTO_RANDOM_FULLY) }),
            Stmt::Reject(kind) => self.push(match kind {
                Reject::PortUnreachable => LowExpr::Reject {
                    kind: kernel_consts::NFT_REJECT_ICMPX_UNREACH,
                    code: kernel_consts::NFT_REJECT_ICMPX_PORT_UNREACH,
                },
                Reject::Icmp => LowExpr::Reject {
                    kind: kernel_consts::NFT_REJECT_ICMP_UNREACH,
                    code: kernel_consts::ICMP_PORT_UNREACH,
                },
                Reject::Icmpv6 => LowExpr::Reject {
                    kind: kernel_consts::NFT_REJECT_ICMP_UNREACH,
                    code: kernel_consts::ICMPV6_PORT_UNREACH,
                },
            }),
            Stmt::Counter => self.push(LowExpr::Counter),
            Stmt::NfTrace => {
                // As nft writes it: the flag is one byte, loaded into a register, then set.
                self.push(LowExpr::Immediate { dreg: r1, data: ImmData::Value(vec![1]) });
                self.push(LowExpr::MetaSet { key: kernel_consts::NFT_META_NFTRACE, sreg: r1 });
            }
            Stmt::Update { set, key } => {
                self.load(*key, r1, None);
                self.push(LowExpr::Dynset { op: kernel_consts::NFT_DYNSET_OP_UPDATE, sreg_key: r1, set: set.clone() });
            }
            Stmt::FlowAdd { flowtable } => self.push(LowExpr::FlowOffload { flowtable: flowtable.clone() }),
        }
    }

    /// `meta mark set meta mark <op> bits`, as nft writes it: a bitwise with mask and xor.
    fn mark_set(&mut self, mask: u32, xor: u32) {
        let r1 = kernel_consts::NFT_REG_1;
        self.push(LowExpr::Meta { key: kernel_consts::NFT_META_MARK, dreg: r1 });
        self.push(LowExpr::Bitwise {
            sreg: r1,
            dreg: r1,
            len: 4,
            mask: mask.to_ne_bytes().to_vec(),
            xor: xor.to_ne_bytes().to_vec(),
        });
        self.push(LowExpr::MetaSet { key: kernel_consts::NFT_META_MARK, sreg: r1 });
    }
}

/// A verdict as immediate data.
pub fn verdict_data(v: &Verdict) -> ImmData {
    match v {
        Verdict::Accept => ImmData::Verdict(kernel_consts::NF_ACCEPT, None),
        Verdict::Drop => ImmData::Verdict(kernel_consts::NF_DROP, None),
        Verdict::Return => ImmData::Verdict(kernel_consts::NFT_RETURN, None),
        Verdict::Jump(c) => ImmData::Verdict(kernel_consts::NFT_JUMP, Some(c.to_string())),
        Verdict::Goto(c) => ImmData::Verdict(kernel_consts::NFT_GOTO, Some(c.to_string())),
    }
}
