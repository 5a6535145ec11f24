//! Chains of a Service port's own, in upstream kube-proxy's layout, for the ports whose
//! endpoint choice depends on the client (session affinity) or on where the traffic comes
//! from (a Local traffic policy):
//!
//! - `service-HASH-…` and `local-HASH-…`, the Cluster and Local policy chains: with affinity,
//!   one `ip saddr @affinity-… goto endpoint-…` rule per endpoint first; then a random choice;
//! - `endpoint-HASH-…__addr/port`: remembers the client (affinity), then DNATs;
//! - `external-HASH-…`: where NodePort, external IP and load balancer traffic enters.
//!
//! IPv6 policy and external chains carry a `-v6` suffix (one `inet` table holds both
//! families; endpoint chains differ by address anyway).

use super::Sink;
use super::matches::pod_item;
use super::names::{endpoint_base, family_name, service_chain};
use super::port_view::PortView;
use std::sync::Arc;
use verdict_model::{EndpointTarget, IpFamily};
use verdict_nft::rule::build::{goto, in_set, is, stmt};
use verdict_nft::rule::{DnatTarget, Op, Rule, Selector, Stmt, Value};
use verdict_nft::ruleset::{Chain, Datatype, KeySpec, SetDecl, Verdict};

/// The capacity of an affinity set: how many clients it remembers per endpoint.
pub const AFFINITY_CAPACITY: u32 = 65535;

/// Writes the port's chains and its dispatch elements.
pub(super) fn render(view: &PortView, sink: &mut impl Sink) {
    let port = view.port;
    let f = view.family;
    let selection = &view.selection;
    let external = view.is_external();
    let cluster_chain = family_name(&service_chain("service", &port.name), f).into_owned();
    let local_chain = family_name(&service_chain("local", &port.name), f).into_owned();
    let uses_cluster = !selection.cluster.is_empty() && (!port.internal_policy_local || external);
    let uses_local =
        !selection.local.is_empty() && (port.internal_policy_local || (port.external_policy_local && external));

    let mut endpoints: Vec<EndpointTarget> = Vec::new();
    if uses_cluster {
        endpoints.extend(&selection.cluster);
    }
    if uses_local {
        endpoints.extend(&selection.local);
    }
    endpoints.sort();
    endpoints.dedup();
    for ep in &endpoints {
        endpoint_objects(view, ep, sink);
    }
    if uses_cluster {
        sink.chain(policy_chain(view, &cluster_chain, &selection.cluster));
    }
    if uses_local {
        sink.chain(policy_chain(view, &local_chain, &selection.local));
    }

    let (internal, internal_chain) = if port.internal_policy_local {
        (&selection.local, &local_chain)
    } else {
        (&selection.cluster, &cluster_chain)
    };
    match view.no_endpoint_verdict(internal) {
        Some(v) => view.block_address(sink, view.cluster_ip, v),
        None => view.dispatch_address(sink, view.cluster_ip, Verdict::Goto(Arc::from(internal_chain.as_str()))),
    }

    if !external {
        return;
    }
    let addresses = view.external_addresses();
    if let Some(v) = view.no_endpoint_verdict(&selection.cluster) {
        for addr in addresses {
            view.block_address(sink, addr, v.clone());
        }
        view.block_node_port(sink, v);
        return;
    }
    let external_chain = family_name(&service_chain("external", &port.name), f).into_owned();
    let local = uses_local.then_some(local_chain.as_str());
    sink.chain(entry_chain(view, &external_chain, &cluster_chain, local));
    let to_external = Verdict::Goto(Arc::from(external_chain.as_str()));
    for addr in &addresses {
        view.dispatch_address(sink, *addr, to_external.clone());
    }
    view.dispatch_node_port(sink, to_external);
    if port.external_policy_local && selection.local.is_empty() {
        // Traffic the external chain did not DNAT (from outside, with no local endpoint) is
        // dropped by the filter chains; pod and host traffic was DNATed and passes.
        for addr in addresses {
            view.block_address(sink, addr, Verdict::Drop);
        }
        view.block_node_port(sink, Verdict::Drop);
    }
}

/// The entry chain of external traffic.
fn entry_chain(view: &PortView, name: &str, cluster: &str, local: Option<&str>) -> Chain {
    let mark = Stmt::MarkOr(view.model.config.masquerade_mark());
    let f = view.family;
    if !view.port.external_policy_local {
        let rules = vec![
            Rule::new(vec![stmt(mark)]).comment("masquerade traffic from outside the cluster"),
            Rule::new(vec![goto(cluster)]),
        ];
        return Chain::regular(name, rules);
    }
    let local_source = || is(Selector::FibSaddrType, Value::Local);
    let mut rules = Vec::new();
    if let Some(pod) = view.model.pod_match(f) {
        rules.push(Rule::new(vec![pod_item(&pod, f, Op::Eq), goto(cluster)]).comment("short-circuit pod traffic"));
    }
    rules.push(Rule::new(vec![local_source(), stmt(mark)]).comment("masquerade local traffic"));
    rules.push(Rule::new(vec![local_source(), goto(cluster)]).comment("short-circuit local traffic"));
    if let Some(local) = local {
        rules.push(Rule::new(vec![goto(local)]));
    }
    Chain::regular(name, rules)
}

/// A policy chain: sticky clients first (affinity), then a random endpoint.
fn policy_chain(view: &PortView, name: &str, endpoints: &[EndpointTarget]) -> Chain {
    let f = view.family;
    let mut rules = Vec::new();
    if view.port.affinity_timeout.is_some() {
        for ep in endpoints {
            let names = EndpointNames::new(view, ep);
            rules.push(Rule::new(vec![in_set(&[Selector::Saddr(f)], &names.affinity), goto(&names.chain)]));
        }
    }
    let entries = endpoints
        .iter()
        .enumerate()
        .map(|(slot, ep)| {
            (Value::Int(slot as u32), Verdict::Goto(Arc::from(EndpointNames::new(view, ep).chain.as_str())))
        })
        .collect();
    rules.push(Rule::new(vec![stmt(Stmt::AnonVmap { key: Selector::Numgen(endpoints.len() as u32), entries })]));
    Chain::regular(name, rules)
}

/// An endpoint's chain, and its affinity set when the port has affinity.
fn endpoint_objects(view: &PortView, ep: &EndpointTarget, sink: &mut impl Sink) {
    let f = view.family;
    let names = EndpointNames::new(view, ep);
    let mut rules = view.count_accepted();
    if let Some(timeout) = view.port.affinity_timeout {
        let ip_type = match f {
            IpFamily::V4 => Datatype::Ipv4Addr,
            IpFamily::V6 => Datatype::Ipv6Addr,
        };
        let mut decl = SetDecl::set(&names.affinity, KeySpec::Type(vec![ip_type])).with_size(AFFINITY_CAPACITY);
        decl.timeout = Some(timeout);
        sink.set(decl);
        rules.push(Rule::new(vec![stmt(Stmt::Update { set: names.affinity.clone(), key: Selector::Saddr(f) })]));
    }
    let dnat = Stmt::Dnat { family: f, target: DnatTarget::Addr { addr: ep.addr, port: ep.port } };
    rules.push(Rule::new(vec![is(Selector::L4Proto, view.proto()), stmt(dnat)]));
    sink.chain(Chain::regular(names.chain, rules));
}

/// The names of an endpoint's objects.
struct EndpointNames {
    chain: String,
    affinity: String,
}

impl EndpointNames {
    fn new(view: &PortView, ep: &EndpointTarget) -> EndpointNames {
        let base = endpoint_base(&view.port.name, &ep.addr, ep.port);
        EndpointNames { chain: format!("endpoint-{base}"), affinity: format!("affinity-{base}") }
    }
}
