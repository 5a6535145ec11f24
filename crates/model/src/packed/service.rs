//! Source Services as the [`crate::ModelCache`] keeps them: each record encoded into one
//! allocation of bytes, decoded again only while its Service is rebuilt.
//!
//! The cache must keep every Service (a change to one of its slices rebuilds it from the
//! record), and as a `source::Service` a ClusterIP Service with one port held a dozen small
//! strings and vectors: about a kilobyte per Service with the map's share. Encoded, the same
//! record is the length of its text plus a byte or two per field, about a tenth of that.
//! Equality of the bytes is equality of the records, so an unchanged object listed again is
//! still recognised without decoding.

use super::{Reader, Writer};
use crate::source::{LoadBalancerIngress, Service, ServicePortSpec};
use std::collections::BTreeMap;

/// A source Service, encoded (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PackedService(Box<[u8]>);

impl PackedService {
    /// The encoded form of `svc`.
    pub fn new(svc: &Service) -> PackedService {
        let mut w = Writer::with_capacity(128);
        w.str(&svc.namespace);
        w.str(&svc.name);
        w.len(svc.labels.len());
        for (k, v) in &svc.labels {
            w.str(k);
            w.str(v);
        }
        w.str(&svc.service_type);
        w.strs(&svc.cluster_ips);
        w.len(svc.ports.len());
        for p in &svc.ports {
            w.str(&p.name);
            w.str(&p.protocol);
            w.int(Some(p.port));
            w.int(p.node_port);
        }
        w.strs(&svc.external_ips);
        w.len(svc.load_balancer_ingress.len());
        for i in &svc.load_balancer_ingress {
            w.str(&i.ip);
            w.opt_str(i.ip_mode.as_deref());
        }
        w.strs(&svc.load_balancer_source_ranges);
        w.str(&svc.external_traffic_policy);
        w.str(&svc.internal_traffic_policy);
        w.str(&svc.session_affinity);
        w.int(svc.session_affinity_timeout_seconds);
        w.int(svc.health_check_node_port);
        PackedService(w.finish())
    }

    /// The record again.
    pub fn record(&self) -> Service {
        let mut r = Reader::new(&self.0);
        let namespace = r.string();
        let name = r.string();
        let labels: BTreeMap<String, String> = (0..r.len()).map(|_| (r.string(), r.string())).collect();
        let service_type = r.string();
        let cluster_ips = r.strings();
        let ports = (0..r.len())
            .map(|_| ServicePortSpec {
                name: r.string(),
                protocol: r.string(),
                port: r.int().unwrap_or_default(),
                node_port: r.int(),
            })
            .collect();
        let external_ips = r.strings();
        let load_balancer_ingress =
            (0..r.len()).map(|_| LoadBalancerIngress { ip: r.string(), ip_mode: r.opt_string() }).collect();
        Service {
            namespace,
            name,
            labels,
            service_type,
            cluster_ips,
            ports,
            external_ips,
            load_balancer_ingress,
            load_balancer_source_ranges: r.strings(),
            external_traffic_policy: r.string(),
            internal_traffic_policy: r.string(),
            session_affinity: r.string(),
            session_affinity_timeout_seconds: r.int(),
            health_check_node_port: r.int(),
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn size(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::{btree_map, vec};
    use proptest::option::of;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z0-9.:/-]{0,20}", ".{0,8}", "x{120,300}"]
    }

    fn service() -> impl Strategy<Value = Service> {
        let port = (text(), text(), any::<i32>(), of(any::<i32>()))
            .prop_map(|(name, protocol, port, node_port)| ServicePortSpec { name, protocol, port, node_port });
        let ingress = (text(), of(text())).prop_map(|(ip, ip_mode)| LoadBalancerIngress { ip, ip_mode });
        (
            (text(), text(), btree_map(text(), text(), 0..3), text(), vec(text(), 0..3)),
            (vec(port, 0..4), vec(text(), 0..3), vec(ingress, 0..3), vec(text(), 0..3)),
            (text(), text(), text(), of(any::<i32>()), of(any::<i32>())),
        )
            .prop_map(|(a, b, c)| Service {
                namespace: a.0,
                name: a.1,
                labels: a.2,
                service_type: a.3,
                cluster_ips: a.4,
                ports: b.0,
                external_ips: b.1,
                load_balancer_ingress: b.2,
                load_balancer_source_ranges: b.3,
                external_traffic_policy: c.0,
                internal_traffic_policy: c.1,
                session_affinity: c.2,
                session_affinity_timeout_seconds: c.3,
                health_check_node_port: c.4,
            })
    }

    proptest! {
        #[test]
        fn a_record_comes_back_as_it_went_in(svc in service(), other in service()) {
            let packed = PackedService::new(&svc);
            prop_assert_eq!(packed.record(), svc.clone());
            prop_assert_eq!(packed == PackedService::new(&other), svc == other);
        }
    }

    #[test]
    fn a_plain_service_takes_a_tenth_of_its_record() {
        let svc = Service {
            namespace: "bench".into(),
            name: "svc-12345".into(),
            service_type: "ClusterIP".into(),
            cluster_ips: vec!["172.30.48.57".into()],
            ports: vec![ServicePortSpec { name: "http".into(), protocol: "TCP".into(), port: 80, node_port: None }],
            external_traffic_policy: "Cluster".into(),
            internal_traffic_policy: "Cluster".into(),
            session_affinity: "None".into(),
            ..Service::default()
        };
        assert!(PackedService::new(&svc).size() < 90, "{} bytes", PackedService::new(&svc).size());
    }
}
