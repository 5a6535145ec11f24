//! Per-Service connection counters (`--service-counters`): sets with a `counter` on every
//! element, consulted by a plain lookup at the one place where each outcome is decided.
//!
//! Why this shape (docs/design.md, "Service counters"): a set element's counter counts the
//! lookups that hit it, and every place below is reached only by the first packet of a
//! connection (nat chains see only packets that create a conntrack entry; the filter chains
//! jump here only for `ct state new`). The elements of a counted port are present for as
//! long as the port exists, whatever its endpoints do, so a counter never resets when a
//! Service loses and regains its endpoints, and an endpoint change writes nothing here.
//!
//! - accepted: in the chains that DNAT (class chains, and the own-layout endpoint chains);
//! - rejected: in `reject-chain`, where only no-endpoint elements go;
//! - firewalled: in the port's firewall chain, just before its drop.

use super::names::family_name;
use verdict_model::IpFamily;
use verdict_nft::rule::build::in_set;
use verdict_nft::rule::{Item, Rule, Selector};
use verdict_nft::ruleset::{Blob, Datatype, KeySpec, SetDecl};

/// What happened to a counted new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// DNATed to an endpoint.
    Accepted,
    /// Rejected: the Service has no endpoint at all.
    Rejected,
    /// Dropped by `loadBalancerSourceRanges`.
    Firewalled,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 3] = [Outcome::Accepted, Outcome::Rejected, Outcome::Firewalled];

    /// The metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Rejected => "rejected",
            Outcome::Firewalled => "firewalled",
        }
    }
}

/// Which key a counting set is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Keyed {
    /// `daddr . l4proto . dport` (ClusterIP, external and load balancer IPs).
    Address,
    /// `l4proto . dport` (NodePorts, on addresses in `nodeport-ips`).
    NodePort,
}

/// The counting sets of one family: (outcome, key kind, set name).
pub fn sets(family: IpFamily) -> Vec<(Outcome, Keyed, String)> {
    let mut out = Vec::new();
    for (outcome, keyed) in [
        (Outcome::Accepted, Keyed::Address),
        (Outcome::Accepted, Keyed::NodePort),
        (Outcome::Rejected, Keyed::Address),
        (Outcome::Rejected, Keyed::NodePort),
        (Outcome::Firewalled, Keyed::Address),
    ] {
        out.push((outcome, keyed, set_name(outcome, keyed, family)));
    }
    out
}

/// A counting set's name: `accepted-ips`, `rejected-nodeports-v6`, ...
pub(crate) fn set_name(outcome: Outcome, keyed: Keyed, family: IpFamily) -> String {
    let kind = match keyed {
        Keyed::Address => "ips",
        Keyed::NodePort => "nodeports",
    };
    family_name(&format!("{}-{kind}", outcome.label()), family).into_owned()
}

/// The declaration of a counting set.
pub(crate) fn decl(outcome: Outcome, keyed: Keyed, family: IpFamily) -> SetDecl {
    let ip = match family {
        IpFamily::V4 => Datatype::Ipv4Addr,
        IpFamily::V6 => Datatype::Ipv6Addr,
    };
    let types = match keyed {
        Keyed::Address => vec![ip, Datatype::InetProto, Datatype::InetService],
        Keyed::NodePort => vec![Datatype::InetProto, Datatype::InetService],
    };
    let comment = format!("new connections {} per Service port", outcome.label());
    SetDecl::set(&set_name(outcome, keyed, family), KeySpec::Type(types)).with_comment(&comment).with_counter()
}

/// The lookup that counts a connection to a Service address (no verdict: it only counts).
pub(crate) fn count_address(outcome: Outcome, family: IpFamily) -> Rule {
    let key = [Selector::Daddr(family), Selector::L4Proto, Selector::ThDport];
    Rule::new(vec![in_set(&key, &set_name(outcome, Keyed::Address, family))])
}

/// The lookup that counts a connection to a NodePort; `guard` (the NodePort address test, or
/// nothing) keeps out traffic to Service addresses in chains that also see it.
pub(crate) fn count_node_port(outcome: Outcome, family: IpFamily, guard: Vec<Item>) -> Rule {
    let mut items = guard;
    items.push(in_set(&[Selector::L4Proto, Selector::ThDport], &set_name(outcome, Keyed::NodePort, family)));
    Rule::new(items)
}

/// One of the counting sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CountingSet {
    /// The family whose addresses it holds.
    pub family: IpFamily,
    /// The outcome it counts.
    pub outcome: Outcome,
    /// What its keys are.
    pub keyed: Keyed,
}

impl CountingSet {
    /// Every counting set of both families.
    pub fn all() -> impl Iterator<Item = CountingSet> {
        [IpFamily::V4, IpFamily::V6].into_iter().flat_map(|family| {
            sets(family).into_iter().map(move |(outcome, keyed, _)| CountingSet { family, outcome, keyed })
        })
    }

    /// Its name in the table.
    pub fn name(self) -> String {
        set_name(self.outcome, self.keyed, self.family)
    }
}

/// An element of a counting set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CountedKey {
    /// The set.
    pub set: CountingSet,
    /// The element's key.
    pub key: Blob,
}
