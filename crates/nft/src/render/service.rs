//! What one Service port adds to the table, for one address family.

use super::names::{
    self, CLUSTER_IPS, HAIRPIN_ENDPOINTS, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, REJECT_CHAIN, SERVICE_IPS,
    SERVICE_NODEPORTS, family_name,
};
use super::{Builder, addr_key};
use crate::rule::build::*;
use crate::rule::{DnatTarget, Rule, Selector, Stmt, Value, encode_concat};
use crate::ruleset::{Chain, DataSpec, Elem, KeySpec, SetDecl, Verdict};
use std::sync::Arc;
use verdict_model::{EndpointTarget, IpFamily, ProxyModel, ServicePort};

pub(super) fn render(model: &ProxyModel, port: &ServicePort, f: IpFamily, b: &mut Builder) {
    // A Service exists in a family only if it has a ClusterIP of that family (as upstream's
    // per-family proxiers see it): a single-stack Service's NodePort is not claimed for the
    // other family.
    let Some(cip) = port.cluster_ip(f) else { return };
    let comment: Arc<str> = Arc::from(port.name.to_string());
    let selection = port.selection(f);
    let proto = Value::Proto(port.protocol().number());
    let service_port = Value::Port(port.port);

    b.element(&family_name(CLUSTER_IPS, f), encode_concat(&[Value::Addr(cip)]), Elem::plain());
    let address = [Value::Addr(cip), proto.clone(), service_port];
    let endpoints = if port.internal_policy_local { &selection.local } else { &selection.cluster };
    if endpoints.is_empty() {
        let no_endpoints = Elem::verdict(reject(), Some(comment.clone()));
        b.element(&family_name(NO_ENDPOINT_SERVICES, f), encode_concat(&address), no_endpoints);
    } else {
        let chain = address_endpoints(b, f, endpoints.len());
        let dispatch = Elem::verdict(Verdict::Goto(chain.clone()), Some(comment.clone()));
        b.element(&family_name(SERVICE_IPS, f), encode_concat(&address), dispatch);
        fill_slots(b, &chain, &address, endpoints, &comment);
    }

    if let Some(node_port) = port.node_port {
        let key = [proto, Value::Port(node_port)];
        if selection.cluster.is_empty() {
            let no_endpoints = Elem::verdict(reject(), Some(comment.clone()));
            b.element(&family_name(NO_ENDPOINT_NODEPORTS, f), encode_concat(&key), no_endpoints);
        } else {
            let chain = nodeport_endpoints_chain(model, b, f, selection.cluster.len());
            let dispatch = Elem::verdict(Verdict::Goto(chain.clone()), Some(comment.clone()));
            b.element(&family_name(SERVICE_NODEPORTS, f), encode_concat(&key), dispatch);
            fill_slots(b, &chain, &key, &selection.cluster, &comment);
        }
    }

    let hairpin = family_name(HAIRPIN_ENDPOINTS, f);
    for ep in selection.cluster.iter().chain(&selection.local) {
        b.element(&hairpin, encode_concat(&[Value::Addr(ep.addr), Value::Addr(ep.addr)]), Elem::plain());
    }
}

fn reject() -> Verdict {
    Verdict::Goto(Arc::from(REJECT_CHAIN))
}

/// One element per endpoint: `<prefix> . slot : addr . port`.
fn fill_slots(b: &mut Builder, map: &str, prefix: &[Value], endpoints: &[EndpointTarget], comment: &Arc<str>) {
    let mut key = prefix.to_vec();
    key.push(Value::Int(0));
    for (slot, ep) in endpoints.iter().enumerate() {
        *key.last_mut().expect("slot") = Value::Int(slot as u32);
        let data = encode_concat(&[Value::Addr(ep.addr), Value::Port(ep.port)]);
        b.element(map, encode_concat(&key), Elem::value(data, Some(comment.clone())));
    }
}

fn data_spec(f: IpFamily) -> DataSpec {
    DataSpec::Typeof(vec![Selector::Daddr(f), Selector::ThDport])
}

/// The chain and map that DNAT a Service address to one of `n` endpoints (created on first use).
fn address_endpoints(b: &mut Builder, f: IpFamily, n: usize) -> Arc<str> {
    let name = names::endpoints(n, f);
    if !b.has_chain(&name) {
        let mut key = addr_key(f).to_vec();
        key.push(Selector::Numgen(n as u32));
        b.declare(SetDecl::map(&name, KeySpec::Typeof(key.clone()), data_spec(f)));
        let dnat = Stmt::Dnat { family: f, target: DnatTarget::Map { key, map: name.clone() } };
        b.chain(Chain::regular(&name, vec![Rule::new(vec![l4proto_any(), stmt(dnat)])]));
    }
    Arc::from(name.as_str())
}

/// The chain and map that masquerade NodePort traffic and DNAT it to one of `n` endpoints.
fn nodeport_endpoints_chain(model: &ProxyModel, b: &mut Builder, f: IpFamily, n: usize) -> Arc<str> {
    let name = names::nodeport_endpoints(n, f);
    if !b.has_chain(&name) {
        let key = vec![Selector::L4Proto, Selector::ThDport, Selector::Numgen(n as u32)];
        b.declare(SetDecl::map(&name, KeySpec::Typeof(key.clone()), data_spec(f)));
        let dnat = Stmt::Dnat { family: f, target: DnatTarget::Map { key, map: name.clone() } };
        let mark = Stmt::MarkOr(model.config.masquerade_mark());
        b.chain(Chain::regular(&name, vec![Rule::new(vec![stmt(mark), l4proto_any(), stmt(dnat)])]));
    }
    Arc::from(name.as_str())
}
