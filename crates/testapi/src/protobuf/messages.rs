//! The messages, with upstream's field numbers (only the fields encoded here).

use prost::Message;
use std::collections::BTreeMap;

#[derive(Clone, PartialEq, Message)]
pub(super) struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub(super) api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub(super) type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub(super) raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub(super) content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(super) content_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Time {
    #[prost(int64, optional, tag = "1")]
    pub(super) seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub(super) nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub(super) name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub(super) uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub(super) resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub(super) generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub(super) creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    pub(super) deletion_timestamp: Option<Time>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub(super) labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub(super) annotations: BTreeMap<String, String>,
    #[prost(string, repeated, tag = "14")]
    pub(super) finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ListMeta {
    #[prost(string, optional, tag = "2")]
    pub(super) resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) continue_: Option<String>,
    #[prost(int64, optional, tag = "4")]
    pub(super) remaining_item_count: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct List {
    #[prost(message, optional, tag = "1")]
    pub(super) metadata: Option<ListMeta>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub(super) items: Vec<bytes::Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct RawExtension {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub(super) raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub(super) type_: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub(super) object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Status {
    #[prost(message, optional, tag = "1")]
    pub(super) metadata: Option<ListMeta>,
    #[prost(string, optional, tag = "2")]
    pub(super) status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(super) reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    pub(super) code: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct IntOrString {
    #[prost(int64, optional, tag = "1")]
    pub(super) type_: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub(super) int_val: Option<i32>,
    #[prost(string, optional, tag = "3")]
    pub(super) str_val: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ServicePort {
    #[prost(string, optional, tag = "1")]
    pub(super) name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub(super) port: Option<i32>,
    #[prost(message, optional, tag = "4")]
    pub(super) target_port: Option<IntOrString>,
    #[prost(int32, optional, tag = "5")]
    pub(super) node_port: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub(super) app_protocol: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ClientIpConfig {
    #[prost(int32, optional, tag = "1")]
    pub(super) timeout_seconds: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct SessionAffinityConfig {
    #[prost(message, optional, tag = "1")]
    pub(super) client_ip: Option<ClientIpConfig>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ServiceSpec {
    #[prost(message, repeated, tag = "1")]
    pub(super) ports: Vec<ServicePort>,
    #[prost(btree_map = "string, string", tag = "2")]
    pub(super) selector: BTreeMap<String, String>,
    #[prost(string, optional, tag = "3")]
    pub(super) cluster_ip: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(super) type_: Option<String>,
    #[prost(string, repeated, tag = "5")]
    pub(super) external_ips: Vec<String>,
    #[prost(string, optional, tag = "7")]
    pub(super) session_affinity: Option<String>,
    #[prost(string, optional, tag = "8")]
    pub(super) load_balancer_ip: Option<String>,
    #[prost(string, repeated, tag = "9")]
    pub(super) load_balancer_source_ranges: Vec<String>,
    #[prost(string, optional, tag = "10")]
    pub(super) external_name: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub(super) external_traffic_policy: Option<String>,
    #[prost(int32, optional, tag = "12")]
    pub(super) health_check_node_port: Option<i32>,
    #[prost(bool, optional, tag = "13")]
    pub(super) publish_not_ready_addresses: Option<bool>,
    #[prost(message, optional, tag = "14")]
    pub(super) session_affinity_config: Option<SessionAffinityConfig>,
    #[prost(string, optional, tag = "17")]
    pub(super) ip_family_policy: Option<String>,
    #[prost(string, repeated, tag = "18")]
    pub(super) cluster_ips: Vec<String>,
    #[prost(string, repeated, tag = "19")]
    pub(super) ip_families: Vec<String>,
    #[prost(bool, optional, tag = "20")]
    pub(super) allocate_load_balancer_node_ports: Option<bool>,
    #[prost(string, optional, tag = "21")]
    pub(super) load_balancer_class: Option<String>,
    #[prost(string, optional, tag = "22")]
    pub(super) internal_traffic_policy: Option<String>,
    #[prost(string, optional, tag = "23")]
    pub(super) traffic_distribution: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct LoadBalancerIngress {
    #[prost(string, optional, tag = "1")]
    pub(super) ip: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) hostname: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) ip_mode: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct LoadBalancerStatus {
    #[prost(message, repeated, tag = "1")]
    pub(super) ingress: Vec<LoadBalancerIngress>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ServiceStatus {
    #[prost(message, optional, tag = "1")]
    pub(super) load_balancer: Option<LoadBalancerStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Service {
    #[prost(message, optional, tag = "1")]
    pub(super) metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub(super) spec: Option<ServiceSpec>,
    #[prost(message, optional, tag = "3")]
    pub(super) status: Option<ServiceStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct EndpointConditions {
    #[prost(bool, optional, tag = "1")]
    pub(super) ready: Option<bool>,
    #[prost(bool, optional, tag = "2")]
    pub(super) serving: Option<bool>,
    #[prost(bool, optional, tag = "3")]
    pub(super) terminating: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    pub(super) kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub(super) uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub(super) api_version: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub(super) resource_version: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Named {
    #[prost(string, optional, tag = "1")]
    pub(super) name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct EndpointHints {
    #[prost(message, repeated, tag = "1")]
    pub(super) for_zones: Vec<Named>,
    #[prost(message, repeated, tag = "2")]
    pub(super) for_nodes: Vec<Named>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Endpoint {
    #[prost(string, repeated, tag = "1")]
    pub(super) addresses: Vec<String>,
    #[prost(message, optional, tag = "2")]
    pub(super) conditions: Option<EndpointConditions>,
    #[prost(string, optional, tag = "3")]
    pub(super) hostname: Option<String>,
    #[prost(message, optional, tag = "4")]
    pub(super) target_ref: Option<ObjectReference>,
    #[prost(string, optional, tag = "6")]
    pub(super) node_name: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub(super) zone: Option<String>,
    #[prost(message, optional, tag = "8")]
    pub(super) hints: Option<EndpointHints>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct EndpointPort {
    #[prost(string, optional, tag = "1")]
    pub(super) name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub(super) port: Option<i32>,
    #[prost(string, optional, tag = "4")]
    pub(super) app_protocol: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct EndpointSlice {
    #[prost(message, optional, tag = "1")]
    pub(super) metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    pub(super) endpoints: Vec<Endpoint>,
    #[prost(message, repeated, tag = "3")]
    pub(super) ports: Vec<EndpointPort>,
    #[prost(string, optional, tag = "4")]
    pub(super) address_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Taint {
    #[prost(string, optional, tag = "1")]
    pub(super) key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) value: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) effect: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct NodeSpec {
    #[prost(string, optional, tag = "1")]
    pub(super) pod_cidr: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub(super) provider_id: Option<String>,
    #[prost(bool, optional, tag = "4")]
    pub(super) unschedulable: Option<bool>,
    #[prost(message, repeated, tag = "5")]
    pub(super) taints: Vec<Taint>,
    #[prost(string, repeated, tag = "7")]
    pub(super) pod_cidrs: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct NodeAddress {
    #[prost(string, optional, tag = "1")]
    pub(super) type_: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub(super) address: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct NodeStatus {
    #[prost(string, optional, tag = "3")]
    pub(super) phase: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub(super) addresses: Vec<NodeAddress>,
}

#[derive(Clone, PartialEq, Message)]
pub(super) struct Node {
    #[prost(message, optional, tag = "1")]
    pub(super) metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub(super) spec: Option<NodeSpec>,
    #[prost(message, optional, tag = "3")]
    pub(super) status: Option<NodeStatus>,
}
