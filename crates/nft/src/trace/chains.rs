//! The temporary chains `verdict trace` adds to verdict's table: one base chain per hook where
//! new connections start (prerouting for those arriving, output for the node's own), each
//! with one rule that sets the packet's nftrace flag.
//!
//! They are named `trace-<tag>-<hook>-until-<unix time>`, and their rule's comment carries the
//! same deadline, so that a running agent can tell a trace in progress (left alone) from one
//! whose `verdict trace` died without removing it: from the name alone, as the table monitor
//! reports the chain, it removes them once their deadline has passed without reading the
//! table; a full sync that reads the table goes by the comment.

use crate::rule::{Item, Match, Op as MatchOp, Rule, Selector, Stmt, Value, build};
use crate::ruleset::{Chain, ChainKind, Hook, Ruleset};
use crate::transaction::{Op, Transaction};
use std::net::IpAddr;
use verdict_model::{Cidr, IpFamily, Protocol};

/// Every trace chain's name starts with this.
pub const PREFIX: &str = "trace-";
/// After conntrack (-200), so that `ct state new` is known, and before the
/// loadBalancerSourceRanges firewall (-110) and DNAT (-100), so every rule of verdict's that
/// decides the connection is seen.
pub const PRIORITY: i32 = -150;
const COMMENT_PREFIX: &str = "verdict trace until unix time ";
const NAME_DEADLINE: &str = "-until-";

/// Which new connections to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceSpec {
    /// The destination address (a ClusterIP, NodePort address, ...).
    pub dst: IpAddr,
    /// The destination port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
    /// Only clients in this network.
    pub src: Option<Cidr>,
    /// When a full sync may delete the chains (seconds since the epoch).
    pub until: u64,
}

/// The chains, one per hook, named `trace-<tag>-<hook>-until-<deadline>` (the tag keeps two
/// traces running at once apart).
pub fn trace_chains(spec: &TraceSpec, tag: &str) -> Vec<Chain> {
    let family = if spec.dst.is_ipv4() { IpFamily::V4 } else { IpFamily::V6 };
    let mut items = vec![
        build::is(Selector::Daddr(family), Value::Addr(spec.dst)),
        build::is(Selector::L4Proto, Value::Proto(spec.protocol.number())),
        build::is(Selector::ThDport, Value::Port(spec.port)),
    ];
    if let Some(src) = spec.src {
        items.push(Item::Match(Match::Prefix { left: Selector::Saddr(family), op: MatchOp::Eq, net: src }));
    }
    items.push(build::ct_state_new());
    items.push(Item::Stmt(Stmt::NfTrace));
    let rule = Rule { items, comment: Some(format!("{COMMENT_PREFIX}{}", spec.until)) };
    [Hook::Prerouting, Hook::Output]
        .into_iter()
        .map(|hook| {
            let name = format!("{PREFIX}{tag}-{}{NAME_DEADLINE}{}", hook.name(), spec.until);
            Chain::base(name, ChainKind::Filter, hook, PRIORITY, vec![rule.clone()])
        })
        .collect()
}

/// One transaction that adds the chains (and nothing else: the table must exist).
pub fn install(table: &str, chains: &[Chain]) -> Transaction {
    let mut tx = Transaction { table: table.to_string(), ops: Vec::new() };
    for c in chains {
        tx.ops.push(Op::AddChain { name: c.name.clone(), base: c.base });
        for rule in &c.rules {
            tx.ops.push(Op::AddRule { chain: c.name.clone(), rule: rule.clone() });
        }
    }
    tx
}

/// One transaction that removes the chains.
pub fn removal(table: &str, names: &[String]) -> Transaction {
    let mut tx = Transaction { table: table.to_string(), ops: Vec::new() };
    for name in names {
        tx.ops.push(Op::FlushChain(name.clone()));
        tx.ops.push(Op::DeleteChain(name.clone()));
    }
    tx
}

/// Whether a chain is one of `verdict trace`'s.
pub fn is_trace_chain(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// When a trace chain may be deleted; `None` when it has no readable deadline (then it is
/// not a trace in progress that verdict wrote).
pub fn deadline(chain: &Chain) -> Option<u64> {
    chain.rules.iter().find_map(|r| r.comment.as_deref()?.strip_prefix(COMMENT_PREFIX)?.parse().ok())
}

/// The deadline a trace chain's name carries (`None`: not a trace chain, or one named before
/// names carried it).
pub fn deadline_in_name(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.rsplit_once(NAME_DEADLINE)?.1.parse().ok()
}

/// Removes the trace chains whose deadline is still ahead from a table read from the kernel,
/// so that a full sync planned against it leaves them alone; returns their names and
/// deadlines. Expired ones (their `verdict trace` died) stay, and the sync deletes them as
/// chains it did not render.
pub fn set_aside_live(observed: &mut Ruleset, now: u64) -> Vec<(String, u64)> {
    let live: Vec<(String, u64)> = observed
        .chains
        .values()
        .filter(|c| is_trace_chain(&c.name))
        .filter_map(|c| Some((c.name.clone(), deadline(c).filter(|d| *d > now)?)))
        .collect();
    for (name, _) in &live {
        observed.chains.remove(name);
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::Table;
    use crate::text::rule_text;

    fn spec() -> TraceSpec {
        TraceSpec {
            dst: "172.30.0.41".parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
            src: Some("10.0.0.0/8".parse().unwrap()),
            until: 1_000,
        }
    }

    #[test]
    fn the_rule_reads_like_nft() {
        let chains = trace_chains(&spec(), "7");
        assert_eq!(chains.len(), 2);
        assert_eq!(
            rule_text(&chains[0].rules[0]),
            "ip daddr 172.30.0.41 meta l4proto tcp th dport 80 ip saddr 10.0.0.0/8 ct state new meta nftrace set 1 \
             comment \"verdict trace until unix time 1000\""
        );
        let v6 = TraceSpec { dst: "fd00::53".parse().unwrap(), src: None, ..spec() };
        assert!(rule_text(&trace_chains(&v6, "7")[1].rules[0]).starts_with("ip6 daddr fd00::53 meta l4proto tcp"));
    }

    #[test]
    fn the_rule_survives_lowering_and_raising() {
        let rule = &trace_chains(&spec(), "7")[0].rules[0];
        let low = crate::lower::lower(rule);
        assert_eq!(&crate::raise::raise(&low).unwrap(), rule);
    }

    #[test]
    fn only_live_trace_chains_are_set_aside() {
        let mut rs = Ruleset::new(Table { name: "kube-proxy".into(), comment: None });
        for c in trace_chains(&spec(), "7") {
            rs.chains.insert(c.name.clone(), c);
        }
        let mut stale = Chain::regular("trace-unknown", Vec::new());
        stale.rules.push(Rule::new(Vec::new()).comment("something else"));
        rs.chains.insert(stale.name.clone(), stale);
        rs.chains.insert("services".into(), Chain::regular("services", Vec::new()));

        let mut later = rs.clone();
        assert!(set_aside_live(&mut later, 2_000).is_empty(), "expired: the sync deletes them");
        assert_eq!(later.chains.len(), 4);

        let live = set_aside_live(&mut rs, 999);
        let names: Vec<&str> = live.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["trace-7-output-until-1000", "trace-7-prerouting-until-1000"]);
        assert!(live.iter().all(|(n, d)| *d == 1000 && deadline_in_name(n) == Some(1000)));
        assert_eq!(rs.chains.keys().collect::<Vec<_>>(), ["services", "trace-unknown"]);
    }

    #[test]
    fn install_and_removal_are_single_transactions() {
        let chains = trace_chains(&spec(), "7");
        assert_eq!(install("kube-proxy", &chains).ops.len(), 4);
        let names: Vec<String> = chains.iter().map(|c| c.name.clone()).collect();
        let tx = removal("kube-proxy", &names);
        assert!(matches!(tx.ops.last(), Some(Op::DeleteChain(n)) if n == "trace-7-output-until-1000"));
    }

    #[test]
    fn only_names_that_carry_a_deadline_give_one() {
        assert_eq!(deadline_in_name("trace-42-prerouting-until-1795000000"), Some(1_795_000_000));
        for name in ["trace-1-output", "trace-7-output-until-", "trace-7-output-until-x", "services-until-9"] {
            assert_eq!(deadline_in_name(name), None, "{name}");
        }
    }
}
