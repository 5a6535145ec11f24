//! Matches that chains of more than one file write: which traffic comes from a pod, which is
//! addressed to a NodePort address, which is (not) to loopback.

use super::names::{NODEPORT_IPS, family_name};
use std::net::{Ipv4Addr, Ipv6Addr};
use verdict_model::{Cidr, IpFamily, PodMatch, ProxyModel, loopback_net};
use verdict_nft::rule::build::{in_net, in_set, is, is_not};
use verdict_nft::rule::{Item, Match, Op, Selector, Value};

/// The match that tells pod traffic apart (`!=`: not from a pod).
pub(super) fn pod_item(pod: &PodMatch, family: IpFamily, op: Op) -> Item {
    match pod {
        PodMatch::Cidr(c) => in_net(Selector::Saddr(family), op, *c),
        PodMatch::Interface(name) => {
            Item::Match(Match::Cmp { left: Selector::IifName, op, right: Value::Ifname(name.clone()) })
        }
        PodMatch::InterfacePrefix(p) => Item::Match(Match::IfnamePrefix { op, prefix: p.clone() }),
    }
}

/// The matches for "the destination accepts NodePort traffic" in family `f`: an address of
/// `nodeport-ips`, or, when every local address does, upstream's `fib daddr type local` with
/// loopback left out (localhost NodePorts, when on, are matched apart: [`to_localhost`]). The
/// `fib` test follows the node's addresses as they change, with no resync.
pub(super) fn to_nodeport_address(model: &ProxyModel, f: IpFamily) -> Vec<Item> {
    if model.config.nodeport_addresses.all_local(f) {
        vec![is(Selector::FibDaddrType, Value::Local), not_loopback(f)]
    } else {
        vec![in_set(&[Selector::Daddr(f)], &family_name(NODEPORT_IPS, f))]
    }
}

/// `ip daddr != 127.0.0.0/8`, `ip6 daddr != ::1`: upstream's words, which also tie a `fib`
/// rule to its family in the one `inet` table.
pub(super) fn not_loopback(f: IpFamily) -> Item {
    match f {
        IpFamily::V4 => in_net(Selector::Daddr(f), Op::Neq, Cidr::new(Ipv4Addr::LOCALHOST.into(), 8).expect("/8")),
        IpFamily::V6 => is_not(Selector::Daddr(f), Value::Addr(Ipv6Addr::LOCALHOST.into())),
    }
}

/// `ip daddr 127.0.0.0/8`: a localhost NodePort's destination (IPv4 only: the kernel routes
/// no reply to `::1` that arrives on another interface, docs/semantics.md).
pub(super) fn to_localhost() -> Item {
    in_net(Selector::Daddr(IpFamily::V4), Op::Eq, loopback_net(IpFamily::V4))
}

/// Every way a packet of family `f` can be addressed to a NodePort, one rule's matches each:
/// [`to_nodeport_address`], and with localhost NodePorts (IPv4) [`to_localhost`] as well. For
/// rules that only look (counting, the no-endpoint checks); DNAT for localhost is the nat
/// output hook's alone.
pub(super) fn nodeport_destinations(model: &ProxyModel, f: IpFamily) -> Vec<Vec<Item>> {
    let mut out = vec![to_nodeport_address(model, f)];
    if f == IpFamily::V4 && model.config.localhost_nodeports {
        out.push(vec![to_localhost()]);
    }
    out
}

/// `iifname != "lo"`: not the node's own traffic (a packet the node sends to itself comes back
/// in over loopback).
pub(super) fn not_from_loopback() -> Item {
    is_not(Selector::IifName, Value::Ifname("lo".into()))
}
