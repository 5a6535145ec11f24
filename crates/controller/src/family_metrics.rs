//! Recording upstream's per-family metrics ([`crate::metrics::PER_FAMILY`]) and the pending
//! change gauges, for the sync loop.
//!
//! Upstream runs one proxier per family; verdict's one transaction programs both, so what a
//! sync observes (its duration, its failure, its time) is recorded once per family the node
//! runs, with that family's `ip_family` label. Where the model can tell the families apart
//! (Services without local endpoints, conntrack entries deleted) each family gets its own
//! value, so sums over `ip_family` stay counts of real things.

use crate::metrics as m;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};
use verdict_model::{IpFamily, ProxyModel};

/// Creates every per-family series at zero, so dashboards and alerts see them before the
/// first event (as upstream's registry does).
pub fn register(families: &[IpFamily]) {
    for family in families {
        let f = family.to_string();
        for c in [m::SYNC_FAILURES, m::CLEANUP_FAILURES, m::CONNTRACK_DELETED] {
            metrics::counter!(c, m::IP_FAMILY => f.clone()).increment(0);
        }
        for g in [m::LAST_TIMESTAMP, m::LAST_QUEUED] {
            metrics::gauge!(g, m::IP_FAMILY => f.clone()).set(0.0);
        }
        for policy in ["internal", "external"] {
            metrics::gauge!(m::NO_LOCAL_ENDPOINTS, "traffic_policy" => policy, m::IP_FAMILY => f.clone()).set(0.0);
        }
        for h in [
            m::SYNC_DURATION,
            m::SYNC_FULL_DURATION,
            m::SYNC_PARTIAL_DURATION,
            m::NETWORK_PROGRAMMING,
            m::CONNTRACK_DURATION,
        ] {
            let _ = metrics::histogram!(h, m::IP_FAMILY => f.clone());
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// A sync's duration, successful or not: all syncs, and full or partial ones.
pub fn sync_took(families: &[IpFamily], full: bool, took: Duration) {
    let secs = took.as_secs_f64();
    let kind = if full { m::SYNC_FULL_DURATION } else { m::SYNC_PARTIAL_DURATION };
    for family in families {
        metrics::histogram!(m::SYNC_DURATION, m::IP_FAMILY => family.to_string()).record(secs);
        metrics::histogram!(kind, m::IP_FAMILY => family.to_string()).record(secs);
    }
}

/// A transaction the kernel refused (every family's rules were in it).
pub fn sync_failed(families: &[IpFamily]) {
    for family in families {
        metrics::counter!(m::SYNC_FAILURES, m::IP_FAMILY => family.to_string()).increment(1);
    }
}

/// A failed deletion of chains flushed earlier.
pub fn cleanup_failed(families: &[IpFamily]) {
    for family in families {
        metrics::counter!(m::CLEANUP_FAILURES, m::IP_FAMILY => family.to_string()).increment(1);
    }
}

/// A change was queued for the next sync.
fn queued(families: &[IpFamily]) {
    let now = unix_now();
    for family in families {
        metrics::gauge!(m::LAST_QUEUED, m::IP_FAMILY => family.to_string()).set(now);
    }
}

/// How often the gauges that follow every change are written while changes arrive: a cold
/// start delivers every object, one event each, and writing labelled gauges for each of 200k
/// events showed in the start time. A scrape sees them at most this stale.
const PUBLISH_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// A sync succeeded: its time, the programming latency of the EndpointSlice changes it
/// programmed, and the Services without local endpoints in each family.
pub fn synced(model: &ProxyModel, latencies: &[Duration]) {
    let now = unix_now();
    for family in model.families() {
        let f = family.to_string();
        metrics::gauge!(m::LAST_TIMESTAMP, m::IP_FAMILY => f.clone()).set(now);
        for latency in latencies {
            metrics::histogram!(m::NETWORK_PROGRAMMING, m::IP_FAMILY => f.clone()).record(latency.as_secs_f64());
        }
        let (internal, external) = no_local_endpoints(model, family);
        let policy =
            |p: &'static str| metrics::gauge!(m::NO_LOCAL_ENDPOINTS, "traffic_policy" => p, m::IP_FAMILY => f.clone());
        policy("internal").set(internal as f64);
        policy("external").set(external as f64);
    }
}

/// Service ports with a Local traffic policy whose `family` endpoints exist but none is on
/// this node: (internal policy, external policy), as upstream's proxier of that family counts.
pub fn no_local_endpoints(model: &ProxyModel, family: IpFamily) -> (usize, usize) {
    let mut internal = 0;
    let mut external = 0;
    for port in model.services.values() {
        let s = port.selection(family);
        if !(s.has_any && s.local.is_empty()) {
            continue;
        }
        internal += usize::from(port.internal_policy_local);
        external += usize::from(port.external_policy_local && port.externally_accessible());
    }
    (internal, external)
}

/// The Services and EndpointSlices changed since the last successful sync (upstream's
/// `*_changes_pending`). Upstream's Service tracker counts distinct Services; its endpoints
/// tracker counts every slice update; both are counted here as distinct objects, so an
/// object that changes ten times before a sync is one pending change. Unlike upstream, a
/// change that turns out to change nothing (a relist delivering an object as it was) counts
/// until the sync that finds so, a moment later.
#[derive(Debug, Default)]
pub struct PendingChanges {
    // Hashes of the names, not the names: a cold start delivers every object before the first
    // sync, and at 100k Services their names would cost megabytes for a gauge.
    services: HashSet<u64>,
    slices: HashSet<u64>,
    /// When the pending and last-queued gauges were last written.
    published: Option<std::time::Instant>,
    /// A change came since they were.
    unpublished: bool,
}

fn name_hash(namespace: &str, name: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut h);
    h.finish()
}

impl PendingChanges {
    /// A Service was added, changed or deleted.
    pub fn service(&mut self, namespace: &str, name: &str) {
        metrics::counter!(m::SERVICE_CHANGES_TOTAL).increment(1);
        self.services.insert(name_hash(namespace, name));
    }

    /// An EndpointSlice was added, changed or deleted.
    pub fn slice(&mut self, namespace: &str, name: &str) {
        metrics::counter!(m::ENDPOINT_CHANGES_TOTAL).increment(1);
        self.slices.insert(name_hash(namespace, name));
    }

    /// A change was queued: the pending counts and the last-queued time are written, at most
    /// every [`PUBLISH_EVERY`] (`families` is asked for only then).
    pub fn queued(&mut self, families: impl FnOnce() -> Vec<IpFamily>) {
        let now = std::time::Instant::now();
        self.unpublished = true;
        if self.published.is_none_or(|at| now.duration_since(at) >= PUBLISH_EVERY) {
            self.publish(families);
        }
    }

    /// Writes the gauges if a change came since they were last written: after each batch of
    /// events, so that the last change of a burst is seen before the sync.
    pub fn publish(&mut self, families: impl FnOnce() -> Vec<IpFamily>) {
        if !self.unpublished {
            return;
        }
        self.unpublished = false;
        self.published = Some(std::time::Instant::now());
        metrics::gauge!(m::SERVICE_CHANGES_PENDING).set(self.services.len() as f64);
        metrics::gauge!(m::ENDPOINT_CHANGES_PENDING).set(self.slices.len() as f64);
        queued(&families());
    }

    /// A sync committed every change received so far.
    pub fn synced(&mut self) {
        self.services = HashSet::new();
        self.slices = HashSet::new();
        self.published = None;
        self.unpublished = false;
        metrics::gauge!(m::SERVICE_CHANGES_PENDING).set(0.0);
        metrics::gauge!(m::ENDPOINT_CHANGES_PENDING).set(0.0);
    }

    /// (Services, EndpointSlices) pending.
    pub fn counts(&self) -> (usize, usize) {
        (self.services.len(), self.slices.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_changes_count_distinct_objects_until_a_sync() {
        let mut p = PendingChanges::default();
        p.service("ns1", "web");
        p.service("ns1", "web");
        p.service("ns2", "web");
        p.slice("ns1", "web-abc");
        p.slice("ns1", "web-abc");
        p.slice("ns1", "web-def");
        p.slice("ns1", "web-ghi");
        assert_eq!(p.counts(), (2, 3));
        p.synced();
        assert_eq!(p.counts(), (0, 0));
        p.slice("ns1", "web-abc");
        assert_eq!(p.counts(), (0, 1));
    }
}
