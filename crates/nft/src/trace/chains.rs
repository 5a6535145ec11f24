//! The temporary chains `verdict trace` adds to verdict's table: one base chain per hook where
//! new connections start (prerouting for those arriving, output for the node's own), each
//! with one rule that sets the packet's nftrace flag.
//!
//! They are named `trace-<tag>-<hook>-until-<unix time>`, and their rule's comment carries the
//! same deadline, so that a running agent can tell a trace in progress (left alone) from one
//! whose `verdict trace` died without removing it: from the chains and rules the table
//! monitor reports, it removes them once their deadline has passed without reading the
//! table; a full sync that reads the table checks them the same way.
//!
//! A name is no proof: anything with CAP_NET_ADMIN in the node's network namespace can add a
//! chain called `trace-1-prerouting-until-<far future>` holding whatever it likes. So a chain
//! is left alone only when it is harmless whoever wrote it ([`check_base`], [`check_rule`]):
//! a `type filter` base chain at [`PRIORITY`] on the hook its name says, policy accept, whose
//! every rule is exactly the one `verdict trace` writes (matches on one destination, `ct state
//! new`, `meta nftrace set 1`, nothing else), with a deadline at most [`MAX_AHEAD`] away. Such
//! a chain can only ask the kernel to trace some new connections for at most an hour; anything
//! else in a `trace-` chain is a change to reconcile, and the reconcile deletes it.

use crate::rule::{Item, Match, Op as MatchOp, Rule, Selector, Stmt, Value, build};
use crate::ruleset::{BaseChain, Chain, ChainKind, Hook, Ruleset};
use crate::transaction::{Op, Transaction};
use std::net::IpAddr;
use std::time::Duration;
use verdict_net::{Cidr, IpFamily, Protocol};

/// Every trace chain's name starts with this.
pub const PREFIX: &str = "trace-";
/// After conntrack (-200), so that `ct state new` is known, and before the
/// loadBalancerSourceRanges firewall (-110) and DNAT (-100), so every rule of verdict's that
/// decides the connection is seen.
pub const PRIORITY: i32 = -150;
const COMMENT_PREFIX: &str = "verdict trace until unix time ";
const NAME_DEADLINE: &str = "-until-";
/// The longest `verdict trace --for`.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Extra time on the chains' deadline, so that a running agent does not delete them before
/// `verdict trace` removes them itself.
pub const GRACE: Duration = Duration::from_secs(30);
/// The furthest a genuine trace chain's deadline can be from the moment it is looked at.
pub const MAX_AHEAD: Duration = Duration::from_secs(MAX_DURATION.as_secs() + GRACE.as_secs());
/// The hooks `verdict trace` adds chains to.
const HOOKS: [Hook; 2] = [Hook::Prerouting, Hook::Output];

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
    HOOKS
        .into_iter()
        .map(|hook| {
            let name = format!("{PREFIX}{tag}-{}{NAME_DEADLINE}{}", hook.name(), spec.until);
            Chain::base(name, ChainKind::Filter, hook, PRIORITY, vec![rule.clone()])
        })
        .collect()
}

/// Why a chain named `trace-...` is not left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotLive {
    /// Its deadline has passed (its `verdict trace` was killed): deleted as planned.
    Expired,
    /// It is not what `verdict trace` writes (said why): deleted as another program's.
    Forged(String),
}

/// The hook and deadline of a genuine trace chain's name, `trace-<pid>-<hook>-until-<unix time>`.
fn parse_name(name: &str) -> Option<(Hook, u64)> {
    let (rest, until) = name.strip_prefix(PREFIX)?.rsplit_once(NAME_DEADLINE)?;
    let (tag, hook) = rest.rsplit_once('-')?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !numeric(tag) || !numeric(until) {
        return None;
    }
    Some((HOOKS.into_iter().find(|h| h.name() == hook)?, until.parse().ok()?))
}

/// Checks the name and the chain header of a trace chain (`base`: `None` for a regular chain,
/// or a base chain whose policy is not accept) and returns its deadline.
pub fn check_base(name: &str, base: Option<BaseChain>, now: u64) -> Result<u64, NotLive> {
    let (hook, until) = parse_name(name)
        .ok_or_else(|| NotLive::Forged("its name is not trace-<pid>-<prerouting|output>-until-<unix time>".into()))?;
    if until <= now {
        return Err(NotLive::Expired);
    }
    if until - now > MAX_AHEAD.as_secs() {
        return Err(NotLive::Forged(format!(
            "its deadline is {} s away, more than `verdict trace --for` allows",
            until - now
        )));
    }
    let wanted = BaseChain { kind: ChainKind::Filter, hook, priority: PRIORITY };
    if base != Some(wanted) {
        return Err(NotLive::Forged(format!(
            "it is not a `type filter hook {} priority {PRIORITY}; policy accept;` chain",
            hook.name()
        )));
    }
    Ok(until)
}

/// Checks one rule of trace chain `chain`: it must be exactly the rule `verdict trace` writes,
/// with the deadline the chain's name carries.
pub fn check_rule(chain: &str, rule: &Rule) -> Result<(), NotLive> {
    let forged =
        || NotLive::Forged(format!("it holds a rule `verdict trace` does not write: {}", crate::text::rule_text(rule)));
    let until = parse_name(chain).ok_or_else(forged)?.1;
    let spec = spec_of(rule, until).ok_or_else(forged)?;
    let genuine = trace_chains(&spec, "0").swap_remove(0).rules.swap_remove(0);
    if genuine == *rule { Ok(()) } else { Err(forged()) }
}

/// The trace a rule of `verdict trace`'s would have been written for (`None`: not one).
fn spec_of(rule: &Rule, until: u64) -> Option<TraceSpec> {
    let cmp = |item: Option<&Item>| match item {
        Some(Item::Match(Match::Cmp { left, op: MatchOp::Eq, right })) => Some((*left, right.clone())),
        _ => None,
    };
    let mut items = rule.items.iter();
    let dst = match cmp(items.next())? {
        (Selector::Daddr(_), Value::Addr(a)) => a,
        _ => return None,
    };
    let protocol = match cmp(items.next())? {
        (Selector::L4Proto, Value::Proto(p)) => Protocol::from_number(p)?,
        _ => return None,
    };
    let port = match cmp(items.next())? {
        (Selector::ThDport, Value::Port(p)) => p,
        _ => return None,
    };
    let src = match items.next()? {
        Item::Match(Match::Prefix { net, .. }) => Some(*net),
        _ => None,
    };
    Some(TraceSpec { dst, port, protocol, src, until })
}

/// Checks a whole chain read from the kernel (see [`check_base`] and [`check_rule`]).
pub fn check(chain: &Chain, now: u64) -> Result<u64, NotLive> {
    let until = check_base(&chain.name, chain.base, now)?;
    chain.rules.iter().try_for_each(|r| check_rule(&chain.name, r))?;
    Ok(until)
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

/// The deadline a trace chain's name carries (`None`: not a trace chain, or one named before
/// names carried it).
pub fn deadline_in_name(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.rsplit_once(NAME_DEADLINE)?.1.parse().ok()
}

/// Removes the genuine trace chains whose deadline is still ahead (see [`check`]) from a table
/// read from the kernel, so that a full sync planned against it leaves them alone; returns
/// their names and deadlines, and the forged ones with why. Expired ones (their `verdict
/// trace` died) and forged ones stay, and the sync deletes them as chains it did not render.
pub fn set_aside_live(observed: &mut Ruleset, now: u64) -> (Vec<(String, u64)>, Vec<String>) {
    let (mut live, mut forged) = (Vec::new(), Vec::new());
    for c in observed.chains.values().filter(|c| is_trace_chain(&c.name)) {
        match check(c, now) {
            Ok(until) => live.push((c.name.clone(), until)),
            Err(NotLive::Expired) => {}
            Err(NotLive::Forged(why)) => {
                forged.push(format!("chain {} is named as a `verdict trace`'s, but {why}", c.name))
            }
        }
    }
    for (name, _) in &live {
        observed.chains.remove(name);
    }
    (live, forged)
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
        let (live, forged) = set_aside_live(&mut later, 2_000);
        assert!(live.is_empty(), "expired: the sync deletes them");
        assert_eq!(forged.len(), 1, "{forged:?}");
        assert_eq!(later.chains.len(), 4);

        let (live, forged) = set_aside_live(&mut rs, 999);
        let names: Vec<&str> = live.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["trace-7-output-until-1000", "trace-7-prerouting-until-1000"]);
        assert!(live.iter().all(|(n, d)| *d == 1000 && deadline_in_name(n) == Some(1000)));
        assert_eq!(rs.chains.keys().collect::<Vec<_>>(), ["services", "trace-unknown"]);
        assert!(
            forged[0].starts_with("chain trace-unknown is named as a `verdict trace`'s, but its name"),
            "{forged:?}"
        );
    }

    /// A chain named as a trace's, holding `rules`, on `base`.
    fn named(name: &str, base: Option<BaseChain>, rules: Vec<Rule>) -> Chain {
        Chain { name: name.into(), base, rules }
    }

    #[test]
    fn only_what_verdict_trace_writes_is_trusted_whatever_the_name_says() {
        let now = 1_000_000;
        let genuine = trace_chains(&TraceSpec { until: now + 60, ..spec() }, "7");
        let (prerouting, output) = (&genuine[0], &genuine[1]);
        assert_eq!(check(prerouting, now), Ok(now + 60));
        assert_eq!(check(output, now), Ok(now + 60));
        let far = now + MAX_AHEAD.as_secs();
        assert_eq!(check(&trace_chains(&TraceSpec { until: far, ..spec() }, "7")[0], now), Ok(far), "--for 1h");
        assert_eq!(check(prerouting, now + 60), Err(NotLive::Expired));

        let forged = |c: &Chain| matches!(check(c, now), Err(NotLive::Forged(_)));
        // A far-future deadline, in the name and the comment alike.
        assert!(forged(&trace_chains(&TraceSpec { until: far + 1, ..spec() }, "7")[0]));
        assert!(forged(&trace_chains(&TraceSpec { until: u64::MAX, ..spec() }, "7")[0]));
        // Extra rules, or other rules, under a genuine header.
        let drop = Rule::new(vec![Item::Stmt(Stmt::Verdict(crate::ruleset::Verdict::Drop))]);
        let mut extra = prerouting.clone();
        extra.rules.push(drop.clone());
        assert!(forged(&extra));
        let mut dnat = prerouting.clone();
        dnat.rules[0].items.pop();
        dnat.rules[0].items.push(Item::Stmt(Stmt::Verdict(crate::ruleset::Verdict::Accept)));
        assert!(forged(&dnat), "the trace's matches with another action");
        // The genuine rule under another header: a regular chain (or policy drop, read as
        // one), another hook or priority, a nat chain.
        let rules = prerouting.rules.clone();
        assert!(forged(&named(&prerouting.name, None, rules.clone())));
        for base in [
            BaseChain { kind: ChainKind::Filter, hook: Hook::Output, priority: PRIORITY },
            BaseChain { kind: ChainKind::Filter, hook: Hook::Prerouting, priority: -300 },
            BaseChain { kind: ChainKind::Nat, hook: Hook::Prerouting, priority: PRIORITY },
        ] {
            assert!(forged(&named(&prerouting.name, Some(base), rules.clone())), "{base:?}");
        }
        // Names that only look like one.
        for name in [
            format!("trace-x-prerouting-until-{}", now + 60),
            format!("trace-7-input-until-{}", now + 60),
            format!("trace--prerouting-until-{}", now + 60),
            format!("trace-7-prerouting-until-+{}", now + 60),
        ] {
            assert!(forged(&named(&name, prerouting.base, rules.clone())), "{name}");
        }
        // A comment whose deadline is not the name's.
        let mut relabelled = prerouting.clone();
        relabelled.rules[0].comment = Some(format!("{COMMENT_PREFIX}{}", now + 30));
        assert!(forged(&relabelled));
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
