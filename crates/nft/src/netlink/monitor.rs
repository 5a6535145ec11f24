//! Notices of changes other programs make to our table (`nft monitor`'s source).
//!
//! A socket in the nftables multicast group receives a message for every object any
//! transaction adds or deletes. The kernel only builds those messages while somebody listens,
//! and building them makes bulk programming several times slower (300k elements with `nft -f`:
//! 2.4–3.1 s alone, 6.3–8.7 s with one listener). So verdict leaves the group while it commits
//! ([`MonitorGate::pause`]) and compares generation ids around the commit to learn whether
//! anybody else committed in that window.

use super::NetlinkError;
use super::sys::{self, Scratch, Socket};
use crate::kernel_expr::LowRule;
use crate::netlink::udata::parse_comment;
use crate::trace::chains;
use std::os::fd::{AsFd, OwnedFd};
use verdict_netlink::consts::*;
use verdict_netlink::{Malformed, Message, Messages};

/// The multicast group of nf_tables notifications.
const GROUP_NFTABLES: u32 = NFNLGRP_NFTABLES;
/// NFPROTO_INET, the family of verdict's table.
const FAMILY_INET: u8 = NFPROTO_INET;
/// The table name is attribute 1 in every table, chain, rule, set, element and object message.
const ATTR_TABLE: u16 = NFTA_TABLE_NAME;
const ENOBUFS: i32 = libc::ENOBUFS;

/// What the monitor saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableNotice {
    /// Another program changed the table.
    Changed {
        /// The message kind, e.g. "delete chain".
        what: &'static str,
        /// The low 16 bits of the generation that program's commit made: a reconcile that read
        /// the table at this generation or later has seen the change (see [`generation_after`]).
        generation: u16,
    },
    /// Another program (`verdict trace`) added or removed chains of the table whose names carry
    /// a trace's deadline (see [`crate::trace::chains`]), each added chain and rule exactly
    /// what `verdict trace` writes, and changed nothing else.
    Trace(Vec<TraceChange>),
    /// Another program changed the tables, chains or rules of another table (of a family
    /// Service traffic passes through): a firewall may have appeared.
    OtherTable,
    /// Notices were lost (the socket overflowed): the table may have changed.
    Overflow,
}

/// A trace chain that appeared or went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceChange {
    /// The chain.
    pub chain: String,
    /// Its deadline (seconds since the epoch), from its name.
    pub until: u64,
    /// Added (or a rule added to it) rather than deleted.
    pub added: bool,
}

/// Listens for changes to one `inet` table.
pub struct TableMonitor {
    sock: Socket,
    table: String,
    buf: Vec<u8>,
    /// For reading the chains and rules a notice adds with libnftnl.
    scratch: Scratch,
}

/// Leaves and rejoins the monitor's group around verdict's own commits; usable from another
/// thread than the one reading the monitor.
#[derive(Debug)]
pub struct MonitorGate {
    fd: OwnedFd,
}

impl MonitorGate {
    /// Stops notices (and their cost in the kernel) for what follows.
    pub fn pause(&self) -> Result<(), NetlinkError> {
        sys::set_membership(self.fd.as_fd(), GROUP_NFTABLES, false).map_err(NetlinkError::Io)
    }

    /// Receives notices again.
    pub fn resume(&self) -> Result<(), NetlinkError> {
        sys::set_membership(self.fd.as_fd(), GROUP_NFTABLES, true).map_err(NetlinkError::Io)
    }
}

impl TableMonitor {
    /// Listens (in the calling thread's network namespace) for changes to `inet <table>`.
    pub fn open(table: &str) -> Result<(TableMonitor, MonitorGate), NetlinkError> {
        let sock = Socket::open().map_err(NetlinkError::Open)?;
        // Room for a burst of foreign changes; an overflow is reported, not fatal.
        sock.size_buffers(64 * 1024, 8 << 20).map_err(NetlinkError::Open)?;
        let gate = MonitorGate { fd: sock.duplicate().map_err(NetlinkError::Open)? };
        gate.resume()?;
        let buf = vec![0; 1 << 20];
        Ok((TableMonitor { sock, table: table.to_string(), buf, scratch: Scratch::new() }, gate))
    }

    /// Waits for the next notice about the table, or about other tables' chains and rules;
    /// element and set notices of other tables are skipped.
    pub fn wait(&mut self) -> Result<TableNotice, NetlinkError> {
        loop {
            let n = match self.sock.recv(&mut self.buf, true) {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) if e.raw_os_error() == Some(ENOBUFS) => return Ok(TableNotice::Overflow),
                Err(e) => return Err(NetlinkError::Io(e)),
            };
            if let Some((what, generation)) = about_table(&self.buf[..n], &self.table) {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                return Ok(match trace_changes(&self.buf[..n], &self.table, &mut self.scratch, now.as_secs()) {
                    Some(changes) => TableNotice::Trace(changes),
                    None => TableNotice::Changed { what, generation },
                });
            }
            if about_other_tables(&self.buf[..n], &self.table) {
                return Ok(TableNotice::OtherTable);
            }
        }
    }
}

/// The nf_tables message number of a notification (`None` for other subsystems and for the
/// generation notice that ends every transaction).
fn nft_message(m: &Message<'_>) -> Option<u16> {
    let kind = m.header.kind;
    (kind >> 8 == NFNL_SUBSYS_NFTABLES && kind & 0xff != NFT_MSG_NEWGEN).then_some(kind & 0xff)
}

/// The kind and generation (low 16 bits) of the first message in `datagram` that is about
/// `inet <table>`, if any.
pub(crate) fn about_table(datagram: &[u8], table: &str) -> Option<(&'static str, u16)> {
    Messages::new(datagram).map_while(Result::ok).find_map(|m| {
        let msg = nft_message(&m)?;
        let ours = m.nfgen_family() == Some(FAMILY_INET) && string_attr(&m, ATTR_TABLE) == Some(table);
        ours.then(|| (kind_name(msg), m.nfgen_res_id().unwrap_or_default()))
    })
}

/// Whether a notice of `generation` (its low 16 bits, as notices carry it) is about a commit
/// made after generation `seen`. Notices arrive moments after their commit, never 32768
/// commits late, so the 16 bits are compared across their wrap.
pub fn generation_after(generation: u16, seen: u32) -> bool {
    (generation.wrapping_sub(seen as u16) as i16) > 0
}

/// The trace chains `datagram` adds or deletes, when every message in it about `inet <table>`
/// adds or deletes a trace chain or a rule of one, and every chain and rule it adds is one
/// `verdict trace` writes, with a deadline at most [`chains::MAX_AHEAD`] after `now` (`None`
/// otherwise: a change to reconcile, and the reconcile deletes what is not genuine).
pub(crate) fn trace_changes(datagram: &[u8], table: &str, scratch: &mut Scratch, now: u64) -> Option<Vec<TraceChange>> {
    let mut changes: Vec<TraceChange> = Vec::new();
    for m in Messages::new(datagram) {
        let m = match m {
            Ok(m) => m,
            Err(Malformed::Trailing { .. }) => break,
            Err(_) => return None,
        };
        let Some(msg) = nft_message(&m) else { continue };
        if m.nfgen_family() != Some(FAMILY_INET) || string_attr(&m, ATTR_TABLE) != Some(table) {
            continue;
        }
        let (chain, added) = match msg {
            NFT_MSG_NEWCHAIN => (string_attr(&m, NFTA_CHAIN_NAME), true),
            NFT_MSG_DELCHAIN => (string_attr(&m, NFTA_CHAIN_NAME), false),
            NFT_MSG_NEWRULE => (string_attr(&m, NFTA_RULE_CHAIN), true),
            NFT_MSG_DELRULE => (string_attr(&m, NFTA_RULE_CHAIN), false),
            _ => return None,
        };
        let chain = chain?;
        let until = chains::deadline_in_name(chain)?;
        if added && !genuine(&m, msg, scratch, now) {
            return None;
        }
        if !changes.iter().any(|c| c.chain == chain && c.added == added) {
            changes.push(TraceChange { chain: chain.to_string(), until, added });
        }
    }
    (!changes.is_empty()).then_some(changes)
}

/// Whether the chain or rule that `m` (of kind `msg`) adds is one `verdict trace` writes.
fn genuine(m: &Message<'_>, msg: u16, scratch: &mut Scratch, now: u64) -> bool {
    if !scratch.holds(m.bytes.len()) {
        return false;
    }
    let checked = match msg {
        NFT_MSG_NEWCHAIN => {
            let Some(c) = sys::parse_chain(scratch, m.bytes) else { return false };
            chains::check_base(&c.name, crate::observe::base_chain(c.hook.as_ref(), c.policy), now).map(|_| ())
        }
        NFT_MSG_NEWRULE => {
            let Some(w) = sys::parse_rule(scratch, m.bytes) else { return false };
            let low =
                LowRule { exprs: w.exprs, comment: w.udata.as_deref().and_then(parse_comment), ..LowRule::default() };
            let Ok(rule) = crate::raise::raise(&low) else { return false };
            let near =
                chains::deadline_in_name(&w.chain).is_some_and(|d| d > now && d - now <= chains::MAX_AHEAD.as_secs());
            if !near {
                return false;
            }
            chains::check_rule(&w.chain, &rule)
        }
        _ => return false,
    };
    // An expired chain being added is no `verdict trace` either.
    checked.is_ok()
}

/// Whether `datagram` adds or deletes a table, chain or rule of a table other than ours, in
/// the ip, ip6 or inet family.
pub(crate) fn about_other_tables(datagram: &[u8], table: &str) -> bool {
    const STRUCTURE: [u16; 6] =
        [NFT_MSG_NEWTABLE, NFT_MSG_DELTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_DELCHAIN, NFT_MSG_NEWRULE, NFT_MSG_DELRULE];
    Messages::new(datagram).map_while(Result::ok).any(|m| {
        let family = m.nfgen_family();
        nft_message(&m).is_some_and(|msg| STRUCTURE.contains(&msg))
            && matches!(family, Some(NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6))
            && (family != Some(FAMILY_INET) || string_attr(&m, ATTR_TABLE) != Some(table))
    })
}

/// A string attribute of type `wanted` among a notification's attributes.
fn string_attr<'a>(m: &Message<'a>, wanted: u16) -> Option<&'a str> {
    m.attrs(4).find_type(wanted).and_then(|a| a.str())
}

fn kind_name(msg: u16) -> &'static str {
    match msg {
        NFT_MSG_NEWTABLE => "add table",
        NFT_MSG_DELTABLE => "delete table",
        NFT_MSG_NEWCHAIN => "add chain",
        NFT_MSG_DELCHAIN => "delete chain",
        NFT_MSG_NEWRULE => "add rule",
        NFT_MSG_DELRULE => "delete rule",
        NFT_MSG_NEWSET => "add set",
        NFT_MSG_DELSET => "delete set",
        NFT_MSG_NEWSETELEM => "add element",
        NFT_MSG_DELSETELEM => "delete element",
        _ => "change",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{Item, Rule, Stmt};
    use crate::ruleset::{BaseChain, ChainKind, Hook, Verdict};
    use crate::trace::chains::{TraceSpec, trace_chains};
    use crate::transaction::{Op, Transaction};
    use verdict_net::Protocol;
    use verdict_netlink::NLMSG_HDRLEN;

    /// The generation every test notice carries.
    const GENERATION: u16 = 0x1234;

    /// One notification: header, nfgenmsg, then these attributes.
    fn message(msg: u16, family: u8, attributes: &[(u16, &[u8])]) -> Vec<u8> {
        let mut attrs = Vec::new();
        for (kind, value) in attributes {
            attrs.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
            attrs.extend_from_slice(&kind.to_ne_bytes());
            attrs.extend_from_slice(value);
            attrs.resize(verdict_netlink::align(attrs.len()), 0);
        }
        let len = NLMSG_HDRLEN + 4 + attrs.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | msg).to_ne_bytes());
        out.extend_from_slice(&[0; 10]);
        out.extend_from_slice(&[family, 0]);
        out.extend_from_slice(&GENERATION.to_be_bytes());
        out.extend_from_slice(&attrs);
        out
    }

    /// A NUL-terminated string attribute value.
    fn string(s: &str) -> Vec<u8> {
        [s.as_bytes(), &[0]].concat()
    }

    /// A notification about `table`: its name, then an attribute that is no name.
    fn notice(msg: u16, family: u8, table: &str) -> Vec<u8> {
        message(msg, family, &[(ATTR_TABLE, &string(table)), (2, &[0, 0, 0, 1])])
    }

    /// A chain (3, 5) or rule (6, 8) notice of `inet kube-proxy` naming `chain`, its attributes
    /// in the kernel's order: the table, then the chain's name (chains) or the rule's chain.
    fn chain_notice(msg: u16, chain: &str) -> Vec<u8> {
        let chain_attr = if msg < 6 { 3 } else { 2 };
        message(msg, FAMILY_INET, &[(ATTR_TABLE, &string("kube-proxy")), (chain_attr, &string(chain))])
    }

    /// When the trace chains of the tests are looked at: their deadline (2000) is 1000 s away.
    const NOW: u64 = 1000;

    fn trace_spec(until: u64) -> TraceSpec {
        TraceSpec { dst: "172.30.0.10".parse().unwrap(), port: 80, protocol: Protocol::Tcp, src: None, until }
    }

    /// The messages of `tx` as libnftnl encodes them (the kernel's notices of the objects
    /// added carry the same attributes).
    fn encoded(tx: &Transaction) -> Vec<u8> {
        super::super::encode::encode(&mut Scratch::new(), tx).body
    }

    fn changes(datagram: &[u8]) -> Option<Vec<TraceChange>> {
        trace_changes(datagram, "kube-proxy", &mut Scratch::new(), NOW)
    }

    #[test]
    fn trace_chains_alone_are_told_apart_from_changes() {
        let genuine = trace_chains(&trace_spec(2000), "9");
        let added = changes(&encoded(&chains::install("kube-proxy", &genuine))).expect("a trace");
        let names: Vec<(&str, u64, bool)> = added.iter().map(|c| (c.chain.as_str(), c.until, c.added)).collect();
        assert_eq!(names, [("trace-9-prerouting-until-2000", 2000, true), ("trace-9-output-until-2000", 2000, true)]);
        let chain = "trace-9-output-until-2000";
        let gone = [chain_notice(8, chain), chain_notice(5, chain)].concat();
        assert!(!changes(&gone).unwrap()[0].added);
        let mixed = [chain_notice(5, chain), chain_notice(5, "services")].concat();
        assert_eq!(changes(&mixed), None, "another chain changed too");
        assert_eq!(changes(&chain_notice(5, "trace-1-output")), None, "no deadline in the name");
        assert_eq!(changes(&notice(14, FAMILY_INET, "kube-proxy")), None, "elements");
    }

    #[test]
    fn a_trace_chain_that_verdict_trace_would_not_write_is_a_change_to_reconcile() {
        let spec = trace_spec(2000);
        let genuine = trace_chains(&spec, "9");
        // A rule beyond the nftrace one: a drop (or a DNAT) hiding in a trace chain.
        let mut extra = genuine.clone();
        let mut dropping = extra[0].rules[0].clone();
        dropping.items.push(Item::Stmt(Stmt::Verdict(Verdict::Drop)));
        extra[0].rules.push(dropping);
        // A deadline further than `verdict trace --for` allows.
        let far = trace_chains(&trace_spec(NOW + chains::MAX_AHEAD.as_secs() + 1), "9");
        // A deadline already passed.
        let past = trace_chains(&trace_spec(NOW), "9");
        // Another hook or priority than the name says.
        let mut rehooked = genuine.clone();
        rehooked[0].base = Some(BaseChain { kind: ChainKind::Nat, hook: Hook::Prerouting, priority: -100 });
        // A comment whose deadline is not the name's.
        let other_comment = trace_chains(&trace_spec(1500), "9")[0].rules[0].clone();
        let mut mislabelled = genuine.clone();
        mislabelled[0].rules[0] = other_comment;
        for (why, chains) in
            [("extra rule", extra), ("far", far), ("past", past), ("hook", rehooked), ("comment", mislabelled)]
        {
            assert_eq!(changes(&encoded(&chains::install("kube-proxy", &chains))), None, "{why}");
        }
        // A rule added later to a genuine chain is looked at too.
        let later = Transaction {
            table: "kube-proxy".into(),
            ops: vec![Op::AddRule {
                chain: genuine[1].name.clone(),
                rule: Rule { items: vec![Item::Stmt(Stmt::Verdict(Verdict::Drop))], comment: None },
            }],
        };
        assert_eq!(changes(&encoded(&later)), None, "a drop rule added to a trace chain");
        // The genuine chain's header with policy drop: every packet on the hook dropped.
        let mut scratch = Scratch::new();
        let mut datagram = Vec::new();
        let h = sys::Hdr { msg_type: NFT_MSG_NEWCHAIN, flags: 0, seq: 1 };
        let w = sys::ChainWire {
            name: genuine[0].name.clone(),
            hook: Some((Hook::Prerouting.number(), chains::PRIORITY, "filter".into())),
            policy: Some(0),
        };
        sys::put_chain(&mut scratch, &mut datagram, h, "kube-proxy", &w);
        assert_eq!(changes(&datagram), None, "policy drop");
        // The same header with policy accept is the genuine one.
        let mut datagram = Vec::new();
        sys::put_chain(&mut scratch, &mut datagram, h, "kube-proxy", &sys::ChainWire { policy: Some(1), ..w });
        assert!(changes(&datagram).is_some(), "policy accept");
    }

    #[test]
    fn a_change_to_our_table_is_recognised() {
        assert_eq!(
            about_table(&notice(5, FAMILY_INET, "kube-proxy"), "kube-proxy"),
            Some(("delete chain", GENERATION))
        );
        assert_eq!(
            about_table(&notice(14, FAMILY_INET, "kube-proxy"), "kube-proxy"),
            Some(("delete element", GENERATION))
        );
    }

    #[test]
    fn a_notice_is_after_a_generation_across_the_16_bit_wrap() {
        assert!(generation_after(11, 10));
        assert!(!generation_after(10, 10), "the generation read: seen");
        assert!(!generation_after(9, 10));
        assert!(generation_after(0x0001, 0x0001_ffff), "wrapped past the read");
        assert!(!generation_after(0xfffe, 0x0002_0001), "before the read, across the wrap");
        assert!(generation_after(0x8000, 0x0001_0001), "far ahead, still after");
    }

    #[test]
    fn other_tables_families_and_generation_notices_are_ignored() {
        assert_eq!(about_table(&notice(5, FAMILY_INET, "firewalld"), "kube-proxy"), None);
        assert_eq!(about_table(&notice(5, 2, "kube-proxy"), "kube-proxy"), None, "ip kube-proxy is not ours");
        assert_eq!(about_table(&notice(NFT_MSG_NEWGEN, FAMILY_INET, "kube-proxy"), "kube-proxy"), None);
    }

    #[test]
    fn structure_changes_of_other_tables_are_noticed_but_not_their_elements() {
        assert!(about_other_tables(&notice(3, 2, "filter"), "kube-proxy"), "add chain in ip filter");
        assert!(about_other_tables(&notice(6, FAMILY_INET, "firewalld"), "kube-proxy"), "add rule");
        assert!(about_other_tables(&notice(5, 2, "kube-proxy"), "kube-proxy"), "ip kube-proxy is another table");
        assert!(!about_other_tables(&notice(6, FAMILY_INET, "kube-proxy"), "kube-proxy"), "ours");
        assert!(!about_other_tables(&notice(12, FAMILY_INET, "firewalld"), "kube-proxy"), "elements");
        assert!(!about_other_tables(&notice(3, 7, "br"), "kube-proxy"), "bridge family");
    }

    #[test]
    fn every_message_of_a_datagram_is_looked_at() {
        let datagram = [notice(3, FAMILY_INET, "other"), notice(2, FAMILY_INET, "kube-proxy")].concat();
        assert_eq!(about_table(&datagram, "kube-proxy"), Some(("delete table", GENERATION)));
    }

    #[test]
    fn truncated_messages_are_not_read_past_their_end() {
        let mut m = notice(5, FAMILY_INET, "kube-proxy");
        m.truncate(m.len() - 6);
        assert_eq!(about_table(&m, "kube-proxy"), None);
        assert_eq!(about_table(&[1, 2, 3], "kube-proxy"), None);
    }
}
