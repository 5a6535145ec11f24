//! The objects the model is built from, as plain records of the Kubernetes fields verdict uses.
//!
//! Values are kept as the API server spells them (strings, optional integers), so that all
//! validation happens in one place, [`crate::build_model`], where a bad value becomes a
//! [`crate::Problem`] instead of an error somewhere in the controller.

use std::collections::BTreeMap;

/// A core/v1 Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Service {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.type` (`ClusterIP` when empty).
    pub service_type: String,
    /// `spec.clusterIPs`, or `spec.clusterIP` when the list is empty.
    pub cluster_ips: Vec<String>,
    /// `spec.ports`.
    pub ports: Vec<ServicePortSpec>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<String>,
    /// `status.loadBalancer.ingress`.
    pub load_balancer_ingress: Vec<LoadBalancerIngress>,
    /// `spec.loadBalancerSourceRanges`.
    pub load_balancer_source_ranges: Vec<String>,
    /// `spec.externalTrafficPolicy` (`Cluster` when empty).
    pub external_traffic_policy: String,
    /// `spec.internalTrafficPolicy` (`Cluster` when empty).
    pub internal_traffic_policy: String,
    /// `spec.sessionAffinity` (`None` when empty).
    pub session_affinity: String,
    /// `spec.sessionAffinityConfig.clientIP.timeoutSeconds`.
    pub session_affinity_timeout_seconds: Option<i32>,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: Option<i32>,
}

/// One entry of `spec.ports`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServicePortSpec {
    /// `name` ("" for a single unnamed port).
    pub name: String,
    /// `protocol` (`TCP` when empty).
    pub protocol: String,
    /// `port`.
    pub port: i32,
    /// `nodePort`, when allocated.
    pub node_port: Option<i32>,
}

/// One entry of `status.loadBalancer.ingress`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadBalancerIngress {
    /// `ip` ("" for hostname-only ingress).
    pub ip: String,
    /// `ipMode` (`VIP` when absent; `Proxy` means the load balancer proxies and kube-proxy must
    /// not capture the address).
    pub ip_mode: Option<String>,
}

/// A discovery.k8s.io/v1 EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointSlice {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The `kubernetes.io/service-name` label: the Service this slice belongs to.
    pub service_name: String,
    /// `addressType` (`IPv4`, `IPv6` or `FQDN`).
    pub address_type: String,
    /// `ports`.
    pub ports: Vec<EndpointPort>,
    /// `endpoints`.
    pub endpoints: Vec<Endpoint>,
    /// The `endpoints.kubernetes.io/last-change-trigger-time` annotation: when the change
    /// this slice carries happened (for the network-programming latency metric).
    pub trigger_time: Option<std::time::SystemTime>,
}

/// One entry of an EndpointSlice's `ports`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointPort {
    /// `name` ("" when unnamed).
    pub name: String,
    /// `protocol` (`TCP` when empty).
    pub protocol: String,
    /// `port`.
    pub port: Option<i32>,
}

/// One entry of an EndpointSlice's `endpoints`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// `addresses` (kube-proxy uses the first).
    pub addresses: Vec<String>,
    /// `conditions.ready` (absent means ready).
    pub ready: Option<bool>,
    /// `conditions.serving` (absent means: same as ready).
    pub serving: Option<bool>,
    /// `conditions.terminating` (absent means not terminating).
    pub terminating: Option<bool>,
    /// `nodeName`.
    pub node_name: Option<String>,
    /// `zone`.
    pub zone: Option<String>,
    /// `hints.forZones[*].name`; `None` when the endpoint carries no zone hints.
    pub zone_hints: Option<Vec<String>>,
    /// `hints.forNodes[*].name`; `None` when the endpoint carries no node hints.
    pub node_hints: Option<Vec<String>>,
}

/// A core/v1 Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `status.addresses` as (type, address) pairs.
    pub addresses: Vec<(String, String)>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<String>,
    /// `metadata.deletionTimestamp` is set: the Node is going away.
    pub deleting: bool,
    /// The keys of `spec.taints`.
    pub taints: Vec<String>,
}

/// A networking.k8s.io/v1 ServiceCIDR.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceCidr {
    /// `metadata.name`.
    pub name: String,
    /// `spec.cidrs`.
    pub cidrs: Vec<String>,
}
