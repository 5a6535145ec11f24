//! Rule evaluation, with a branch per random choice.

use super::{Host, Packet};
use crate::rule::{
    CT_STATE_ESTABLISHED, CT_STATE_NEW, CT_STATUS_DNAT, DnatTarget, Item, Match, Op, Rule, Selector, Stmt, Value,
    decode_concat, encode_concat,
};
use crate::ruleset::{ElemData, Ruleset, Verdict};
use crate::text::{rule_text, value};
use std::net::{IpAddr, SocketAddr};
use verdict_net::IpFamily;

/// How deep jumps may nest before the interpreter gives up (the kernel's limit is 16).
const MAX_DEPTH: usize = 16;

/// The loopback interface's name.
const LOOPBACK: &str = "lo";

/// A packet's state along one path.
#[derive(Clone, Debug)]
pub(super) struct State {
    pub daddr: IpAddr,
    pub dport: u16,
    pub mark: u32,
    pub dnat: Option<SocketAddr>,
    pub masquerade: bool,
    /// A later packet of the connection (`ct state established`), not its first.
    pub established: bool,
    /// The flowtable a `flow add` offloaded the connection to.
    pub offloaded: Option<String>,
    pub trace: Vec<String>,
}

impl State {
    pub fn new(p: &Packet) -> State {
        State {
            daddr: p.dst,
            dport: p.dport,
            mark: 0,
            dnat: None,
            masquerade: false,
            established: false,
            offloaded: None,
            trace: Vec::new(),
        }
    }
}

/// How a base chain ends for one path.
pub(super) enum End {
    Drop,
    Reject,
    /// Accepted, translated, or fell through (policy accept): on to the next base chain.
    Pass,
}

/// How a chain or rule ends for one path.
enum Flow {
    /// Go on with the next rule.
    Next,
    /// Leave this chain (`return`, or the end of a chain reached by `goto`).
    Return,
    Accept,
    Drop,
    Reject,
}

pub(super) struct Evaluator<'a> {
    pub rs: &'a Ruleset,
    pub host: &'a Host,
    pub packet: &'a Packet,
}

impl Evaluator<'_> {
    pub fn base_chain(&self, name: &str, st: State) -> Vec<(State, End)> {
        self.chain(name, st, 0)
            .into_iter()
            .map(|(st, flow)| {
                let end = match flow {
                    Flow::Drop => End::Drop,
                    Flow::Reject => End::Reject,
                    Flow::Next | Flow::Return | Flow::Accept => End::Pass,
                };
                (st, end)
            })
            .collect()
    }

    /// Runs a chain: every path ends with `Next` when it falls off the end or returns.
    fn chain(&self, name: &str, st: State, depth: usize) -> Vec<(State, Flow)> {
        let Some(chain) = self.rs.chains.get(name) else {
            let mut st = st;
            st.trace.push(format!("{name}: no such chain (dropped)"));
            return vec![(st, Flow::Drop)];
        };
        if depth > MAX_DEPTH {
            let mut st = st;
            st.trace.push(format!("{name}: jumps nest too deep (dropped)"));
            return vec![(st, Flow::Drop)];
        }
        let mut active = vec![st];
        let mut out = Vec::new();
        for rule in &chain.rules {
            let mut next = Vec::new();
            for st in active {
                for (st, flow) in self.rule(name, rule, st, depth) {
                    match flow {
                        Flow::Next => next.push(st),
                        Flow::Return => out.push((st, Flow::Next)),
                        end => out.push((st, end)),
                    }
                }
            }
            active = next;
        }
        out.extend(active.into_iter().map(|st| (st, Flow::Next)));
        out
    }

    fn rule(&self, chain: &str, rule: &Rule, st: State, depth: usize) -> Vec<(State, Flow)> {
        let mut st = st;
        let mut i = 0;
        while let Some(Item::Match(m)) = rule.items.get(i) {
            if !self.matches(m, &st) {
                return vec![(st, Flow::Next)];
            }
            i += 1;
        }
        if !self.applies(rule.items.get(i), &st) {
            return vec![(st, Flow::Next)];
        }
        st.trace.push(format!("{chain}: {}", rule_text(rule)));
        self.statements(&rule.items[i..], st, depth)
    }

    /// Whether a rule's first statement can act on this packet at all (an `ip6 daddr` lookup
    /// does nothing to an IPv4 packet): rules that cannot are left out of the trace.
    fn applies(&self, first: Option<&Item>, st: &State) -> bool {
        match first {
            Some(Item::Stmt(Stmt::Vmap { key, .. })) => !self.keys(key, st).is_empty(),
            Some(Item::Stmt(Stmt::AnonVmap { key, .. })) => !self.keys(std::slice::from_ref(key), st).is_empty(),
            Some(Item::Stmt(Stmt::Dnat { family, .. })) => IpFamily::of(&st.daddr) == *family,
            _ => true,
        }
    }

    fn statements(&self, items: &[Item], mut st: State, depth: usize) -> Vec<(State, Flow)> {
        let Some((first, rest)) = items.split_first() else { return vec![(st, Flow::Next)] };
        let stmt = match first {
            Item::Match(m) if self.matches(m, &st) => return self.statements(rest, st, depth),
            Item::Match(_) => return vec![(st, Flow::Next)],
            Item::Stmt(s) => s,
        };
        match stmt {
            Stmt::Verdict(v) => self.verdict(v, st, depth),
            Stmt::Vmap { key, map } => {
                let keys = self.keys(key, &st);
                if keys.is_empty() {
                    return vec![(st, Flow::Next)];
                }
                let mut out = Vec::new();
                for (key_text, blob) in keys {
                    let found = self.rs.sets.get(map).and_then(|s| s.elements.get(&blob)).map(|e| e.data.clone());
                    let mut st = st.clone();
                    match found {
                        Some(Some(ElemData::Verdict(v))) => {
                            st.trace.push(format!("  @{map}: {key_text} : {v}"));
                            out.extend(self.verdict(&v, st, depth));
                        }
                        _ => {
                            st.trace.push(format!("  @{map}: no element {key_text}"));
                            out.push((st, Flow::Next));
                        }
                    }
                }
                out
            }
            Stmt::AnonVmap { key, entries } => {
                let keys = self.keys(std::slice::from_ref(key), &st);
                if keys.is_empty() {
                    return vec![(st, Flow::Next)];
                }
                let mut out = Vec::new();
                for (key_text, blob) in keys {
                    let hit = entries.iter().find(|(v, _)| encode_concat(std::slice::from_ref(v)) == blob);
                    let mut st = st.clone();
                    match hit {
                        Some((_, v)) => {
                            st.trace.push(format!("  {key_text} : {v}"));
                            out.extend(self.verdict(v, st, depth));
                        }
                        None => out.push((st, Flow::Next)),
                    }
                }
                out
            }
            Stmt::MarkOr(bits) => {
                st.mark |= bits;
                self.statements(rest, st, depth)
            }
            Stmt::MarkXor(bits) => {
                st.mark ^= bits;
                self.statements(rest, st, depth)
            }
            Stmt::Dnat { family, target } => self.dnat(*family, target, st),
            Stmt::Masquerade { .. } => {
                st.masquerade = true;
                vec![(st, Flow::Accept)]
            }
            Stmt::Reject(_) => vec![(st, Flow::Reject)],
            Stmt::Counter | Stmt::NfTrace => self.statements(rest, st, depth),
            Stmt::Update { set, .. } => {
                st.trace.push(format!("  client remembered in @{set}"));
                self.statements(rest, st, depth)
            }
            Stmt::FlowAdd { flowtable } => {
                st.trace.push(format!("  connection offloaded to flowtable @{flowtable}"));
                st.offloaded = Some(flowtable.clone());
                self.statements(rest, st, depth)
            }
        }
    }

    fn verdict(&self, v: &Verdict, st: State, depth: usize) -> Vec<(State, Flow)> {
        match v {
            Verdict::Accept => vec![(st, Flow::Accept)],
            Verdict::Drop => vec![(st, Flow::Drop)],
            Verdict::Return => vec![(st, Flow::Return)],
            Verdict::Jump(c) => self
                .chain(c, st, depth + 1)
                .into_iter()
                .map(|(st, f)| (st, if matches!(f, Flow::Next | Flow::Return) { Flow::Next } else { f }))
                .collect(),
            // The end of a chain reached by goto leaves the chain that went there.
            Verdict::Goto(c) => self
                .chain(c, st, depth + 1)
                .into_iter()
                .map(|(st, f)| (st, if matches!(f, Flow::Next | Flow::Return) { Flow::Return } else { f }))
                .collect(),
        }
    }

    fn dnat(&self, family: IpFamily, target: &DnatTarget, st: State) -> Vec<(State, Flow)> {
        if IpFamily::of(&st.daddr) != family {
            return vec![(st, Flow::Next)];
        }
        let translate = |mut st: State, to: SocketAddr| {
            st.trace.push(format!("  DNAT to {to}"));
            st.daddr = to.ip();
            st.dport = to.port();
            st.dnat = Some(to);
            (st, Flow::Accept)
        };
        match target {
            DnatTarget::Addr { addr, port } => vec![translate(st, SocketAddr::new(*addr, *port))],
            DnatTarget::Map { key, map } => {
                let Some(set) = self.rs.sets.get(map) else { return vec![(st, Flow::Drop)] };
                let data_types = set.decl.data.as_ref().map(|d| d.datatypes()).unwrap_or_default();
                let keys = self.keys(key, &st);
                if keys.is_empty() {
                    return vec![(st, Flow::Next)];
                }
                let mut out = Vec::new();
                for (key_text, blob) in keys {
                    let mut st = st.clone();
                    let value = set.elements.get(&blob).and_then(|e| match &e.data {
                        Some(ElemData::Value(v)) => decode_concat(&data_types, v.as_slice()),
                        _ => None,
                    });
                    match value.as_deref() {
                        Some([Value::Addr(a), Value::Port(p)]) => {
                            st.trace.push(format!("  @{map}: {key_text} : {a} . {p}"));
                            out.push(translate(st, SocketAddr::new(*a, *p)));
                        }
                        // No element: the kernel's nat expression fails the lookup and the
                        // packet is dropped.
                        _ => {
                            st.trace.push(format!("  @{map}: no element {key_text} (dropped)"));
                            out.push((st, Flow::Drop));
                        }
                    }
                }
                out
            }
        }
    }

    fn matches(&self, m: &Match, st: &State) -> bool {
        match m {
            Match::Cmp { left: Selector::IifName, op, right: Value::Ifname(name) }
                if name == LOOPBACK && self.packet.in_interface.is_none() =>
            {
                // The interface is not known, but whether it is loopback is: a packet that
                // arrives from the network did not, and the node's own have no input
                // interface in the output hook (the kernel's `iifname` fails there).
                !self.host.is_local(&self.packet.src) && *op == Op::Neq
            }
            Match::Cmp { left, op, right } => {
                let Some(v) = self.load(*left, st) else { return false };
                (v == *right) == (*op == Op::Eq)
            }
            Match::Prefix { left, op, net } => match self.load(*left, st) {
                Some(Value::Addr(a)) if IpFamily::of(&a) == net.family() => net.contains(&a) == (*op == Op::Eq),
                _ => false,
            },
            Match::IfnamePrefix { op, prefix } => match &self.packet.in_interface {
                Some(name) => name.starts_with(prefix.as_str()) == (*op == Op::Eq),
                None => false,
            },
            Match::Flags { left: Selector::CtState, flags } => {
                flags & if st.established { CT_STATE_ESTABLISHED } else { CT_STATE_NEW } != 0
            }
            Match::Flags { left: Selector::CtStatus, flags } => flags & CT_STATUS_DNAT != 0 && st.dnat.is_some(),
            Match::Flags { .. } => false,
            Match::Masked { left, mask, op, right } => match self.load(*left, st) {
                Some(Value::Int(v)) => ((v & mask) == *right) == (*op == Op::Eq),
                _ => false,
            },
            Match::InSet { key, set, op } => {
                let keys = self.keys(key, st);
                let Some(set) = self.rs.sets.get(set) else { return false };
                let found = keys.iter().any(|(_, k)| set.elements.contains_key(k));
                !keys.is_empty() && found == (*op == Op::Eq)
            }
            Match::InAnonSet { left, values } => self.load(*left, st).is_some_and(|v| values.contains(&v)),
        }
    }

    /// The value a selector loads, or `None` when it cannot (an `ip` selector on an IPv6
    /// packet, an unknown input interface): the match then fails, as in the kernel.
    fn load(&self, sel: Selector, st: &State) -> Option<Value> {
        let family_ok = |f: IpFamily| IpFamily::of(&st.daddr) == f;
        Some(match sel {
            Selector::Saddr(f) if family_ok(f) => Value::Addr(self.packet.src),
            Selector::Daddr(f) if family_ok(f) => Value::Addr(st.daddr),
            Selector::Saddr(_) | Selector::Daddr(_) => return None,
            Selector::L4Proto => Value::Proto(self.packet.protocol.number()),
            Selector::ThDport => Value::Port(st.dport),
            Selector::Mark => Value::Int(st.mark),
            Selector::IifName => Value::Ifname(self.packet.in_interface.clone()?),
            Selector::FibSaddrType => self.fib(self.packet.src)?,
            Selector::FibDaddrType => self.fib(st.daddr)?,
            Selector::Numgen(_) | Selector::CtState | Selector::CtStatus => return None,
        })
    }

    fn fib(&self, addr: IpAddr) -> Option<Value> {
        // Only `type local` is ever compared against; any other type is "not local".
        Some(if self.host.is_local(&addr) { Value::Local } else { Value::Int(1) })
    }

    /// The lookup keys of a concatenation, with their text: one per `numgen` outcome.
    fn keys(&self, sels: &[Selector], st: &State) -> Vec<(String, crate::ruleset::Blob)> {
        let mut partials: Vec<Vec<Value>> = vec![Vec::new()];
        for sel in sels {
            let choices: Vec<Value> = match sel {
                Selector::Numgen(n) => (0..*n).map(Value::Int).collect(),
                other => match self.load(*other, st) {
                    Some(v) => vec![v],
                    None => return Vec::new(),
                },
            };
            partials = partials
                .into_iter()
                .flat_map(|p| {
                    choices.iter().map(move |c| {
                        let mut p = p.clone();
                        p.push(c.clone());
                        p
                    })
                })
                .collect();
        }
        partials
            .into_iter()
            .map(|vals| (vals.iter().map(value).collect::<Vec<_>>().join(" . "), encode_concat(&vals)))
            .collect()
    }
}
