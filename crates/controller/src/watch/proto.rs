//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of the kinds verdict
//! watches, as `prost` messages holding only the fields verdict reads (prost skips the others
//! unread). Field numbers are upstream's: `k8s.io/api` core/v1 and discovery/v1
//! `generated.proto`, `k8s.io/apimachinery` meta/v1 and runtime `generated.proto`.
//!
//! The messages are mapped onto the shapes [`crate::decode`] reads JSON into, so one
//! translation makes the records from either encoding.

use std::collections::BTreeMap;

use prost::Message;

use crate::decode::{
    AffinityConfigJson, ClientIpJson, ConditionsJson, EndpointJson, EndpointPortJson, HintsJson, IngressJson,
    LoadBalancerJson, MetaJson, NamedJson, ServiceJson, ServicePortJson, ServiceSpecJson, ServiceStatusJson, SliceJson,
};
use crate::translate::TRIGGER_TIME_ANNOTATION;

/// What every protobuf-encoded object starts with (`k8s\0`), before its `runtime.Unknown`
/// envelope.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why bytes are not what the protobuf encoding says.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The `k8s\0` prefix is missing.
    #[error("not a Kubernetes protobuf object (no k8s\\0 prefix)")]
    NoMagic,
    /// The bytes are no valid message of the type.
    #[error("protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A list's fields are not what the encoding allows.
    #[error("protobuf list: {0}")]
    List(String),
    /// The envelope holds another kind than expected.
    #[error("expected a {expected}, got a {got:?}")]
    Kind {
        /// The kind wanted.
        expected: &'static str,
        /// The kind in the envelope.
        got: String,
    },
}

/// runtime.TypeMeta.
#[derive(Clone, PartialEq, Message)]
pub struct TypeMeta {
    /// `apiVersion`.
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    /// `kind`.
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// runtime.Unknown: the envelope around every object.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    /// What the object is.
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    /// The object's own encoding.
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub raw: Option<bytes::Bytes>,
    /// `contentEncoding` (unused by the API server).
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    /// `contentType` (unused by the API server).
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

/// Opens the envelope of `bytes` (`k8s\0` + Unknown): the kind and the object's bytes.
pub fn unwrap_envelope(bytes: &[u8]) -> Result<(String, bytes::Bytes), ProtoError> {
    let rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or(ProtoError::NoMagic)?;
    let unknown = Unknown::decode(rest)?;
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw.unwrap_or_default()))
}

/// The object of kind `expected` in an envelope.
pub fn open<M: Message + Default>(bytes: &[u8], expected: &'static str) -> Result<M, ProtoError> {
    let (kind, raw) = unwrap_envelope(bytes)?;
    if kind != expected {
        return Err(ProtoError::Kind { expected, got: kind });
    }
    Ok(M::decode(raw)?)
}

/// `k8s\0` + Unknown around `message` (what the API server sends; the test API server too).
pub fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(message.encode_to_vec().into()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    unknown.encode(&mut out).expect("a Vec grows as needed");
    out
}

/// meta/v1 Time: seconds and nanoseconds since the epoch.
#[derive(Clone, PartialEq, Message)]
pub struct Time {
    /// Seconds.
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    /// Nanoseconds.
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

/// meta/v1 ObjectMeta, the fields verdict reads.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `namespace`.
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    /// `resourceVersion`.
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    /// `deletionTimestamp`.
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    /// `labels`.
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    /// `annotations`.
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
}

/// meta/v1 ListMeta.
#[derive(Clone, PartialEq, Message)]
pub struct ListMeta {
    /// `resourceVersion`.
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    /// `continue`.
    #[prost(string, optional, tag = "3")]
    pub continue_: Option<String>,
    /// `remainingItemCount`.
    #[prost(int64, optional, tag = "4")]
    pub remaining_item_count: Option<i64>,
}

/// runtime.RawExtension.
#[derive(Clone, PartialEq, Message)]
pub struct RawExtension {
    /// The object, in its envelope.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub raw: Option<bytes::Bytes>,
}

/// meta/v1 WatchEvent: one frame of a watch.
#[derive(Clone, PartialEq, Message)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    #[prost(string, optional, tag = "1")]
    pub type_: Option<String>,
    /// The object (a Status for `ERROR`).
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtension>,
}

/// meta/v1 Status (errors).
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    /// `message`.
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    /// `reason`.
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    /// `code`.
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// A list of any kind: its metadata, and each item's bytes (decoded as they are taken).
#[derive(Clone, PartialEq, Message)]
pub struct List {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    /// `items`, each an object's own encoding (no envelope).
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub items: Vec<bytes::Bytes>,
}

/// core/v1 Service.
#[derive(Clone, PartialEq, Message)]
pub struct Service {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `spec`.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<ServiceSpec>,
    /// `status`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<ServiceStatus>,
}

/// core/v1 ServiceSpec.
#[derive(Clone, PartialEq, Message)]
pub struct ServiceSpec {
    /// `ports`.
    #[prost(message, repeated, tag = "1")]
    pub ports: Vec<ServicePort>,
    /// `clusterIP`.
    #[prost(string, optional, tag = "3")]
    pub cluster_ip: Option<String>,
    /// `type`.
    #[prost(string, optional, tag = "4")]
    pub type_: Option<String>,
    /// `externalIPs`.
    #[prost(string, repeated, tag = "5")]
    pub external_ips: Vec<String>,
    /// `sessionAffinity`.
    #[prost(string, optional, tag = "7")]
    pub session_affinity: Option<String>,
    /// `loadBalancerSourceRanges`.
    #[prost(string, repeated, tag = "9")]
    pub load_balancer_source_ranges: Vec<String>,
    /// `externalTrafficPolicy`.
    #[prost(string, optional, tag = "11")]
    pub external_traffic_policy: Option<String>,
    /// `healthCheckNodePort`.
    #[prost(int32, optional, tag = "12")]
    pub health_check_node_port: Option<i32>,
    /// `sessionAffinityConfig`.
    #[prost(message, optional, tag = "14")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `clusterIPs`.
    #[prost(string, repeated, tag = "18")]
    pub cluster_ips: Vec<String>,
    /// `internalTrafficPolicy`.
    #[prost(string, optional, tag = "22")]
    pub internal_traffic_policy: Option<String>,
}

/// core/v1 ServicePort.
#[derive(Clone, PartialEq, Message)]
pub struct ServicePort {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `protocol`.
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    /// `port`.
    #[prost(int32, optional, tag = "3")]
    pub port: Option<i32>,
    /// `nodePort`.
    #[prost(int32, optional, tag = "5")]
    pub node_port: Option<i32>,
}

/// core/v1 SessionAffinityConfig.
#[derive(Clone, PartialEq, Message)]
pub struct SessionAffinityConfig {
    /// `clientIP`.
    #[prost(message, optional, tag = "1")]
    pub client_ip: Option<ClientIpConfig>,
}

/// core/v1 ClientIPConfig.
#[derive(Clone, PartialEq, Message)]
pub struct ClientIpConfig {
    /// `timeoutSeconds`.
    #[prost(int32, optional, tag = "1")]
    pub timeout_seconds: Option<i32>,
}

/// core/v1 ServiceStatus.
#[derive(Clone, PartialEq, Message)]
pub struct ServiceStatus {
    /// `loadBalancer`.
    #[prost(message, optional, tag = "1")]
    pub load_balancer: Option<LoadBalancerStatus>,
}

/// core/v1 LoadBalancerStatus.
#[derive(Clone, PartialEq, Message)]
pub struct LoadBalancerStatus {
    /// `ingress`.
    #[prost(message, repeated, tag = "1")]
    pub ingress: Vec<LoadBalancerIngress>,
}

/// core/v1 LoadBalancerIngress.
#[derive(Clone, PartialEq, Message)]
pub struct LoadBalancerIngress {
    /// `ip`.
    #[prost(string, optional, tag = "1")]
    pub ip: Option<String>,
    /// `ipMode`.
    #[prost(string, optional, tag = "3")]
    pub ip_mode: Option<String>,
}

/// discovery/v1 EndpointSlice.
#[derive(Clone, PartialEq, Message)]
pub struct EndpointSlice {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `endpoints`.
    #[prost(message, repeated, tag = "2")]
    pub endpoints: Vec<Endpoint>,
    /// `ports`.
    #[prost(message, repeated, tag = "3")]
    pub ports: Vec<EndpointPort>,
    /// `addressType`.
    #[prost(string, optional, tag = "4")]
    pub address_type: Option<String>,
}

/// discovery/v1 Endpoint.
#[derive(Clone, PartialEq, Message)]
pub struct Endpoint {
    /// `addresses`.
    #[prost(string, repeated, tag = "1")]
    pub addresses: Vec<String>,
    /// `conditions`.
    #[prost(message, optional, tag = "2")]
    pub conditions: Option<EndpointConditions>,
    /// `nodeName`.
    #[prost(string, optional, tag = "6")]
    pub node_name: Option<String>,
    /// `zone`.
    #[prost(string, optional, tag = "7")]
    pub zone: Option<String>,
    /// `hints`.
    #[prost(message, optional, tag = "8")]
    pub hints: Option<EndpointHints>,
}

/// discovery/v1 EndpointConditions.
#[derive(Clone, PartialEq, Message)]
pub struct EndpointConditions {
    /// `ready`.
    #[prost(bool, optional, tag = "1")]
    pub ready: Option<bool>,
    /// `serving`.
    #[prost(bool, optional, tag = "2")]
    pub serving: Option<bool>,
    /// `terminating`.
    #[prost(bool, optional, tag = "3")]
    pub terminating: Option<bool>,
}

/// discovery/v1 EndpointHints.
#[derive(Clone, PartialEq, Message)]
pub struct EndpointHints {
    /// `forZones`.
    #[prost(message, repeated, tag = "1")]
    pub for_zones: Vec<Named>,
    /// `forNodes`.
    #[prost(message, repeated, tag = "2")]
    pub for_nodes: Vec<Named>,
}

/// discovery/v1 ForZone and ForNode: a name.
#[derive(Clone, PartialEq, Message)]
pub struct Named {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
}

/// discovery/v1 EndpointPort.
#[derive(Clone, PartialEq, Message)]
pub struct EndpointPort {
    /// `name`.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `protocol`.
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    /// `port`.
    #[prost(int32, optional, tag = "3")]
    pub port: Option<i32>,
}

/// core/v1 Node.
#[derive(Clone, PartialEq, Message)]
pub struct Node {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `spec`.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<NodeSpec>,
    /// `status`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<NodeStatus>,
}

/// core/v1 NodeSpec.
#[derive(Clone, PartialEq, Message)]
pub struct NodeSpec {
    /// `podCIDR`.
    #[prost(string, optional, tag = "1")]
    pub pod_cidr: Option<String>,
    /// `taints`.
    #[prost(message, repeated, tag = "5")]
    pub taints: Vec<Taint>,
    /// `podCIDRs`.
    #[prost(string, repeated, tag = "7")]
    pub pod_cidrs: Vec<String>,
}

/// core/v1 Taint.
#[derive(Clone, PartialEq, Message)]
pub struct Taint {
    /// `key`.
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    /// `effect`.
    #[prost(string, optional, tag = "3")]
    pub effect: Option<String>,
}

/// core/v1 NodeStatus.
#[derive(Clone, PartialEq, Message)]
pub struct NodeStatus {
    /// `addresses`.
    #[prost(message, repeated, tag = "5")]
    pub addresses: Vec<NodeAddress>,
}

/// core/v1 NodeAddress.
#[derive(Clone, PartialEq, Message)]
pub struct NodeAddress {
    /// `type`.
    #[prost(string, optional, tag = "1")]
    pub type_: Option<String>,
    /// `address`.
    #[prost(string, optional, tag = "2")]
    pub address: Option<String>,
}

fn some_if_any<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

impl From<ObjectMeta> for MetaJson {
    fn from(m: ObjectMeta) -> MetaJson {
        let mut annotations = m.annotations;
        MetaJson {
            name: m.name,
            namespace: m.namespace,
            resource_version: m.resource_version,
            labels: (!m.labels.is_empty()).then_some(m.labels),
            annotations: annotations.remove(TRIGGER_TIME_ANNOTATION),
        }
    }
}

impl From<Service> for ServiceJson {
    fn from(s: Service) -> ServiceJson {
        let spec = s.spec.map(|spec| ServiceSpecJson {
            type_: spec.type_,
            cluster_ips: some_if_any(spec.cluster_ips),
            cluster_ip: spec.cluster_ip,
            ports: some_if_any(
                spec.ports
                    .into_iter()
                    .map(|p| ServicePortJson {
                        name: p.name,
                        protocol: p.protocol,
                        port: p.port.unwrap_or_default(),
                        node_port: p.node_port,
                    })
                    .collect(),
            ),
            external_ips: some_if_any(spec.external_ips),
            load_balancer_source_ranges: some_if_any(spec.load_balancer_source_ranges),
            external_traffic_policy: spec.external_traffic_policy,
            internal_traffic_policy: spec.internal_traffic_policy,
            session_affinity: spec.session_affinity,
            session_affinity_config: spec.session_affinity_config.map(|c| AffinityConfigJson {
                client_ip: c.client_ip.map(|c| ClientIpJson { timeout_seconds: c.timeout_seconds }),
            }),
            health_check_node_port: spec.health_check_node_port,
        });
        let status = s.status.map(|st| ServiceStatusJson {
            load_balancer: st.load_balancer.map(|lb| LoadBalancerJson {
                ingress: some_if_any(
                    lb.ingress.into_iter().map(|i| IngressJson { ip: i.ip, ip_mode: i.ip_mode }).collect(),
                ),
            }),
        });
        ServiceJson { metadata: s.metadata.map(MetaJson::from).unwrap_or_default(), spec, status }
    }
}

impl From<EndpointSlice> for SliceJson {
    fn from(s: EndpointSlice) -> SliceJson {
        let named = |v: Vec<Named>| {
            some_if_any(v.into_iter().map(|n| NamedJson { name: n.name.unwrap_or_default() }).collect())
        };
        SliceJson {
            metadata: s.metadata.map(MetaJson::from).unwrap_or_default(),
            address_type: s.address_type.unwrap_or_default(),
            endpoints: s
                .endpoints
                .into_iter()
                .map(|e| EndpointJson {
                    addresses: e.addresses,
                    conditions: e.conditions.map(|c| ConditionsJson {
                        ready: c.ready,
                        serving: c.serving,
                        terminating: c.terminating,
                    }),
                    node_name: e.node_name,
                    zone: e.zone,
                    hints: e.hints.map(|h| HintsJson { for_zones: named(h.for_zones), for_nodes: named(h.for_nodes) }),
                })
                .collect(),
            ports: some_if_any(
                s.ports
                    .into_iter()
                    .map(|p| EndpointPortJson { name: p.name, protocol: p.protocol, port: p.port })
                    .collect(),
            ),
        }
    }
}

/// A Node as k8s-openapi's type, with the fields [`crate::translate::node`] reads: one Node is
/// watched, so the cost of the general type does not matter.
impl From<Node> for k8s_openapi::api::core::v1::Node {
    fn from(n: Node) -> k8s_openapi::api::core::v1::Node {
        use k8s_openapi::api::core::v1 as core;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
        let m = n.metadata.unwrap_or_default();
        let deletion = m.deletion_timestamp.map(|t| {
            let at = k8s_openapi::jiff::Timestamp::new(t.seconds.unwrap_or_default(), t.nanos.unwrap_or_default())
                .unwrap_or_default();
            meta::Time(at)
        });
        let spec = n.spec.map(|s| core::NodeSpec {
            pod_cidr: s.pod_cidr,
            pod_cidrs: some_if_any(s.pod_cidrs),
            taints: some_if_any(
                s.taints
                    .into_iter()
                    .map(|t| core::Taint {
                        key: t.key.unwrap_or_default(),
                        effect: t.effect.unwrap_or_default(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        let status = n.status.map(|s| core::NodeStatus {
            addresses: some_if_any(
                s.addresses
                    .into_iter()
                    .map(|a| core::NodeAddress {
                        type_: a.type_.unwrap_or_default(),
                        address: a.address.unwrap_or_default(),
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        core::Node {
            metadata: meta::ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                resource_version: m.resource_version,
                deletion_timestamp: deletion,
                labels: (!m.labels.is_empty()).then_some(m.labels),
                annotations: (!m.annotations.is_empty()).then_some(m.annotations),
                ..Default::default()
            },
            spec,
            status,
        }
    }
}

impl From<Service> for crate::decode::WatchedService {
    fn from(s: Service) -> crate::decode::WatchedService {
        ServiceJson::from(s).into()
    }
}

impl From<EndpointSlice> for crate::decode::WatchedSlice {
    fn from(s: EndpointSlice) -> crate::decode::WatchedSlice {
        SliceJson::from(s).into()
    }
}
