//! The Service ports kube-proxy's proxiers are handed by its change trackers, from Services and
//! EndpointSlices: one per (Service, port) with a ClusterIP of the family, with the ready
//! endpoints of the slices of that family.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use verdict_model::source::{EndpointSlice, Service};

/// An IP family: kube-proxy runs one proxier per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The EndpointSlice `addressType`.
    pub fn address_type(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// Whether `ip` is of this family.
    pub fn has(self, ip: &IpAddr) -> bool {
        ip.is_ipv4() == (self == Family::V4)
    }

    /// A single address's prefix length.
    pub fn host_bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

/// One endpoint of a Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ep {
    /// Its address.
    pub ip: IpAddr,
    /// Its port.
    pub port: u16,
    /// The node it runs on, if the slice says.
    pub node: Option<String>,
}

impl fmt::Display for Ep {
    /// `ip:port`, `[ip]:port` for IPv6 (upstream's endpoint string, which its chain names hash).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

/// One Service port as a proxier sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvcPort {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The port's name.
    pub port_name: String,
    /// The ClusterIP.
    pub vip: IpAddr,
    /// `tcp` or `udp`.
    pub proto: String,
    /// The Service port.
    pub port: u16,
    /// The NodePort, if any.
    pub node_port: Option<u16>,
    /// Ready endpoints.
    pub endpoints: Vec<Ep>,
}

impl SvcPort {
    /// Upstream's ServicePortName string, `namespace/name:port`.
    pub fn name(&self) -> String {
        format!("{}/{}:{}", self.namespace, self.service, self.port_name)
    }

    /// The family of its ClusterIP.
    pub fn family(&self) -> Family {
        if self.vip.is_ipv4() { Family::V4 } else { Family::V6 }
    }
}

/// The Service ports of `family` of these objects: Services without a ClusterIP of the family
/// (headless, ExternalName, single-stack of the other family) have none; only ready endpoints
/// count, each once.
pub fn ports(services: &[Service], slices: &[EndpointSlice], family: Family) -> Vec<SvcPort> {
    let mut by_service: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
    for s in slices.iter().filter(|s| s.address_type == family.address_type()) {
        by_service.entry((&s.namespace, &s.service_name)).or_default().push(s);
    }
    let mut out = Vec::new();
    for svc in services {
        let vip = svc.cluster_ips.iter().filter_map(|ip| ip.parse::<IpAddr>().ok()).find(|ip| family.has(ip));
        let Some(vip) = vip else { continue };
        for p in &svc.ports {
            let mut endpoints: Vec<Ep> = Vec::new();
            for slice in by_service.get(&(svc.namespace.as_str(), svc.name.as_str())).into_iter().flatten() {
                let Some(port) = slice.ports.iter().find(|sp| sp.name == p.name).and_then(|sp| sp.port) else {
                    continue;
                };
                for ep in slice.endpoints.iter().filter(|e| e.ready != Some(false)) {
                    let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else { continue };
                    let ep = Ep { ip, port: port as u16, node: ep.node_name.clone() };
                    if !endpoints.iter().any(|e| e.ip == ep.ip && e.port == ep.port) {
                        endpoints.push(ep);
                    }
                }
            }
            out.push(SvcPort {
                namespace: svc.namespace.clone(),
                service: svc.name.clone(),
                port_name: p.name.clone(),
                vip,
                proto: p.protocol.to_lowercase(),
                port: p.port as u16,
                node_port: p.node_port.map(|n| n as u16),
                endpoints,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{service, slice};

    #[test]
    fn ports_of_each_family_with_ready_endpoints_once() {
        let svcs = [
            service("ns", "dual", &["172.30.0.1", "fd00:96::1"], "TCP", 80, Some(30080)),
            service("ns", "v6only", &["fd00:96::2"], "UDP", 53, None),
            service("ns", "headless", &["None"], "TCP", 80, None),
        ];
        let mut v4 = slice("ns", "dual", "IPv4", "TCP", 8080, &["10.0.0.1", "10.0.0.2", "10.0.0.1"], "n1");
        v4.endpoints[1].ready = Some(false);
        let slices = [v4, slice("ns", "dual", "IPv6", "TCP", 8080, &["fd00::1"], "n2")];
        let p4 = ports(&svcs, &slices, Family::V4);
        assert_eq!(p4.len(), 1, "{p4:?}");
        assert_eq!(p4[0].name(), "ns/dual:p");
        assert_eq!((p4[0].proto.as_str(), p4[0].port, p4[0].node_port), ("tcp", 80, Some(30080)));
        let eps: Vec<String> = p4[0].endpoints.iter().map(Ep::to_string).collect();
        assert_eq!(eps, ["10.0.0.1:8080"], "the unready one left out, the repeated one once");
        let p6 = ports(&svcs, &slices, Family::V6);
        let names: Vec<String> = p6.iter().map(SvcPort::name).collect();
        assert_eq!(names, ["ns/dual:p", "ns/v6only:p"]);
        assert_eq!(p6[0].endpoints[0].to_string(), "[fd00::1]:8080");
        assert_eq!(p6[0].endpoints[0].node.as_deref(), Some("n2"));
        assert!(p6[1].endpoints.is_empty());
    }
}
