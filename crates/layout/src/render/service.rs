//! What one Service port adds to the table, for one address family.
//!
//! Most Service ports use the shared layout: their addresses point at an endpoint-count class
//! chain ([`Class`]) that DNATs through a shared hash map. A port whose traffic depends on the
//! client (session affinity) or on where its endpoints run (a Local traffic policy) gets
//! chains of its own in upstream's layout instead ([`super::own`]): those are rare, and their
//! rules read exactly like upstream kube-proxy's.

use super::counters::{self, Keyed, Outcome};
use super::names::{CLUSTER_IPS, FIREWALL_IPS, HAIRPIN_ENDPOINTS, family_name, service_chain};
use super::port_view::PortView;
use super::{Class, ClassKind, Sink, own};
use std::net::IpAddr;
use std::sync::Arc;
use verdict_model::{Cidr, EndpointTarget, IpFamily, ProxyModel, ServicePort};
use verdict_nft::rule::build::{in_net, is, verdict};
use verdict_nft::rule::{Op, Rule, Selector, Value, encode_concat};
use verdict_nft::ruleset::{Chain, Elem, Verdict};

/// Sets whose elements several Service ports may add (a ClusterIP shared by a Service's
/// ports, a pod backing several Services): the incremental table counts their references.
pub(crate) fn is_shared(set: &str) -> bool {
    set.starts_with(CLUSTER_IPS) || set.starts_with(HAIRPIN_ENDPOINTS)
}

/// Writes `port`'s share of the table for family `f`.
pub(crate) fn render(model: &ProxyModel, port: &ServicePort, f: IpFamily, sink: &mut impl Sink) {
    // A Service exists in a family only if it has a ClusterIP of that family (as upstream's
    // per-family proxiers see it): a single-stack Service's NodePort is not claimed for the
    // other family.
    let Some(view) = PortView::of(model, port, f) else { return };
    let cluster_ip = view.cluster_ip;
    sink.element(&family_name(CLUSTER_IPS, f), encode_concat(&[Value::Addr(cluster_ip)]), Elem::plain());
    let hairpin = family_name(HAIRPIN_ENDPOINTS, f);
    let mut endpoints: Vec<&EndpointTarget> = view.selection.cluster.iter().chain(&view.selection.local).collect();
    endpoints.sort();
    endpoints.dedup_by_key(|e| e.addr);
    for ep in endpoints {
        sink.element(&hairpin, encode_concat(&[Value::Addr(ep.addr), Value::Addr(ep.addr)]), Elem::plain());
    }

    if port.needs_own_chains() {
        own::render(&view, sink);
    } else {
        render_shared(&view, sink);
    }
    render_firewall(&view, sink);
    if view.counted() {
        count(&view, sink);
    }
}

/// Only `port`'s elements in the counting sets for family `f` (none when it is not counted):
/// the keys a reader of the counters asks the kernel for.
pub(crate) fn render_counting(model: &ProxyModel, port: &ServicePort, f: IpFamily, sink: &mut impl Sink) {
    if let Some(view) = PortView::of(model, port, f).filter(PortView::counted) {
        count(&view, sink);
    }
}

/// The port's elements in the counting sets: present whatever its endpoints, so that its
/// counters live as long as the port (see [`counters`]).
fn count(view: &PortView, sink: &mut impl Sink) {
    let f = view.family;
    let elem = || Elem::plain_commented(view.comment.clone());
    let mut addresses = vec![view.cluster_ip];
    addresses.extend(view.external_addresses());
    for outcome in [Outcome::Accepted, Outcome::Rejected] {
        let set = counters::set_name(outcome, Keyed::Address, f);
        for addr in &addresses {
            sink.element(&set, encode_concat(&view.address_key(*addr)), elem());
        }
        if let Some(key) = view.node_port_key() {
            sink.element(&counters::set_name(outcome, Keyed::NodePort, f), encode_concat(&key), elem());
        }
    }
    let set = counters::set_name(Outcome::Firewalled, Keyed::Address, f);
    for ip in firewalled(view) {
        sink.element(&set, encode_concat(&view.address_key(ip)), elem());
    }
}

/// The load balancer IPs of this family that `loadBalancerSourceRanges` filters (none when
/// the port has no ranges of this family, unless a range could not be applied: then every
/// family's are filtered, and nothing is allowed).
fn firewalled(view: &PortView) -> Vec<IpAddr> {
    view.port.firewalled_ips(view.family)
}

/// The shared layout: every address points at the class chain of its endpoint count, and the
/// endpoints fill that class's map under the address's key.
fn render_shared(view: &PortView, sink: &mut impl Sink) {
    let endpoints = &view.selection.cluster;
    let f = view.family;
    let n = endpoints.len();
    let plain = Class { kind: ClassKind::Address, family: f, n, masquerade: false };
    let masq = Class { masquerade: true, ..plain };

    let mut addresses = vec![(view.cluster_ip, plain)];
    addresses.extend(view.external_addresses().into_iter().map(|a| (a, masq)));
    for (addr, class) in addresses {
        match view.no_endpoint_verdict(endpoints) {
            Some(v) => view.block_address(sink, addr, v),
            None => {
                let names = sink.class(class);
                view.dispatch_address(sink, addr, Verdict::Goto(names.chain));
                fill_slots(sink, &names.map, &view.address_key(addr), endpoints, &view.comment);
            }
        }
    }
    if let Some(key) = view.node_port_key() {
        match view.no_endpoint_verdict(endpoints) {
            Some(v) => view.block_node_port(sink, v),
            None => {
                let class = Class { kind: ClassKind::NodePort, family: f, n, masquerade: true };
                let names = sink.class(class);
                view.dispatch_node_port(sink, Verdict::Goto(names.chain));
                fill_slots(sink, &names.map, &key, endpoints, &view.comment);
            }
        }
    }
}

/// One element per endpoint: `<prefix> . slot : addr . port`.
fn fill_slots(sink: &mut impl Sink, map: &str, prefix: &[Value], endpoints: &[EndpointTarget], comment: &Arc<str>) {
    let mut key = prefix.to_vec();
    key.push(Value::Int(0));
    for (slot, ep) in endpoints.iter().enumerate() {
        *key.last_mut().expect("slot") = Value::Int(slot as u32);
        let data = encode_concat(&[Value::Addr(ep.addr), Value::Port(ep.port)]);
        sink.element(map, encode_concat(&key), Elem::value(data, Some(comment.clone())));
    }
}

/// `loadBalancerSourceRanges`: before DNAT, a new connection to a load balancer IP from a
/// source outside the ranges is dropped. NodePorts and external IPs are not filtered (as
/// upstream). When a range contains a node address, the load balancer IPs themselves are
/// allowed as sources too (traffic hairpinned through the load balancer). A port whose
/// firewall is closed (a range could not be applied) gets the same chain with no range in it:
/// every source is dropped.
fn render_firewall(view: &PortView, sink: &mut impl Sink) {
    let f = view.family;
    let lb_ips = firewalled(view);
    let ranges: Vec<Cidr> = view.port.source_ranges().iter().filter(|c| c.family() == f).copied().collect();
    if lb_ips.is_empty() || (ranges.is_empty() && !view.port.firewall_closed()) {
        return;
    }
    let name = family_name(&service_chain("firewall", &view.port.name), f).into_owned();
    let node_addresses = view.model.node.addresses.iter().chain(&view.model.node.primary_ips);
    let node_in_range = node_addresses.into_iter().any(|a| ranges.iter().any(|r| r.contains(a)));
    let allow = |item| Rule::new(vec![item, verdict(Verdict::Return)]);
    let mut rules: Vec<Rule> = ranges.iter().map(|r| allow(in_net(Selector::Saddr(f), Op::Eq, *r))).collect();
    if node_in_range {
        rules.extend(lb_ips.iter().map(|ip| allow(is(Selector::Saddr(f), Value::Addr(*ip)))));
    }
    if view.counted() {
        rules.push(counters::count_address(Outcome::Firewalled, f));
    }
    rules.push(Rule::new(vec![verdict(Verdict::Drop)]).comment("source not in loadBalancerSourceRanges"));
    sink.chain(Chain::regular(name.clone(), rules));
    let target = Verdict::Goto(Arc::from(name.as_str()));
    for ip in lb_ips {
        sink.element(&family_name(FIREWALL_IPS, f), encode_concat(&view.address_key(ip)), view.element(target.clone()));
    }
}
