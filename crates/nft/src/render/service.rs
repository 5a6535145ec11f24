//! What one Service port adds to the table, for one address family.

use super::names::{
    CLUSTER_IPS, HAIRPIN_ENDPOINTS, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, REJECT_CHAIN, SERVICE_IPS,
    SERVICE_NODEPORTS, family_name,
};
use super::{Class, ClassKind, Sink};
use crate::rule::{Value, encode_concat};
use crate::ruleset::{Elem, Verdict};
use std::sync::Arc;
use verdict_model::{EndpointTarget, IpFamily, ProxyModel, ServicePort};

/// Sets whose elements several Service ports may add (a ClusterIP shared by a Service's
/// ports, a pod backing several Services): the incremental table counts their references.
pub(crate) fn is_shared(set: &str) -> bool {
    set.starts_with(CLUSTER_IPS) || set.starts_with(HAIRPIN_ENDPOINTS)
}

/// Writes `port`'s share of the table for family `f`.
pub(crate) fn render(_model: &ProxyModel, port: &ServicePort, f: IpFamily, sink: &mut impl Sink) {
    // A Service exists in a family only if it has a ClusterIP of that family (as upstream's
    // per-family proxiers see it): a single-stack Service's NodePort is not claimed for the
    // other family.
    let Some(cip) = port.cluster_ip(f) else { return };
    let comment: Arc<str> = Arc::from(port.name.to_string());
    let selection = port.selection(f);
    let proto = Value::Proto(port.protocol().number());
    let service_port = Value::Port(port.port);

    sink.element(&family_name(CLUSTER_IPS, f), encode_concat(&[Value::Addr(cip)]), Elem::plain());
    let address = [Value::Addr(cip), proto.clone(), service_port];
    let endpoints = if port.internal_policy_local { &selection.local } else { &selection.cluster };
    if endpoints.is_empty() {
        let no_endpoints = Elem::verdict(reject(), Some(comment.clone()));
        sink.element(&family_name(NO_ENDPOINT_SERVICES, f), encode_concat(&address), no_endpoints);
    } else {
        let chain = sink.class(Class { kind: ClassKind::Address, family: f, n: endpoints.len() });
        let dispatch = Elem::verdict(Verdict::Goto(chain.clone()), Some(comment.clone()));
        sink.element(&family_name(SERVICE_IPS, f), encode_concat(&address), dispatch);
        fill_slots(sink, &chain, &address, endpoints, &comment);
    }

    if let Some(node_port) = port.node_port {
        let key = [proto, Value::Port(node_port)];
        if selection.cluster.is_empty() {
            let no_endpoints = Elem::verdict(reject(), Some(comment.clone()));
            sink.element(&family_name(NO_ENDPOINT_NODEPORTS, f), encode_concat(&key), no_endpoints);
        } else {
            let chain = sink.class(Class { kind: ClassKind::NodePort, family: f, n: selection.cluster.len() });
            let dispatch = Elem::verdict(Verdict::Goto(chain.clone()), Some(comment.clone()));
            sink.element(&family_name(SERVICE_NODEPORTS, f), encode_concat(&key), dispatch);
            fill_slots(sink, &chain, &key, &selection.cluster, &comment);
        }
    }

    let hairpin = family_name(HAIRPIN_ENDPOINTS, f);
    for ep in selection.cluster.iter().chain(&selection.local) {
        sink.element(&hairpin, encode_concat(&[Value::Addr(ep.addr), Value::Addr(ep.addr)]), Elem::plain());
    }
}

fn reject() -> Verdict {
    Verdict::Goto(Arc::from(REJECT_CHAIN))
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
