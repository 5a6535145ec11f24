//! Other tables that drop Service traffic: an accept in verdict's table does not override a
//! drop in another table on the same hook (every base chain sees the packet), so a
//! default-drop firewall (firewalld, Docker's nftables backend, a hand-written `inet filter`
//! with `policy drop`) silently breaks Services that verdict programmed correctly.
//!
//! Read in plain Rust from two dumps: every chain of every family, then the rules of the base
//! chains that matter. Nothing here writes.

use super::foreign::TableFamily;
use super::{Netlink, NetlinkError};
use std::fmt;
use verdict_netlink::consts::*;
use verdict_netlink::{Attrs, NLMSG_HDRLEN, Writer};

/// NFPROTO_UNSPEC: a dump of every family.
pub(super) const FAMILY_ANY: u8 = NFPROTO_UNSPEC;
/// NF_DROP, as a chain policy and as a verdict code.
const NF_DROP: u32 = libc::NF_DROP as u32;

/// The netfilter hooks Service traffic passes (ip, ip6 and inet families): forward to pods,
/// input to host-network endpoints, output from the node, and the routing hooks around them.
pub use crate::ruleset::Hook;

/// How a base chain drops what nothing before it accepted.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropKind {
    /// `policy drop`.
    Policy,
    /// Its last rule drops or rejects every packet that reaches it (e.g. firewalld's final
    /// `reject with icmpx admin-prohibited`).
    FinalRule(&'static str),
}

/// A base chain of another table that drops, at the end, traffic it did not accept.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DroppingChain {
    /// The table's family.
    pub family: TableFamily,
    /// The table.
    pub table: String,
    /// The chain.
    pub chain: String,
    /// Its hook.
    pub hook: Hook,
    /// Its priority.
    pub priority: i32,
    /// How it drops.
    pub drop: DropKind,
}

impl fmt::Display for DroppingChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self.drop {
            DropKind::Policy => "has policy drop".to_string(),
            DropKind::FinalRule(v) => format!("ends with an unconditional {v}"),
        };
        write!(
            f,
            "table {} {}, chain {} (hook {}, priority {}) {how}",
            self.family.name(),
            self.table,
            self.chain,
            self.hook.name(),
            self.priority
        )
    }
}

impl Netlink {
    /// The base chains of tables other than `inet <own_table>` that end in a drop, on the
    /// hooks Service traffic passes. A chain whose table is deleted while it is read is
    /// skipped.
    pub fn dropping_chains(&mut self, own_table: &str) -> Result<Vec<DroppingChain>, NetlinkError> {
        let mut found = Vec::new();
        for msg in self.dump_all(NFT_MSG_GETCHAIN, FAMILY_ANY, None)? {
            let Some(base) = parse_base_chain(&msg) else { continue };
            if base.family == TableFamily::Inet && base.table == own_table {
                continue;
            }
            let drop = if base.policy == Some(NF_DROP) {
                Some(DropKind::Policy)
            } else {
                let rules = self.dump_all(NFT_MSG_GETRULE, base.family.number(), Some((&base.table, &base.chain)))?;
                rules.last().and_then(|last| unconditional_drop(attrs(payload(last))))
            };
            if let Some(drop) = drop {
                found.push(DroppingChain {
                    family: base.family,
                    table: base.table,
                    chain: base.chain,
                    hook: base.hook,
                    priority: base.priority,
                    drop,
                });
            }
        }
        found.sort();
        Ok(found)
    }

    /// A dump of one message type, in `family`, optionally of one table's chain.
    pub(super) fn dump_all(
        &mut self,
        msg_type: u16,
        family: u8,
        chain: Option<(&str, &str)>,
    ) -> Result<Vec<Vec<u8>>, NetlinkError> {
        let seq = self.next_seq(1);
        let mut buf = Vec::new();
        let kind = nfnl_msg_type(NFNL_SUBSYS_NFTABLES, msg_type);
        let mut w = Writer::nfnetlink(&mut buf, kind, NLM_F_DUMP, seq, family, 0);
        if let Some((table, chain)) = chain {
            w.put_strz(NFTA_RULE_TABLE, table);
            w.put_strz(NFTA_RULE_CHAIN, chain);
        }
        w.finish();
        self.exchange(seq, &buf)
    }
}

struct BaseChain {
    family: TableFamily,
    table: String,
    chain: String,
    hook: Hook,
    priority: i32,
    policy: Option<u32>,
}

/// The message's family byte and attributes (after the nfgenmsg header).
pub(super) fn payload(msg: &[u8]) -> &[u8] {
    msg.get(NLMSG_HDRLEN + 4..).unwrap_or_default()
}

fn parse_base_chain(msg: &[u8]) -> Option<BaseChain> {
    let family = TableFamily::from_number(*msg.get(NLMSG_HDRLEN)?)?;
    let (mut table, mut chain, mut hook, mut priority, mut policy) = (None, None, None, 0, None);
    for (kind, value) in attrs(payload(msg)) {
        match kind {
            NFTA_CHAIN_TABLE => table = text(value),
            NFTA_CHAIN_NAME => chain = text(value),
            NFTA_CHAIN_POLICY => policy = be_u32(value),
            NFTA_CHAIN_HOOK => {
                for (k, v) in attrs(value) {
                    match k {
                        NFTA_HOOK_HOOKNUM => hook = be_u32(v).and_then(Hook::from_number),
                        NFTA_HOOK_PRIORITY => priority = be_u32(v).map(|p| p as i32).unwrap_or(0),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(BaseChain { family, table: table?, chain: chain?, hook: hook?, priority, policy })
}

/// `Some` when a rule, made of these attributes, drops or rejects every packet: nothing in it
/// but counters and logging before the verdict.
fn unconditional_drop<'a>(rule: impl Iterator<Item = (u16, &'a [u8])>) -> Option<DropKind> {
    let mut verdict = None;
    for (kind, value) in rule {
        if kind != NFTA_RULE_EXPRESSIONS {
            continue;
        }
        for (k, elem) in attrs(value) {
            if k != NFTA_LIST_ELEM || verdict.is_some() {
                return None; // something follows the verdict
            }
            let mut name = None;
            let mut data: &[u8] = &[];
            for (a, v) in attrs(elem) {
                match a {
                    NFTA_EXPR_NAME => name = text(v),
                    NFTA_EXPR_DATA => data = v,
                    _ => {}
                }
            }
            match name.as_deref()? {
                "counter" | "log" => {}
                "reject" => verdict = Some(DropKind::FinalRule("reject")),
                "immediate" if immediate_verdict(data) == Some(NF_DROP) => verdict = Some(DropKind::FinalRule("drop")),
                _ => return None,
            }
        }
    }
    verdict
}

fn immediate_verdict(data: &[u8]) -> Option<u32> {
    let (_, value) = attrs(data).find(|(k, _)| *k == NFTA_IMMEDIATE_DATA)?;
    let (_, verdict) = attrs(value).find(|(k, _)| *k == NFTA_DATA_VERDICT)?;
    let (_, code) = attrs(verdict).find(|(k, _)| *k == NFTA_VERDICT_CODE)?;
    be_u32(code)
}

/// Netlink attributes (type without the nested/byte-order flags, value), stopping at the
/// first malformed one.
pub(super) fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    Attrs::new(b).map_while(Result::ok).map(|a| (a.ty, a.payload))
}

pub(super) fn text(v: &[u8]) -> Option<String> {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    std::str::from_utf8(&v[..end]).ok().map(str::to_string)
}

fn be_u32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(verdict_netlink::align(out.len()), 0);
        out
    }

    fn expr(name: &str, data: &[u8]) -> Vec<u8> {
        let body = [attr(NFTA_EXPR_NAME, format!("{name}\0").as_bytes()), attr(NFTA_EXPR_DATA | 0x8000, data)];
        attr(NFTA_LIST_ELEM | 0x8000, &body.concat())
    }

    fn verdict(code: i32) -> Vec<u8> {
        let code = attr(NFTA_VERDICT_CODE, &code.to_be_bytes());
        let data = attr(NFTA_DATA_VERDICT | 0x8000, &code);
        [attr(1, &0u32.to_be_bytes()), attr(NFTA_IMMEDIATE_DATA | 0x8000, &data)].concat()
    }

    fn rule(exprs: &[Vec<u8>]) -> Vec<u8> {
        [attr(NFTA_RULE_TABLE, b"filter\0"), attr(NFTA_RULE_EXPRESSIONS | 0x8000, &exprs.concat())].concat()
    }

    #[test]
    fn counted_drops_and_rejects_are_unconditional() {
        let counted_drop = rule(&[expr("counter", &[]), expr("immediate", &verdict(0))]);
        assert_eq!(unconditional_drop(attrs(&counted_drop)), Some(DropKind::FinalRule("drop")));
        let reject = rule(&[expr("reject", &[])]);
        assert_eq!(unconditional_drop(attrs(&reject)), Some(DropKind::FinalRule("reject")));
    }

    #[test]
    fn matches_accepts_and_jumps_are_not_final_drops() {
        let matched = rule(&[expr("meta", &[]), expr("cmp", &[]), expr("immediate", &verdict(0))]);
        assert_eq!(unconditional_drop(attrs(&matched)), None);
        let accept = rule(&[expr("immediate", &verdict(1))]);
        assert_eq!(unconditional_drop(attrs(&accept)), None);
        let jump = rule(&[expr("immediate", &verdict(-3))]);
        assert_eq!(unconditional_drop(attrs(&jump)), None);
        assert_eq!(unconditional_drop(attrs(&rule(&[]))), None);
    }
}
