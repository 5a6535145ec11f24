//! The Kubernetes objects the namespace cluster's scenarios apply to the test API server.

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// The namespace of every scenario object.
pub const NAMESPACE: &str = "e2e";

/// A Service: a ClusterIP, port 80/TCP, and optionally a NodePort and traffic policies.
#[derive(Clone, Debug, Default)]
pub struct Svc {
    /// Name.
    pub name: &'static str,
    /// ClusterIP.
    pub cluster_ip: &'static str,
    /// NodePort (makes it type NodePort).
    pub node_port: Option<i32>,
    /// `externalTrafficPolicy: Local`.
    pub external_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
}

impl Svc {
    /// As a Kubernetes object.
    pub fn object(&self) -> Service {
        let policy = |local: bool| Some(if local { "Local" } else { "Cluster" }.to_string());
        Service {
            metadata: ObjectMeta {
                name: Some(self.name.into()),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(if self.node_port.is_some() { "NodePort" } else { "ClusterIP" }.into()),
                cluster_ip: Some(self.cluster_ip.into()),
                cluster_ips: Some(vec![self.cluster_ip.into()]),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    node_port: self.node_port,
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                }]),
                external_traffic_policy: self.node_port.and(policy(self.external_local)),
                internal_traffic_policy: policy(self.internal_local),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }
}

/// An endpoint's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Ready.
    Ready,
    /// Terminating, still serving.
    Terminating,
}

/// One endpoint: a pod's address, its node, its state.
pub type Ep = (String, String, State);

/// The EndpointSlice of Service `svc` (port `http` on the echo port).
pub fn slice(svc: &str, endpoints: &[Ep]) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{svc}-1")),
            namespace: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([("kubernetes.io/service-name".to_string(), svc.to_string())])),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(i32::from(crate::topology::ECHO_PORT)),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
        endpoints: endpoints
            .iter()
            .map(|(ip, node, state)| Endpoint {
                addresses: vec![ip.clone()],
                node_name: Some(node.clone()),
                conditions: Some(EndpointConditions {
                    ready: Some(*state == State::Ready),
                    serving: Some(true),
                    terminating: Some(*state == State::Terminating),
                }),
                ..Endpoint::default()
            })
            .collect(),
    }
}

/// A Node with its InternalIP and pod network.
pub fn node(name: &str, ip: &str, pod_cidr: &str) -> Node {
    Node {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        spec: Some(NodeSpec {
            pod_cidr: Some(pod_cidr.into()),
            pod_cidrs: Some(vec![pod_cidr.into()]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress { type_: "InternalIP".into(), address: ip.into() }]),
            ..NodeStatus::default()
        }),
    }
}

/// The `default/kubernetes` Service the API server keeps for itself, as kube-apiserver makes
/// it: `cluster_ip`:443/TCP (port `https`) with one endpoint, the API server's real address
/// `api`. Pods (and nodes) reach the API server through it, once kube-proxy has programmed it.
pub fn kubernetes_service(cluster_ip: &str, api: std::net::SocketAddr) -> (Service, EndpointSlice) {
    let meta = |name: &str, labels: Option<BTreeMap<String, String>>| ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        labels,
        ..ObjectMeta::default()
    };
    let service = Service {
        metadata: meta("kubernetes", None),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: 443,
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::Int(i32::from(api.port()))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let labels = BTreeMap::from([("kubernetes.io/service-name".to_string(), "kubernetes".to_string())]);
    let slice = EndpointSlice {
        metadata: meta("kubernetes", Some(labels)),
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("https".into()),
            port: Some(i32::from(api.port())),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
        endpoints: vec![Endpoint {
            addresses: vec![api.ip().to_string()],
            conditions: Some(EndpointConditions { ready: Some(true), serving: Some(true), terminating: Some(false) }),
            ..Endpoint::default()
        }],
    };
    (service, slice)
}
