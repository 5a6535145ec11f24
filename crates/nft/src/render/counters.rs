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
use super::{Class, Sink};
use crate::rule::build::in_set;
use crate::rule::{Item, Rule, Selector};
use crate::ruleset::{Blob, Chain, Datatype, Elem, KeySpec, SetDecl};
use std::collections::HashMap;
use std::sync::OnceLock;
use verdict_model::{IpFamily, ProxyModel, ServicePort, ServicePortName};

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
pub fn set_name(outcome: Outcome, keyed: Keyed, family: IpFamily) -> String {
    let kind = match keyed {
        Keyed::Address => "ips",
        Keyed::NodePort => "nodeports",
    };
    family_name(&format!("{}-{kind}", outcome.label()), family).into_owned()
}

/// The outcome a counting set's name stands for (the reader's inverse of [`set_name`]).
pub fn outcome_of(set: &str) -> Option<Outcome> {
    [IpFamily::V4, IpFamily::V6].into_iter().flat_map(sets).find(|(_, _, name)| name == set).map(|(o, _, _)| o)
}

/// The declaration of a counting set.
pub fn decl(outcome: Outcome, keyed: Keyed, family: IpFamily) -> SetDecl {
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
pub fn count_address(outcome: Outcome, family: IpFamily) -> Rule {
    let key = [Selector::Daddr(family), Selector::L4Proto, Selector::ThDport];
    Rule::new(vec![in_set(&key, &set_name(outcome, Keyed::Address, family))])
}

/// The lookup that counts a connection to a NodePort; `guard` (the NodePort address test, or
/// nothing) keeps out traffic to Service addresses in chains that also see it.
pub fn count_node_port(outcome: Outcome, family: IpFamily, guard: Vec<Item>) -> Rule {
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

/// Collects only the elements of counting sets.
struct KeySink {
    keys: Vec<CountedKey>,
}

impl Sink for KeySink {
    fn element(&mut self, set: &str, key: Blob, _elem: Elem) {
        static NAMES: OnceLock<Vec<(String, CountingSet)>> = OnceLock::new();
        let names = NAMES.get_or_init(|| CountingSet::all().map(|s| (s.name(), s)).collect());
        if let Some((_, s)) = names.iter().find(|(name, _)| name == set) {
            self.keys.push(CountedKey { set: *s, key });
        }
    }

    fn class(&mut self, class: Class) -> super::ClassNames {
        super::ClassNames::of(class)
    }

    fn chain(&mut self, _chain: Chain) {}

    fn set(&mut self, _decl: SetDecl) {}
}

/// The keys of the counting-set elements the table holds, by Service port, kept up to date
/// one port at a time alongside the table.
///
/// Reading the counters asks the kernel for each of these elements by key, which costs the
/// same for every element; a dump of the sets instead costs the kernel O(n²) (each 32 KiB
/// reply walks the set again from its start: seconds at 100k counted ports).
#[derive(Clone, Debug, Default)]
pub struct CountedKeys {
    ports: HashMap<ServicePortName, Vec<CountedKey>>,
    len: usize,
}

impl CountedKeys {
    /// The keys of every counted port of `model`.
    pub fn of_model(model: &ProxyModel) -> CountedKeys {
        let mut keys = CountedKeys::default();
        for port in model.services.values() {
            keys.update(model, &port.name, Some(port));
        }
        keys
    }

    /// Port `name` is now `port` (`None`: removed); whether its keys changed (an endpoint
    /// change leaves them as they were).
    pub fn update(&mut self, model: &ProxyModel, name: &ServicePortName, port: Option<&ServicePort>) -> bool {
        let old = self.ports.remove(name);
        if let Some(old) = &old {
            self.len -= old.len();
        }
        let mut sink = KeySink { keys: Vec::new() };
        if let Some(port) = port {
            for family in model.families() {
                super::service::render_counting(model, port, family, &mut sink);
            }
        }
        let changed = old.unwrap_or_default() != sink.keys;
        if !sink.keys.is_empty() {
            self.len += sink.keys.len();
            sink.keys.shrink_to_fit();
            self.ports.insert(name.clone(), sink.keys);
        }
        changed
    }

    /// How many elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &CountedKey> {
        self.ports.values().flatten()
    }
}
