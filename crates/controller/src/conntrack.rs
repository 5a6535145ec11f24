//! Stale UDP conntrack entries, deleted after syncs that changed a UDP Service's endpoints.
//!
//! A UDP "connection" lives in conntrack as long as packets keep flowing, so a client that
//! kept sending to a Service address keeps reaching an endpoint that is gone (or keeps being
//! dropped, if it started while the Service had none). After each sync that changed a UDP
//! port's endpoints, the entries to that port whose reply does not come from one of its
//! serving endpoints are deleted (upstream's conntrack reconciler); everything else is left
//! alone, and nothing is flushed on restart.

use crate::metrics as m;
use crate::sync::AfterSync;
use std::net::IpAddr;
use verdict_conntrack::{Conntrack, UdpTarget, reconcile};
use verdict_model::{PortChange, Protocol, ProxyModel, ServicePort};

/// Deletes stale UDP conntrack entries after syncs (see the module docs).
pub struct ConntrackCleaner {
    conntrack: Option<Conntrack>,
}

impl ConntrackCleaner {
    /// A cleaner for the calling thread's network namespace (it opens its socket lazily, in
    /// the sync loop's thread).
    pub fn new() -> ConntrackCleaner {
        ConntrackCleaner { conntrack: None }
    }
}

impl Default for ConntrackCleaner {
    fn default() -> Self {
        ConntrackCleaner::new()
    }
}

/// The reconciler's view of a UDP Service port, built from what the table programs of it
/// only: its addresses in the families this node programs and the port has a ClusterIP of
/// (an address of any other family is nobody's to clean up, and may be another Service's).
pub fn udp_target(model: &ProxyModel, port: &ServicePort) -> UdpTarget {
    let mut addresses: Vec<IpAddr> = Vec::new();
    for family in model.families() {
        if let Some(cluster_ip) = port.cluster_ip(family) {
            addresses.push(cluster_ip);
            addresses.extend(port.outside_addresses(family));
        }
    }
    let mut serving: Vec<IpAddr> = port.endpoints.iter().filter(|e| e.serving).map(|e| e.target.addr).collect();
    serving.sort();
    serving.dedup();
    UdpTarget { addresses, port: port.port, node_port: port.node_port, serving_endpoints: serving }
}

/// The reconciler's view of a UDP Service port that no longer exists: no endpoint serves it,
/// so every flow still DNATed to one of its old endpoints is stale (kubernetes #141371).
fn deleted_udp_target(model: &ProxyModel, port: &ServicePort) -> UdpTarget {
    UdpTarget { serving_endpoints: Vec::new(), ..udp_target(model, port) }
}

/// The UDP ports whose entries need checking: after a full sync all of them (endpoints may
/// have gone while nobody watched), otherwise those whose endpoints changed; in both cases
/// the UDP ports this sync deleted, with no serving endpoint.
pub fn targets(model: &ProxyModel, full: bool, changes: &[PortChange]) -> Vec<UdpTarget> {
    let udp = |p: &&ServicePort| p.protocol() == Protocol::Udp;
    let deleted = changes.iter().filter(|c| c.new.is_none()).filter_map(|c| c.old.as_deref().filter(udp));
    let mut targets: Vec<UdpTarget> = deleted.map(|p| deleted_udp_target(model, p)).collect();
    if full {
        targets.extend(model.services.values().map(|p| &**p).filter(udp).map(|p| udp_target(model, p)));
        return targets;
    }
    targets.extend(changes.iter().filter_map(|c| {
        let new = c.new.as_deref().filter(udp)?;
        let changed = c.old.as_ref().is_none_or(|old| old.endpoints != new.endpoints);
        changed.then(|| udp_target(model, new))
    }));
    targets
}

impl AfterSync for ConntrackCleaner {
    fn after_sync(&mut self, model: &ProxyModel, full: bool, changes: &[PortChange]) {
        let targets = targets(model, full, changes);
        if targets.is_empty() {
            return;
        }
        if self.conntrack.is_none() {
            match Conntrack::open() {
                Ok(ct) => self.conntrack = Some(ct),
                Err(e) => {
                    tracing::warn!("cannot open conntrack (stale UDP flows stay until they time out): {e}");
                    return;
                }
            }
        }
        let ct = self.conntrack.as_mut().expect("opened above");
        let mut node: Vec<IpAddr> = model.node.addresses.clone();
        node.extend(&model.node.primary_ips);
        node.extend(model.nodeport_ips());
        match reconcile(ct, &targets, &node) {
            Ok(report) => {
                // Each family's part of the pass, as upstream's reconciler of that family.
                for family in model.families() {
                    let i = verdict_model::IpFamily::ALL.iter().position(|f| *f == family).unwrap_or(0);
                    let f = family.to_string();
                    let took = report.duration_by_family[i].as_secs_f64();
                    metrics::histogram!(m::CONNTRACK_DURATION, m::IP_FAMILY => f.clone()).record(took);
                    metrics::counter!(m::CONNTRACK_DELETED, m::IP_FAMILY => f)
                        .increment(report.deleted_by_family[i] as u64);
                }
                if report.deleted > 0 {
                    tracing::info!(
                        deleted = report.deleted,
                        examined = report.examined,
                        "deleted stale UDP conntrack entries"
                    );
                }
            }
            Err(e) => {
                tracing::warn!("conntrack cleanup failed: {e}");
                self.conntrack = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_model::{IpFamily, OutsideAccess, ServicePortName};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A UDP port with ClusterIPs `cluster` and externalIPs `external`.
    fn port(cluster: &[&str], external: &[&str]) -> ServicePort {
        let outside = OutsideAccess { external_ips: external.iter().map(|s| ip(s)).collect(), ..Default::default() };
        ServicePort {
            name: ServicePortName::new("ns", "dns", "dns", Protocol::Udp),
            port: 53,
            cluster_ips: cluster.iter().map(|s| ip(s)).collect(),
            node_port: Some(30053),
            outside: outside.boxed(),
            external_policy_local: false,
            internal_policy_local: false,
            affinity_timeout: None,
            health_check_node_port: None,
            endpoints: Box::default(),
            hints: None,
            v4: Default::default(),
            v6: Default::default(),
            counted: false,
        }
    }

    /// Only what the table programs of a port is its to clean up: an address of a family it
    /// has no ClusterIP of, or that the node does not program, may be another Service's.
    #[test]
    fn a_target_holds_the_programmed_addresses_only() {
        let model = ProxyModel::default();
        let single = port(&["10.96.0.10"], &["2001:db8::53", "192.0.2.53"]);
        assert_eq!(udp_target(&model, &single).addresses, [ip("10.96.0.10"), ip("192.0.2.53")]);
        let dual = port(&["10.96.0.10", "fd00:96::10"], &["2001:db8::53", "192.0.2.53"]);
        let both = [ip("10.96.0.10"), ip("192.0.2.53"), ip("fd00:96::10"), ip("2001:db8::53")];
        assert_eq!(udp_target(&model, &dual).addresses, both);
        let mut v4_node = ProxyModel::default();
        v4_node.config.families = vec![IpFamily::V4];
        assert_eq!(udp_target(&v4_node, &dual).addresses, [ip("10.96.0.10"), ip("192.0.2.53")]);
    }
}
