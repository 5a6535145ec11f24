//! Where a new connection ends, computed from a [`Ruleset`]: the same table verdict programs.
//!
//! The packet walks the table's base chains hook by hook, as the kernel runs them for the
//! first packet of a connection: prerouting (or output, for a connection the node itself
//! opens), then input or forward (after DNAT, by whether the destination is a node address),
//! then postrouting. Every rule is evaluated with the semantics of the kernel expressions it
//! lowers to; random choices (`numgen`) follow every branch, so the answer lists every endpoint
//! the connection may reach. The interpreter knows every rule shape verdict writes, which is
//! all [`crate::rule`] can express.

mod eval;

use crate::ruleset::{ChainKind, Hook, Ruleset};
use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use verdict_net::Protocol;

/// The first packet of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Transport protocol.
    pub protocol: Protocol,
    /// Destination port.
    pub dport: u16,
    /// The interface it arrives on (`iifname` matches), when known.
    pub in_interface: Option<String>,
}

/// What the node knows about itself.
#[derive(Clone, Debug, Default)]
pub struct Host {
    /// The node's own addresses: `fib ... type local`, and the sources of connections the node
    /// opens itself.
    pub local_addresses: Vec<IpAddr>,
}

impl Host {
    /// The node's own: one of its addresses, or loopback (the kernel's local routing table
    /// holds 127.0.0.0/8 and ::1 on every node).
    fn is_local(&self, addr: &IpAddr) -> bool {
        addr.is_loopback() || self.local_addresses.contains(addr)
    }
}

/// How one possible path of the connection ends.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fate {
    /// Dropped (no answer; the client times out).
    Drop,
    /// Rejected (the client gets an ICMP error: "connection refused").
    Reject,
    /// Let through: to `dnat` if it was translated (to the original destination if not), with
    /// its source masqueraded or kept.
    Pass {
        /// The endpoint it was DNATed to.
        dnat: Option<SocketAddr>,
        /// Whether the source is masqueraded at postrouting.
        masquerade: bool,
    },
}

/// One possible path: how it ends and what it went through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// How it ends.
    pub fate: Fate,
    /// The rules that acted and the map entries they used, in order.
    pub trace: Vec<String>,
    /// The flowtable the connection's later packets are offloaded to, once it is established
    /// (the fast path), with the rule that offloads it.
    pub offload: Option<Offload>,
}

/// Where and how an established connection is offloaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offload {
    /// The flowtable.
    pub flowtable: String,
    /// The interfaces whose packets it forwards (as read from the kernel; empty when unknown).
    pub devices: Vec<String>,
    /// What a later packet went through in the forward hook.
    pub trace: Vec<String>,
}

/// Where a packet may end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The packet.
    pub packet: Packet,
    /// Whether the node opened the connection (output path) or it arrived (prerouting path).
    pub from_node: bool,
    /// Every possible path (several when an endpoint is picked at random).
    pub branches: Vec<Branch>,
}

/// The answer in short, the way upstream kube-proxy's tests state expectations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Summary {
    /// Every path is dropped.
    Drop,
    /// Every path is rejected.
    Reject,
    /// DNATed to one of these endpoints; `masquerade` lists whether each path is masqueraded.
    Endpoints {
        /// The endpoints the connection may reach.
        endpoints: BTreeSet<SocketAddr>,
        /// Masquerading per endpoint path: all the same in every case but hairpin.
        masquerade: BTreeSet<bool>,
    },
    /// Not translated: the table lets it through as it is.
    NotHandled {
        /// Whether it is masqueraded anyway.
        masquerade: bool,
    },
    /// Paths end differently (not something verdict writes).
    Mixed(BTreeSet<Fate>),
}

impl Explanation {
    /// The distinct fates.
    pub fn fates(&self) -> BTreeSet<Fate> {
        self.branches.iter().map(|b| b.fate.clone()).collect()
    }

    /// The answer in short.
    pub fn summary(&self) -> Summary {
        let fates = self.fates();
        if fates.iter().all(|f| *f == Fate::Drop) {
            return Summary::Drop;
        }
        if fates.iter().all(|f| *f == Fate::Reject) {
            return Summary::Reject;
        }
        let mut endpoints = BTreeSet::new();
        let mut masquerade = BTreeSet::new();
        let mut untranslated = BTreeSet::new();
        for fate in &fates {
            match fate {
                Fate::Pass { dnat: Some(ep), masquerade: m } => {
                    endpoints.insert(*ep);
                    masquerade.insert(*m);
                }
                Fate::Pass { dnat: None, masquerade: m } => {
                    untranslated.insert(*m);
                }
                _ => return Summary::Mixed(fates),
            }
        }
        match (endpoints.is_empty(), untranslated.len()) {
            (false, 0) => Summary::Endpoints { endpoints, masquerade },
            (true, 1) => Summary::NotHandled { masquerade: untranslated.into_iter().next().expect("one") },
            _ => Summary::Mixed(fates),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Summary::Drop => f.write_str("DROP"),
            Summary::Reject => f.write_str("REJECT"),
            Summary::Endpoints { endpoints, masquerade } => {
                let eps: Vec<String> = endpoints.iter().map(|e| e.to_string()).collect();
                let masq = match (masquerade.contains(&true), masquerade.contains(&false)) {
                    (true, false) => "masqueraded",
                    (false, _) => "source kept",
                    (true, true) => "masqueraded when the endpoint is the client itself",
                };
                write!(f, "DNAT to {} ({masq})", eps.join(", "))
            }
            Summary::NotHandled { masquerade: false } => f.write_str("not handled (passes unchanged)"),
            Summary::NotHandled { masquerade: true } => f.write_str("not handled (passes, masqueraded)"),
            Summary::Mixed(fates) => write!(f, "mixed: {fates:?}"),
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.packet;
        let origin = if self.from_node { "opened by the node (output path)" } else { "arriving (prerouting path)" };
        writeln!(f, "packet: {} -> {}/{} {origin}", p.src, SocketAddr::new(p.dst, p.dport), p.protocol.lower())?;
        writeln!(f, "result: {}", self.summary())?;
        let Some(first) = self.branches.first() else { return Ok(()) };
        writeln!(f, "path:")?;
        for step in &first.trace {
            writeln!(f, "  {step}")?;
        }
        if let Some(o) = self.branches.iter().find_map(|b| b.offload.as_ref()) {
            let devices = if o.devices.is_empty() { "none yet".to_string() } else { o.devices.join(", ") };
            writeln!(
                f,
                "once established: offloaded to flowtable @{} (fast path); its later packets that arrive on one of its devices ({devices}) skip the netfilter hooks",
                o.flowtable
            )?;
            for step in &o.trace {
                writeln!(f, "  {step}")?;
            }
        }
        // Other paths (other random choices) only from where they part from the first.
        let mut seen = BTreeSet::from([&first.trace]);
        for branch in &self.branches[1..] {
            if !seen.insert(&branch.trace) {
                continue;
            }
            let common = first.trace.iter().zip(&branch.trace).take_while(|(a, b)| a == b).count();
            writeln!(f, "or, from step {}:", common + 1)?;
            for step in &branch.trace[common..] {
                writeln!(f, "  {step}")?;
            }
        }
        Ok(())
    }
}

/// Explains where `packet` ends in `rs` on `host`.
pub fn explain(rs: &Ruleset, packet: &Packet, host: &Host) -> Explanation {
    let from_node = host.is_local(&packet.src);
    let first = if from_node { Hook::Output } else { Hook::Prerouting };
    let mut done = Vec::new();
    let evaluator = eval::Evaluator { rs, host, packet };
    let run_hook = |hook: Hook, states: Vec<eval::State>, done: &mut Vec<Branch>| -> Vec<eval::State> {
        let mut states = states;
        for chain in base_chains(rs, hook) {
            let mut next = Vec::new();
            for st in states {
                for (st, end) in evaluator.base_chain(chain, st) {
                    match end {
                        eval::End::Drop => done.push(Branch { fate: Fate::Drop, trace: st.trace, offload: None }),
                        eval::End::Reject => done.push(Branch { fate: Fate::Reject, trace: st.trace, offload: None }),
                        eval::End::Pass => next.push(st),
                    }
                }
            }
            states = next;
        }
        states
    };
    let live = run_hook(first, vec![eval::State::new(packet)], &mut done);
    let mut routed: Vec<(eval::State, Option<Offload>)> = Vec::new();
    if from_node {
        routed.extend(live.into_iter().map(|st| (st, None)));
    } else {
        // Routing after DNAT: to the node itself, or on.
        let (to_node, forwarded): (Vec<_>, Vec<_>) = live.into_iter().partition(|st| host.is_local(&st.daddr));
        routed.extend(run_hook(Hook::Input, to_node, &mut done).into_iter().map(|st| (st, None)));
        for st in run_hook(Hook::Forward, forwarded, &mut done) {
            let offload = offload(rs, &st, |later| run_hook(Hook::Forward, vec![later], &mut Vec::new()));
            routed.push((st, offload));
        }
    }
    for (st, offload) in routed {
        for st in run_hook(Hook::Postrouting, vec![st], &mut done) {
            // The node's own connection to one of its addresses comes back in over loopback,
            // through input (where a NodePort without endpoints is rejected).
            let arrived = match from_node && host.is_local(&st.daddr) {
                true => run_hook(Hook::Input, vec![st], &mut done),
                false => vec![st],
            };
            for st in arrived {
                let fate = Fate::Pass { dnat: st.dnat, masquerade: st.masquerade };
                done.push(Branch { fate, trace: st.trace, offload: offload.clone() });
            }
        }
    }
    Explanation { packet: packet.clone(), from_node, branches: done }
}

/// Whether a later packet of a forwarded connection (`ct state established`) is offloaded by
/// the forward hook (`forward` runs it there), and to which flowtable.
fn offload(rs: &Ruleset, st: &eval::State, forward: impl FnOnce(eval::State) -> Vec<eval::State>) -> Option<Offload> {
    let mut later = st.clone();
    later.established = true;
    later.trace.clear();
    forward(later).into_iter().find_map(|later| {
        let flowtable = later.offloaded?;
        let devices = rs.flowtables.get(&flowtable).map(|ft| ft.devices.iter().cloned().collect()).unwrap_or_default();
        Some(Offload { flowtable, devices, trace: later.trace })
    })
}

/// The table's base chains on `hook`, in priority order (filter before nat at equal priority
/// does not occur in verdict's table).
fn base_chains(rs: &Ruleset, hook: Hook) -> Vec<&str> {
    let mut chains: Vec<(i32, u8, &str)> = rs
        .chains
        .values()
        .filter_map(|c| {
            let b = c.base.as_ref()?;
            let kind_order = if b.kind == ChainKind::Nat { 1 } else { 0 };
            (b.hook == hook).then_some((b.priority, kind_order, c.name.as_str()))
        })
        .collect();
    chains.sort();
    chains.into_iter().map(|c| c.2).collect()
}
