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

/// The reconciler's view of a UDP Service port.
pub fn udp_target(port: &ServicePort) -> UdpTarget {
    let mut addresses: Vec<IpAddr> = port.cluster_ips.to_vec();
    addresses.extend(port.external_ips());
    addresses.extend(port.load_balancer_ips());
    let mut serving: Vec<IpAddr> = port.endpoints.iter().filter(|e| e.serving).map(|e| e.target.addr).collect();
    serving.sort();
    serving.dedup();
    UdpTarget { addresses, port: port.port, node_port: port.node_port, serving_endpoints: serving }
}

/// The reconciler's view of a UDP Service port that no longer exists: no endpoint serves it,
/// so every flow still DNATed to one of its old endpoints is stale (kubernetes #141371).
fn deleted_udp_target(port: &ServicePort) -> UdpTarget {
    UdpTarget { serving_endpoints: Vec::new(), ..udp_target(port) }
}

/// The UDP ports whose entries need checking: after a full sync all of them (endpoints may
/// have gone while nobody watched), otherwise those whose endpoints changed; in both cases
/// the UDP ports this sync deleted, with no serving endpoint.
pub fn targets(model: &ProxyModel, full: bool, changes: &[PortChange]) -> Vec<UdpTarget> {
    let udp = |p: &&ServicePort| p.protocol() == Protocol::Udp;
    let deleted = changes.iter().filter(|c| c.new.is_none()).filter_map(|c| c.old.as_deref().filter(udp));
    let mut targets: Vec<UdpTarget> = deleted.map(deleted_udp_target).collect();
    if full {
        targets.extend(model.services.values().map(|p| &**p).filter(udp).map(udp_target));
        return targets;
    }
    targets.extend(changes.iter().filter_map(|c| {
        let new = c.new.as_deref().filter(udp)?;
        let changed = c.old.as_ref().is_none_or(|old| old.endpoints != new.endpoints);
        changed.then(|| udp_target(new))
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
