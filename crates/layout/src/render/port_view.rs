//! One Service port seen from one address family ([`PortView`]): the keys, addresses and
//! elements both layouts of a port write (the shared one in [`super::service`], its own
//! chains in [`super::own`]).

use super::Sink;
use super::counters::{self, Outcome};
use super::matches::nodeport_destinations;
use super::names::{
    NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, REJECT_CHAIN, SERVICE_IPS, SERVICE_NODEPORTS, family_name,
};
use std::net::IpAddr;
use std::sync::Arc;
use verdict_model::{EndpointTarget, IpFamily, ProxyModel, ServicePort, Targets};
use verdict_nft::rule::{Rule, Value, encode_concat};
use verdict_nft::ruleset::{Elem, Verdict};

/// One Service port seen from one address family.
pub(crate) struct PortView<'a> {
    pub model: &'a ProxyModel,
    pub port: &'a ServicePort,
    pub family: IpFamily,
    pub cluster_ip: IpAddr,
    /// The endpoints its traffic may reach.
    pub selection: Targets,
    /// `namespace/name:port` (cut to 128 bytes), the comment of every element the port adds.
    pub comment: Arc<str>,
}

impl<'a> PortView<'a> {
    /// `port` as family `f` sees it; `None` without a ClusterIP of that family.
    pub fn of(model: &'a ProxyModel, port: &'a ServicePort, f: IpFamily) -> Option<PortView<'a>> {
        Some(PortView {
            model,
            port,
            family: f,
            cluster_ip: port.cluster_ip(f)?,
            selection: port.targets(f),
            comment: Arc::from(super::names::port_comment(&port.name)),
        })
    }

    pub fn proto(&self) -> Value {
        Value::Proto(self.port.protocol().number())
    }

    /// `addr . proto . port`: the key of a Service address in the address maps.
    pub fn address_key(&self, addr: IpAddr) -> Vec<Value> {
        vec![Value::Addr(addr), self.proto(), Value::Port(self.port.port)]
    }

    /// `proto . nodePort`: the key in the NodePort maps.
    pub fn node_port_key(&self) -> Option<Vec<Value>> {
        self.port.node_port.map(|np| vec![self.proto(), Value::Port(np)])
    }

    /// External IPs and load balancer IPs of this family.
    pub fn external_addresses(&self) -> Vec<IpAddr> {
        self.port.outside_addresses(self.family)
    }

    /// Whether traffic from outside reaches this port in this family (NodePort, external or
    /// load balancer address).
    pub fn is_external(&self) -> bool {
        self.port.node_port.is_some() || !self.external_addresses().is_empty()
    }

    /// What traffic to an address of the port meets when the chosen policy has no endpoint:
    /// `reject` when no endpoint serves anywhere, `drop` when only the Local policy's set is
    /// empty (upstream's semantics), nothing when there are endpoints.
    pub fn no_endpoint_verdict(&self, endpoints: &[EndpointTarget]) -> Option<Verdict> {
        if !self.selection.has_any {
            Some(Verdict::Goto(Arc::from(REJECT_CHAIN)))
        } else if endpoints.is_empty() {
            Some(Verdict::Drop)
        } else {
            None
        }
    }

    /// Whether this port's connections are counted (`--service-counters`).
    pub fn counted(&self) -> bool {
        self.port.counted && self.model.config.service_counters.enabled()
    }

    /// The lookups that count a DNATed connection, for chains only this port's traffic
    /// reaches (the NodePort lookup is guarded: such chains see Service address traffic too).
    pub fn count_accepted(&self) -> Vec<Rule> {
        if !self.counted() {
            return Vec::new();
        }
        let mut rules = vec![counters::count_address(Outcome::Accepted, self.family)];
        if self.port.node_port.is_some() {
            for guard in nodeport_destinations(self.model, self.family) {
                rules.push(counters::count_node_port(Outcome::Accepted, self.family, guard));
            }
        }
        rules
    }

    pub fn element(&self, verdict: Verdict) -> Elem {
        Elem::verdict(verdict, Some(self.comment.clone()))
    }

    /// Dispatches Service address `addr` to `verdict` (in `service-ips`).
    pub fn dispatch_address(&self, sink: &mut impl Sink, addr: IpAddr, verdict: Verdict) {
        sink.element(
            &family_name(SERVICE_IPS, self.family),
            encode_concat(&self.address_key(addr)),
            self.element(verdict),
        );
    }

    /// Dispatches the NodePort (if any) to `verdict` (in `service-nodeports`).
    pub fn dispatch_node_port(&self, sink: &mut impl Sink, verdict: Verdict) {
        if let Some(key) = self.node_port_key() {
            sink.element(&family_name(SERVICE_NODEPORTS, self.family), encode_concat(&key), self.element(verdict));
        }
    }

    /// Lets the filter chains drop or reject traffic to `addr` that was not DNATed.
    pub fn block_address(&self, sink: &mut impl Sink, addr: IpAddr, verdict: Verdict) {
        let set = family_name(NO_ENDPOINT_SERVICES, self.family);
        sink.element(&set, encode_concat(&self.address_key(addr)), self.element(verdict));
    }

    /// Lets the filter chains drop or reject NodePort traffic that was not DNATed.
    pub fn block_node_port(&self, sink: &mut impl Sink, verdict: Verdict) {
        if let Some(key) = self.node_port_key() {
            sink.element(&family_name(NO_ENDPOINT_NODEPORTS, self.family), encode_concat(&key), self.element(verdict));
        }
    }
}
