//! Kubernetes API objects (k8s-openapi types) to the model's source records. Purely
//! mechanical: every judgement about the values happens in `verdict_model::build_model`.
//!
//! The watchers and the manifests reader decode Services and EndpointSlices straight from
//! JSON or YAML instead (`crate::decode`, which skips what verdict does not read); these two
//! functions are what that decoding is held to (`tests/fuzz_decode.rs`), and serve callers
//! that hold k8s-openapi objects already. Nodes and ServiceCIDRs are always translated here.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use verdict_model::source;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The annotation that dates the change an EndpointSlice carries.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".to_string())
}

/// A Service.
pub fn service(svc: &core::Service) -> source::Service {
    let spec = svc.spec.clone().unwrap_or_default();
    let cluster_ips = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ips.clone(),
        (_, Some(ip)) => vec![ip.clone()],
        _ => Vec::new(),
    };
    source::Service {
        namespace: namespace_of(&svc.metadata),
        name: svc.metadata.name.clone().unwrap_or_default(),
        labels: svc.metadata.labels.clone().unwrap_or_default(),
        service_type: spec.type_.clone().unwrap_or_default(),
        cluster_ips,
        ports: spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| source::ServicePortSpec {
                name: p.name.unwrap_or_default(),
                protocol: p.protocol.unwrap_or_default(),
                port: p.port,
                node_port: p.node_port,
            })
            .collect(),
        external_ips: spec.external_ips.unwrap_or_default(),
        load_balancer_ingress: svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|i| source::LoadBalancerIngress { ip: i.ip.unwrap_or_default(), ip_mode: i.ip_mode })
            .collect(),
        load_balancer_source_ranges: spec.load_balancer_source_ranges.unwrap_or_default(),
        external_traffic_policy: spec.external_traffic_policy.unwrap_or_default(),
        internal_traffic_policy: spec.internal_traffic_policy.unwrap_or_default(),
        session_affinity: spec.session_affinity.unwrap_or_default(),
        session_affinity_timeout_seconds: spec
            .session_affinity_config
            .and_then(|c| c.client_ip)
            .and_then(|c| c.timeout_seconds),
        health_check_node_port: spec.health_check_node_port,
    }
}

/// A networking.k8s.io/v1 ServiceCIDR.
pub fn service_cidr(c: &k8s_openapi::api::networking::v1::ServiceCIDR) -> source::ServiceCidr {
    source::ServiceCidr {
        name: c.metadata.name.clone().unwrap_or_default(),
        cidrs: c.spec.as_ref().and_then(|s| s.cidrs.clone()).unwrap_or_default(),
    }
}

/// A discovery.k8s.io/v1 EndpointSlice.
pub fn endpoint_slice(slice: &discovery::EndpointSlice) -> source::EndpointSlice {
    source::EndpointSlice {
        namespace: namespace_of(&slice.metadata),
        name: slice.metadata.name.clone().unwrap_or_default(),
        service_name: slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL).cloned())
            .unwrap_or_default(),
        address_type: slice.address_type.clone(),
        ports: slice
            .ports
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|p| source::EndpointPort {
                name: p.name.unwrap_or_default(),
                protocol: p.protocol.unwrap_or_default(),
                port: p.port,
            })
            .collect(),
        endpoints: slice
            .endpoints
            .iter()
            .map(|ep| {
                let conditions = ep.conditions.clone().unwrap_or_default();
                let hints = ep.hints.clone();
                source::Endpoint {
                    addresses: ep.addresses.clone(),
                    ready: conditions.ready,
                    serving: conditions.serving,
                    terminating: conditions.terminating,
                    node_name: ep.node_name.clone(),
                    zone: ep.zone.clone(),
                    zone_hints: hints
                        .as_ref()
                        .and_then(|h| h.for_zones.as_ref())
                        .map(|z| z.iter().map(|z| z.name.clone()).collect()),
                    node_hints: hints
                        .as_ref()
                        .and_then(|h| h.for_nodes.as_ref())
                        .map(|n| n.iter().map(|n| n.name.clone()).collect()),
                }
            })
            .collect(),
        trigger_time: slice
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TRIGGER_TIME_ANNOTATION))
            .and_then(|t| trigger_time(t)),
    }
}

/// The value of the trigger-time annotation (RFC 3339), when it parses.
pub(crate) fn trigger_time(value: &str) -> Option<std::time::SystemTime> {
    let t = value.parse::<k8s_openapi::jiff::Timestamp>().ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(t.as_nanosecond().max(0) as u64))
}

/// A Node.
pub fn node(node: &core::Node) -> source::Node {
    let spec = node.spec.clone().unwrap_or_default();
    let pod_cidrs = match (spec.pod_cidrs, spec.pod_cidr) {
        (Some(c), _) if !c.is_empty() => c,
        (_, Some(c)) => vec![c],
        _ => Vec::new(),
    };
    source::Node {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: node.metadata.labels.clone().unwrap_or_default(),
        addresses: node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect(),
        pod_cidrs,
        deleting: node.metadata.deletion_timestamp.is_some(),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default(),
    }
}
