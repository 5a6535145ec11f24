//! Services and EndpointSlices for scenarios, written the way a manifest reads.

use super::Lab;
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, LoadBalancerIngress, Service, ServicePortSpec};

/// The namespace of every scenario object.
pub const NAMESPACE: &str = "ns1";

/// A Service under construction.
#[derive(Clone, Debug)]
pub struct Svc(pub Service);

impl Svc {
    /// A ClusterIP Service with these ClusterIPs and no ports yet.
    pub fn new(name: &str, cluster_ips: &[&str]) -> Svc {
        Svc(Service {
            namespace: NAMESPACE.into(),
            name: name.into(),
            service_type: "ClusterIP".into(),
            cluster_ips: cluster_ips.iter().map(|s| s.to_string()).collect(),
            ..Service::default()
        })
    }

    /// Adds a port.
    pub fn port(mut self, name: &str, protocol: &str, port: i32) -> Svc {
        self.0.ports.push(ServicePortSpec { name: name.into(), protocol: protocol.into(), port, node_port: None });
        self
    }

    /// Adds a port with a NodePort (and makes the Service a NodePort one if it was ClusterIP).
    pub fn node_port(mut self, name: &str, protocol: &str, port: i32, node_port: i32) -> Svc {
        self.0.ports.push(ServicePortSpec {
            name: name.into(),
            protocol: protocol.into(),
            port,
            node_port: Some(node_port),
        });
        if self.0.service_type == "ClusterIP" {
            self.0.service_type = "NodePort".into();
        }
        self
    }

    /// Makes it a LoadBalancer with these ingress IPs.
    pub fn load_balancer(mut self, ips: &[&str]) -> Svc {
        self.0.service_type = "LoadBalancer".into();
        self.0
            .load_balancer_ingress
            .extend(ips.iter().map(|ip| LoadBalancerIngress { ip: ip.to_string(), ip_mode: None }));
        self
    }

    /// Adds a load balancer ingress IP with `ipMode: Proxy`.
    pub fn proxied_ingress(mut self, ip: &str) -> Svc {
        self.0.service_type = "LoadBalancer".into();
        self.0.load_balancer_ingress.push(LoadBalancerIngress { ip: ip.into(), ip_mode: Some("Proxy".into()) });
        self
    }

    /// `spec.externalIPs`.
    pub fn external_ips(mut self, ips: &[&str]) -> Svc {
        self.0.external_ips = ips.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `spec.loadBalancerSourceRanges`.
    pub fn source_ranges(mut self, ranges: &[&str]) -> Svc {
        self.0.load_balancer_source_ranges = ranges.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `externalTrafficPolicy: Local`, with a health check NodePort.
    pub fn external_local(mut self, health_check_node_port: i32) -> Svc {
        self.0.external_traffic_policy = "Local".into();
        self.0.health_check_node_port = Some(health_check_node_port);
        self
    }

    /// `internalTrafficPolicy: Local`.
    pub fn internal_local(mut self) -> Svc {
        self.0.internal_traffic_policy = "Local".into();
        self
    }

    /// `sessionAffinity: ClientIP` with this timeout.
    pub fn affinity(mut self, timeout_seconds: i32) -> Svc {
        self.0.session_affinity = "ClientIP".into();
        self.0.session_affinity_timeout_seconds = Some(timeout_seconds);
        self
    }
}

/// An endpoint's conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// Ready (and serving, not terminating).
    Ready,
    /// Terminating but still serving.
    ServingTerminating,
    /// Terminating and no longer serving.
    TerminatingNotServing,
    /// Neither ready nor serving (starting up).
    NotReady,
}

/// An EndpointSlice under construction.
#[derive(Clone, Debug)]
pub struct Eps(pub EndpointSlice);

impl Eps {
    fn new(service: &str, address_type: &str) -> Eps {
        Eps(EndpointSlice {
            namespace: NAMESPACE.into(),
            name: format!("{service}-{}", address_type.to_lowercase()),
            service_name: service.into(),
            address_type: address_type.into(),
            ..EndpointSlice::default()
        })
    }

    /// An IPv4 slice of `service`.
    pub fn v4(service: &str) -> Eps {
        Eps::new(service, "IPv4")
    }

    /// An IPv6 slice of `service`.
    pub fn v6(service: &str) -> Eps {
        Eps::new(service, "IPv6")
    }

    /// Adds a port (matched to the Service port of the same name).
    pub fn port(mut self, name: &str, protocol: &str, port: u16) -> Eps {
        self.0.ports.push(EndpointPort { name: name.into(), protocol: protocol.into(), port: Some(i32::from(port)) });
        self
    }

    /// Adds the pod `pod` of the lab, on its node, in this condition.
    pub fn pod(self, lab: &Lab, pod: &str, cond: Cond) -> Eps {
        let v6 = self.0.address_type == "IPv6";
        let ip = lab.cluster.pod(pod).ip(v6).to_string();
        let node = lab.cluster.node_of(pod).name.clone();
        self.address(&ip, &node, cond)
    }

    /// Hints the last endpoint added for these zones.
    pub fn for_zones(mut self, zones: &[&str]) -> Eps {
        if let Some(ep) = self.0.endpoints.last_mut() {
            ep.zone_hints = Some(zones.iter().map(|z| z.to_string()).collect());
        }
        self
    }

    /// Adds an endpoint by address (one no pod answers on: it must never be chosen).
    pub fn address(mut self, ip: &str, node: &str, cond: Cond) -> Eps {
        let (ready, serving, terminating) = match cond {
            Cond::Ready => (true, true, false),
            Cond::ServingTerminating => (false, true, true),
            Cond::TerminatingNotServing => (false, false, true),
            Cond::NotReady => (false, false, false),
        };
        self.0.endpoints.push(Endpoint {
            addresses: vec![ip.into()],
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
            node_name: Some(node.into()),
            ..Endpoint::default()
        });
        self
    }
}
