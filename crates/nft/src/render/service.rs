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
    let comment: Arc<str> = Arc::from(port.name.to_string());
    let selection = port.selection(f);
    let proto = Value::Proto(port.protocol().number());
    let service_port = Value::Port(port.port);

    if let Some(cip) = port.cluster_ip(f) {
        b.element(&family_name(CLUSTER_IPS, f), encode_concat(&[Value::Addr(cip)]), Elem::plain());
        let key = encode_concat(&[Value::Addr(cip), proto.clone(), service_port.clone()]);
        let endpoints = if port.internal_policy_local { &selection.local } else { &selection.cluster };
        if !endpoints.is_empty() {
            let chain = address_endpoints(b, f, endpoints);
            b.element(
                &family_name(SERVICE_IPS, f),
                key,
                Elem::verdict(Verdict::Goto(chain.clone()), Some(comment.clone())),
            );
            fill_slots(b, &chain, &[Value::Addr(cip), proto.clone(), service_port.clone()], endpoints, &comment);
        } else {
            b.element(&family_name(NO_ENDPOINT_SERVICES, f), key, Elem::verdict(reject(), Some(comment.clone())));
        }
    }

    if let Some(node_port) = port.node_port {
        let key_values = [proto.clone(), Value::Port(node_port)];
        let key = encode_concat(&key_values);
        if !selection.cluster.is_empty() {
            let chain = nodeport_endpoints_chain(model, b, f, selection.cluster.len());
            b.element(
                &family_name(SERVICE_NODEPORTS, f),
                key,
                Elem::verdict(Verdict::Goto(chain.clone()), Some(comment.clone())),
            );
            fill_slots(b, &chain, &key_values, &selection.cluster, &comment);
        } else {
            b.element(&family_name(NO_ENDPOINT_NODEPORTS, f), key, Elem::verdict(reject(), Some(comment.clone())));
        }
    }

    for ep in selection.cluster.iter().chain(&selection.local) {
        let hairpin = encode_concat(&[Value::Addr(ep.addr), Value::Addr(ep.addr)]);
        b.element(&family_name(HAIRPIN_ENDPOINTS, f), hairpin, Elem::plain());
    }
}

fn reject() -> Verdict {
    Verdict::Goto(Arc::from(REJECT_CHAIN))
}

/// One element per endpoint: `<prefix> . slot : addr . port`.
fn fill_slots(b: &mut Builder, map: &str, prefix: &[Value], endpoints: &[EndpointTarget], comment: &Arc<str>) {
    for (slot, ep) in endpoints.iter().enumerate() {
        let mut key = prefix.to_vec();
        key.push(Value::Int(slot as u32));
        let data = encode_concat(&[Value::Addr(ep.addr), Value::Port(ep.port)]);
        b.element(map, encode_concat(&key), Elem::value(data, Some(comment.clone())));
    }
}

fn data_spec(f: IpFamily) -> DataSpec {
    DataSpec::Typeof(vec![Selector::Daddr(f), Selector::ThDport])
}

/// The chain and map that DNAT a Service address to one of `n` endpoints (created on first use).
fn address_endpoints(b: &mut Builder, f: IpFamily, endpoints: &[EndpointTarget]) -> Arc<str> {
    let n = endpoints.len();
    let name = names::endpoints(n, f);
    if !b.has_chain(&name) {
        let mut key = addr_key(f).to_vec();
        key.push(Selector::Numgen(n as u32));
        b.declare(SetDecl::map(&name, KeySpec::Typeof(key.clone()), data_spec(f)));
        b.chain(Chain::regular(
            &name,
            vec![Rule::new(vec![
                l4proto_any(),
                stmt(Stmt::Dnat { family: f, target: DnatTarget::Map { key, map: name.clone() } }),
            ])],
        ));
    }
    Arc::from(name.as_str())
}

/// The chain and map that masquerade NodePort traffic and DNAT it to one of `n` endpoints.
fn nodeport_endpoints_chain(model: &ProxyModel, b: &mut Builder, f: IpFamily, n: usize) -> Arc<str> {
    let name = names::nodeport_endpoints(n, f);
    if !b.has_chain(&name) {
        let key = vec![Selector::L4Proto, Selector::ThDport, Selector::Numgen(n as u32)];
        b.declare(SetDecl::map(&name, KeySpec::Typeof(key.clone()), data_spec(f)));
        b.chain(Chain::regular(
            &name,
            vec![Rule::new(vec![
                stmt(Stmt::MarkOr(model.config.masquerade_mark())),
                l4proto_any(),
                stmt(Stmt::Dnat { family: f, target: DnatTarget::Map { key, map: name.clone() } }),
            ])],
        ));
    }
    Arc::from(name.as_str())
}
