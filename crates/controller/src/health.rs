//! Proxy health with upstream kube-proxy's semantics.
//!
//! The proxy is unhealthy when a change was queued and has not been programmed within the
//! health timeout (2 x sync period). `/healthz` also reports the node ineligible (503) while
//! the Node is being deleted or carries the cluster autoscaler's `ToBeDeletedByClusterAutoscaler`
//! taint; `/livez` ignores the node. As upstream's, a healthy answer's `lastUpdated` is the
//! current time (kube-proxy once synced on a timer, and clients read a recent `lastUpdated` as
//! healthy); an unhealthy one's is the last time everything queued was programmed.
//!
//! A deleted Node is remembered ([`ProxyHealth::node_deleted`]): the agent exits on it, as
//! kube-proxy 1.36's node manager does (and 1.34's health server reported the node ineligible
//! until then).

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The autoscaler's taint on nodes it is about to remove.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

#[derive(Debug)]
struct State {
    last_updated: SystemTime,
    /// When the oldest change that is not programmed yet was queued.
    queued_at: Option<Instant>,
    node_eligible: bool,
    node_deleted: bool,
    families: Vec<String>,
}

/// Shared between the sync loop (writer) and the health endpoints (readers).
#[derive(Debug)]
pub struct ProxyHealth {
    timeout: Duration,
    state: Mutex<State>,
}

/// One answer of the health endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// HTTP status: 200 or 503.
    pub code: u16,
    /// JSON body, as upstream's.
    pub body: String,
}

fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let ts = k8s_openapi::jiff::Timestamp::new(d.as_secs() as i64, d.subsec_nanos() as i32).unwrap_or_default();
    ts.to_string()
}

impl ProxyHealth {
    /// Health with the given timeout (use 2 x the sync period).
    pub fn new(timeout: Duration) -> ProxyHealth {
        ProxyHealth {
            timeout,
            state: Mutex::new(State {
                last_updated: SystemTime::now(),
                queued_at: None,
                node_eligible: true,
                node_deleted: false,
                families: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A change was queued (the oldest unprogrammed one counts).
    pub fn queued(&self) {
        let mut s = self.lock();
        if s.queued_at.is_none() {
            s.queued_at = Some(Instant::now());
        }
    }

    /// Everything queued so far is programmed.
    pub fn updated(&self) {
        let mut s = self.lock();
        s.queued_at = None;
        s.last_updated = SystemTime::now();
    }

    /// Whether the node may receive traffic.
    pub fn set_node_eligible(&self, eligible: bool) {
        self.lock().node_eligible = eligible;
    }

    /// The Node was deleted: it is not eligible, and the agent stops (see
    /// [`ProxyHealth::is_node_deleted`]).
    pub fn node_deleted(&self) {
        let mut s = self.lock();
        s.node_eligible = false;
        s.node_deleted = true;
    }

    /// Whether the Node was deleted.
    pub fn is_node_deleted(&self) -> bool {
        self.lock().node_deleted
    }

    /// The families reported per family in the body.
    pub fn set_families(&self, families: Vec<String>) {
        self.lock().families = families;
    }

    /// Whether programming keeps up.
    pub fn healthy(&self) -> bool {
        self.lock().queued_at.is_none_or(|q| q.elapsed() <= self.timeout)
    }

    fn report(&self, with_node: bool) -> HealthReport {
        let s = self.lock();
        let healthy = s.queued_at.is_none_or(|q| q.elapsed() <= self.timeout);
        let ok = healthy && (!with_node || s.node_eligible);
        let now = SystemTime::now();
        let last = rfc3339(if ok { now } else { s.last_updated });
        let status: Vec<String> = s
            .families
            .iter()
            .map(|f| format!("\"{f}\":{{\"lastUpdated\":\"{last}\",\"healthy\":{healthy}}}"))
            .collect();
        let node = if with_node { format!(",\"nodeEligible\":{}", s.node_eligible) } else { String::new() };
        let body = format!(
            "{{\"lastUpdated\":\"{last}\",\"currentTime\":\"{}\"{node},\"healthy\":{healthy},\"status\":{{{}}}}}",
            rfc3339(now),
            status.join(",")
        );
        HealthReport { code: if ok { 200 } else { 503 }, body }
    }

    /// The `/healthz` answer.
    pub fn healthz(&self) -> HealthReport {
        self.report(true)
    }

    /// The `/livez` answer.
    pub fn livez(&self) -> HealthReport {
        self.report(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_queued_longer_than_the_timeout_is_unhealthy() {
        let h = ProxyHealth::new(Duration::from_millis(30));
        h.set_families(vec!["IPv4".into()]);
        assert_eq!(h.healthz().code, 200);
        h.queued();
        assert_eq!(h.healthz().code, 200, "within the timeout");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.healthz().code, 503);
        assert_eq!(h.livez().code, 503);
        h.updated();
        assert_eq!(h.healthz().code, 200);
        assert!(h.healthz().body.contains("\"status\":{\"IPv4\":{\"lastUpdated\""), "{}", h.healthz().body);
    }

    fn field<'a>(body: &'a str, name: &str) -> &'a str {
        let start = body.find(&format!("\"{name}\":\"")).unwrap_or_else(|| panic!("{name} in {body}")) + name.len() + 4;
        &body[start..start + body[start..].find('"').unwrap()]
    }

    #[test]
    fn last_updated_is_the_current_time_when_healthy_and_the_last_sync_when_not() {
        let h = ProxyHealth::new(Duration::from_millis(30));
        h.updated();
        std::thread::sleep(Duration::from_millis(1100));
        let body = h.healthz().body;
        assert_eq!(field(&body, "lastUpdated"), field(&body, "currentTime"), "{body}");
        h.queued();
        std::thread::sleep(Duration::from_millis(50));
        let body = h.healthz().body;
        assert_ne!(field(&body, "lastUpdated"), field(&body, "currentTime"), "{body}");
    }

    #[test]
    fn a_deleted_node_is_ineligible_and_remembered() {
        let h = ProxyHealth::new(Duration::from_secs(60));
        assert!(!h.is_node_deleted());
        h.node_deleted();
        assert!(h.is_node_deleted());
        assert_eq!(h.healthz().code, 503);
        assert_eq!(h.livez().code, 200);
    }

    #[test]
    fn an_ineligible_node_fails_healthz_but_not_livez() {
        let h = ProxyHealth::new(Duration::from_secs(60));
        h.set_node_eligible(false);
        assert_eq!(h.healthz().code, 503);
        assert!(h.healthz().body.contains("\"nodeEligible\":false"));
        assert_eq!(h.livez().code, 200);
        assert!(!h.livez().body.contains("nodeEligible"));
    }
}
