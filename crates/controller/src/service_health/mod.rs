//! The healthCheckNodePort server, with upstream kube-proxy's semantics.
//!
//! For each Service with `externalTrafficPolicy: Local` and a `spec.healthCheckNodePort`, an
//! HTTP listener on that port (on each node address that accepts NodePort traffic, or on every
//! address) tells load balancers whether this node should receive the Service's traffic. Every
//! request, whatever its path, gets 200 when the Service has local ready endpoints and the proxy
//! is healthy, and 503 otherwise, with a JSON body and `X-Load-Balancing-Endpoint-Weight`.
//!
//! ```text
//!  ProxyModel ──health_targets()──> [HealthTarget] ──ServiceHealthServer::sync()──> listeners
//! ```
//!
//! [`health_targets`] is pure. [`ServiceHealthServer::sync`] opens the listeners of new
//! Services, closes those of Services that went away or changed port, and updates the counts the
//! open listeners answer with. A port that cannot be bound is logged and tried again on the
//! next sync; with [`ServiceHealthServer::with_notices`] it is also announced, once per distinct
//! failure, for an Event like upstream's `FailedToStartServiceHealthcheck`.

mod http;
mod server;
mod targets;

pub use http::{HealthCheckReply, reply};
pub use server::{FAILED_TO_START, ServiceHealthServer};
pub use targets::{HealthTarget, health_targets};

#[cfg(test)]
mod tests;

impl crate::sync::AfterSync for ServiceHealthServer {
    fn after_sync(&mut self, model: &verdict_model::ProxyModel, _full: bool, _changes: &[verdict_model::PortChange]) {
        self.sync(&health_targets(model), &model.nodeport_listen_addresses());
    }
}
