//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) of Services,
//! EndpointSlices and Nodes, for clients that ask for it (kube-proxy does): each object in its
//! envelope (`k8s\0` + `runtime.Unknown`), lists as `…List` messages, watches as frames of a
//! 4-byte big-endian length and a `metav1.WatchEvent` (apimachinery's framing). Other kinds
//! are served as JSON, as the API server serves custom resources.
//!
//! The stored JSON is encoded field by field with upstream's field numbers
//! (`k8s.io/api` core/v1 and discovery/v1, `k8s.io/apimachinery` meta/v1 and runtime
//! `generated.proto`): every field the JSON holds that these kinds' clients commonly set,
//! so byte counts compare with JSON's. Fields left out: `managedFields`,
//! `ownerReferences`, conditions and the Node status's inventory (images, capacity...).

use bytes::Bytes;
use prost::Message;
use serde_json::Value;
use std::collections::BTreeMap;

use crate::resource::ResourceType;

mod messages;
use crate::status::ApiError;
use messages::*;

/// The media type.
pub(crate) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch.
pub(crate) const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Whether the `Accept` header takes protobuf before JSON.
pub(crate) fn wanted(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let rank = |t: &str| accept.split(',').position(|a| a.trim().split(';').next() == Some(t));
    match (rank(PROTOBUF), rank("application/json")) {
        (Some(p), Some(j)) => p < j,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Whether the kind has a protobuf encoding here.
pub(crate) fn served(ty: &ResourceType) -> bool {
    matches!((ty.group.as_str(), ty.kind.as_str()), ("", "Service" | "Node") | ("discovery.k8s.io", "EndpointSlice"))
}

/// `k8s\0` + Unknown around an object's bytes.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    unknown.encode(&mut out).expect("a Vec grows");
    out
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key)?.as_str().map(str::to_string)
}

fn int(v: &Value, key: &str) -> Option<i32> {
    v.get(key)?.as_i64().and_then(|n| i32::try_from(n).ok())
}

fn boolean(v: &Value, key: &str) -> Option<bool> {
    v.get(key)?.as_bool()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    array(v, key).iter().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn map(v: &Value, key: &str) -> BTreeMap<String, String> {
    let Some(m) = v.get(key).and_then(Value::as_object) else { return BTreeMap::new() };
    m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()
}

fn time(v: &Value, key: &str) -> Option<Time> {
    let at: k8s_openapi::jiff::Timestamp = v.get(key)?.as_str()?.parse().ok()?;
    Some(Time { seconds: Some(at.as_second()), nanos: Some(at.subsec_nanosecond()) })
}

fn object_meta(v: &Value) -> ObjectMeta {
    let m = &v["metadata"];
    ObjectMeta {
        name: string(m, "name"),
        generate_name: string(m, "generateName"),
        namespace: string(m, "namespace"),
        uid: string(m, "uid"),
        resource_version: string(m, "resourceVersion"),
        generation: m.get("generation").and_then(Value::as_i64),
        creation_timestamp: time(m, "creationTimestamp"),
        deletion_timestamp: time(m, "deletionTimestamp"),
        labels: map(m, "labels"),
        annotations: map(m, "annotations"),
        finalizers: strings(m, "finalizers"),
    }
}

fn service(v: &Value) -> Service {
    let spec = v.get("spec").map(|s| ServiceSpec {
        ports: array(s, "ports")
            .iter()
            .map(|p| ServicePort {
                name: string(p, "name"),
                protocol: string(p, "protocol"),
                port: int(p, "port"),
                target_port: p.get("targetPort").map(|t| match t {
                    Value::String(s) => IntOrString { type_: Some(1), int_val: Some(0), str_val: Some(s.clone()) },
                    other => IntOrString {
                        type_: Some(0),
                        int_val: other.as_i64().and_then(|n| i32::try_from(n).ok()),
                        str_val: Some(String::new()),
                    },
                }),
                node_port: int(p, "nodePort"),
                app_protocol: string(p, "appProtocol"),
            })
            .collect(),
        selector: map(s, "selector"),
        cluster_ip: string(s, "clusterIP"),
        type_: string(s, "type"),
        external_ips: strings(s, "externalIPs"),
        session_affinity: string(s, "sessionAffinity"),
        load_balancer_ip: string(s, "loadBalancerIP"),
        load_balancer_source_ranges: strings(s, "loadBalancerSourceRanges"),
        external_name: string(s, "externalName"),
        external_traffic_policy: string(s, "externalTrafficPolicy"),
        health_check_node_port: int(s, "healthCheckNodePort"),
        publish_not_ready_addresses: boolean(s, "publishNotReadyAddresses"),
        session_affinity_config: s.get("sessionAffinityConfig").map(|c| SessionAffinityConfig {
            client_ip: c.get("clientIP").map(|c| ClientIpConfig { timeout_seconds: int(c, "timeoutSeconds") }),
        }),
        ip_family_policy: string(s, "ipFamilyPolicy"),
        cluster_ips: strings(s, "clusterIPs"),
        ip_families: strings(s, "ipFamilies"),
        allocate_load_balancer_node_ports: boolean(s, "allocateLoadBalancerNodePorts"),
        load_balancer_class: string(s, "loadBalancerClass"),
        internal_traffic_policy: string(s, "internalTrafficPolicy"),
        traffic_distribution: string(s, "trafficDistribution"),
    });
    let status = v.get("status").map(|s| ServiceStatus {
        load_balancer: s.get("loadBalancer").map(|lb| LoadBalancerStatus {
            ingress: array(lb, "ingress")
                .iter()
                .map(|i| LoadBalancerIngress {
                    ip: string(i, "ip"),
                    hostname: string(i, "hostname"),
                    ip_mode: string(i, "ipMode"),
                })
                .collect(),
        }),
    });
    Service { metadata: Some(object_meta(v)), spec, status }
}

fn endpoint_slice(v: &Value) -> EndpointSlice {
    let named = |h: &Value, key: &str| array(h, key).iter().map(|n| Named { name: string(n, "name") }).collect();
    EndpointSlice {
        metadata: Some(object_meta(v)),
        endpoints: array(v, "endpoints")
            .iter()
            .map(|e| Endpoint {
                addresses: strings(e, "addresses"),
                conditions: e.get("conditions").map(|c| EndpointConditions {
                    ready: boolean(c, "ready"),
                    serving: boolean(c, "serving"),
                    terminating: boolean(c, "terminating"),
                }),
                hostname: string(e, "hostname"),
                target_ref: e.get("targetRef").map(|r| ObjectReference {
                    kind: string(r, "kind"),
                    namespace: string(r, "namespace"),
                    name: string(r, "name"),
                    uid: string(r, "uid"),
                    api_version: string(r, "apiVersion"),
                    resource_version: string(r, "resourceVersion"),
                }),
                node_name: string(e, "nodeName"),
                zone: string(e, "zone"),
                hints: e
                    .get("hints")
                    .map(|h| EndpointHints { for_zones: named(h, "forZones"), for_nodes: named(h, "forNodes") }),
            })
            .collect(),
        ports: array(v, "ports")
            .iter()
            .map(|p| EndpointPort {
                name: string(p, "name"),
                protocol: string(p, "protocol"),
                port: int(p, "port"),
                app_protocol: string(p, "appProtocol"),
            })
            .collect(),
        address_type: string(v, "addressType"),
    }
}

fn node(v: &Value) -> Node {
    let spec = v.get("spec").map(|s| NodeSpec {
        pod_cidr: string(s, "podCIDR"),
        provider_id: string(s, "providerID"),
        unschedulable: boolean(s, "unschedulable"),
        taints: array(s, "taints")
            .iter()
            .map(|t| Taint { key: string(t, "key"), value: string(t, "value"), effect: string(t, "effect") })
            .collect(),
        pod_cidrs: strings(s, "podCIDRs"),
    });
    let status = v.get("status").map(|s| NodeStatus {
        phase: string(s, "phase"),
        addresses: array(s, "addresses")
            .iter()
            .map(|a| NodeAddress { type_: string(a, "type"), address: string(a, "address") })
            .collect(),
    });
    Node { metadata: Some(object_meta(v)), spec, status }
}

/// An object's own encoding (no envelope), by its `kind`; `None` for kinds without one here.
pub(crate) fn raw(v: &Value) -> Option<Vec<u8>> {
    Some(match v["kind"].as_str()? {
        "Service" => service(v).encode_to_vec(),
        "EndpointSlice" => endpoint_slice(v).encode_to_vec(),
        "Node" => node(v).encode_to_vec(),
        _ => return None,
    })
}

/// A list in protobuf: its metadata (as JSON), and its objects' own encodings.
pub(crate) fn list(ty: &ResourceType, meta: &Value, items: Vec<Bytes>) -> Vec<u8> {
    let message = List {
        metadata: Some(ListMeta {
            resource_version: string(meta, "resourceVersion"),
            continue_: string(meta, "continue"),
            remaining_item_count: meta.get("remainingItemCount").and_then(Value::as_i64),
        }),
        items,
    };
    envelope(&ty.api_version(), &ty.list_kind(), message.encode_to_vec())
}

/// A watch frame: the length, then a WatchEvent holding `object` (in its envelope).
pub(crate) fn frame(type_: &str, object: Vec<u8>, out: &mut Vec<u8>) {
    let event = WatchEvent { type_: Some(type_.into()), object: Some(RawExtension { raw: Some(object) }) };
    let len = u32::try_from(event.encoded_len()).expect("an event under 4 GiB");
    out.extend_from_slice(&len.to_be_bytes());
    event.encode(out).expect("a Vec grows");
}

/// A bookmark's object: the kind with only a resourceVersion (and the end-of-initial-events
/// annotation).
pub(crate) fn bookmark(ty: &ResourceType, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = ObjectMeta { resource_version: Some(rv.to_string()), ..ObjectMeta::default() };
    if initial_end {
        meta.annotations.insert("k8s.io/initial-events-end".into(), "true".into());
    }
    // Every kind has its metadata as field 1: a Service of only metadata is any kind's.
    let raw = Service { metadata: Some(meta), spec: None, status: None }.encode_to_vec();
    envelope(&ty.api_version(), &ty.kind, raw)
}

/// An error as a Status in its envelope.
pub(crate) fn status(err: &ApiError) -> Vec<u8> {
    let s = err.to_status();
    let message = Status {
        metadata: Some(ListMeta::default()),
        status: string(&s, "status"),
        message: string(&s, "message"),
        reason: string(&s, "reason"),
        code: int(&s, "code"),
    };
    envelope("v1", "Status", message.encode_to_vec())
}
