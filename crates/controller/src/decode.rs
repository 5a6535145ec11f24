//! Services and EndpointSlices as the watchers decode them: straight from the API server's
//! JSON into the model's source records, reading only the fields verdict uses.
//!
//! Decoding into k8s-openapi's types first builds every field of every object (uids,
//! timestamps, owner references, `managedFields`) only to drop it after [`crate::translate`]
//! has picked what it needs; at 100k Services that is most of a start's allocations. Here
//! serde skips unread fields without building them. The records are the ones
//! [`crate::translate`] makes from the same objects (tested in `tests`), and fields are as
//! lenient as k8s-openapi's where they are read (it reads a missing required field as empty).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use verdict_model::source;

use crate::translate::{SERVICE_NAME_LABEL, TRIGGER_TIME_ANNOTATION};

/// A Service as watched: what the watcher needs of its metadata, and its source record.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "ServiceJson")]
pub struct WatchedService {
    meta: ObjectMeta,
    /// The record the model is built from.
    pub record: source::Service,
}

/// An EndpointSlice as watched.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "SliceJson")]
pub struct WatchedSlice {
    meta: ObjectMeta,
    /// The record the model is built from.
    pub record: source::EndpointSlice,
    /// Whether its labels leave it to the default proxy ([`verdict_model::proxied_by_labels`]:
    /// a slice carries its Service's labels). The API server's selector already left the
    /// others out; a manifests directory leaves them out by this.
    pub proxied: bool,
}

macro_rules! resource {
    ($ty:ty, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($group)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($version)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.meta
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.meta
            }
        }
    };
}

resource!(WatchedService, "", "v1", "Service", "services");
resource!(WatchedSlice, "discovery.k8s.io", "v1", "EndpointSlice", "endpointslices");

/// What the watcher itself reads of an object (its resourceVersion, and names for deletions),
/// plus the one label and annotation the records take.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MetaJson {
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) resource_version: Option<String>,
    #[serde(default)]
    pub(crate) labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "trigger_time")]
    pub(crate) annotations: Option<String>,
}

impl MetaJson {
    fn object_meta(&self) -> ObjectMeta {
        ObjectMeta {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            resource_version: self.resource_version.clone(),
            ..ObjectMeta::default()
        }
    }

    fn namespace(&self) -> String {
        self.namespace.clone().unwrap_or_else(|| "default".to_string())
    }
}

/// Of the annotations, only the last-change trigger time (other annotations, such as
/// `kubectl.kubernetes.io/last-applied-configuration`, can be large and are skipped unread).
fn trigger_time<'de, D: Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("annotations")
        }
        fn visit_unit<E>(self) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Option<String>, D::Error> {
            de.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == TRIGGER_TIME_ANNOTATION {
                    found = Some(map.next_value::<String>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    de.deserialize_option(Annotations)
}

#[derive(Deserialize)]
pub(crate) struct ServiceJson {
    #[serde(default)]
    pub(crate) metadata: MetaJson,
    pub(crate) spec: Option<ServiceSpecJson>,
    pub(crate) status: Option<ServiceStatusJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceSpecJson {
    #[serde(rename = "type")]
    pub(crate) type_: Option<String>,
    #[serde(rename = "clusterIPs")]
    pub(crate) cluster_ips: Option<Vec<String>>,
    #[serde(rename = "clusterIP")]
    pub(crate) cluster_ip: Option<String>,
    pub(crate) ports: Option<Vec<ServicePortJson>>,
    #[serde(rename = "externalIPs")]
    pub(crate) external_ips: Option<Vec<String>>,
    pub(crate) load_balancer_source_ranges: Option<Vec<String>>,
    pub(crate) external_traffic_policy: Option<String>,
    pub(crate) internal_traffic_policy: Option<String>,
    pub(crate) session_affinity: Option<String>,
    pub(crate) session_affinity_config: Option<AffinityConfigJson>,
    pub(crate) health_check_node_port: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServicePortJson {
    pub(crate) name: Option<String>,
    pub(crate) protocol: Option<String>,
    #[serde(default)]
    pub(crate) port: i32,
    pub(crate) node_port: Option<i32>,
}

#[derive(Deserialize)]
pub(crate) struct AffinityConfigJson {
    #[serde(rename = "clientIP")]
    pub(crate) client_ip: Option<ClientIpJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClientIpJson {
    pub(crate) timeout_seconds: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceStatusJson {
    pub(crate) load_balancer: Option<LoadBalancerJson>,
}

#[derive(Deserialize)]
pub(crate) struct LoadBalancerJson {
    pub(crate) ingress: Option<Vec<IngressJson>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IngressJson {
    pub(crate) ip: Option<String>,
    pub(crate) ip_mode: Option<String>,
}

impl From<ServiceJson> for WatchedService {
    fn from(svc: ServiceJson) -> WatchedService {
        let spec = svc.spec.unwrap_or_default();
        let cluster_ips = match (spec.cluster_ips, spec.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => ips,
            (_, Some(ip)) => vec![ip],
            _ => Vec::new(),
        };
        let record = source::Service {
            namespace: svc.metadata.namespace(),
            name: svc.metadata.name.clone().unwrap_or_default(),
            labels: svc.metadata.labels.clone().unwrap_or_default(),
            service_type: spec.type_.unwrap_or_default(),
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
                .and_then(|s| s.load_balancer)
                .and_then(|lb| lb.ingress)
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
        };
        WatchedService { meta: svc.metadata.object_meta(), record }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SliceJson {
    #[serde(default)]
    pub(crate) metadata: MetaJson,
    #[serde(default)]
    pub(crate) address_type: String,
    #[serde(default)]
    pub(crate) endpoints: Vec<EndpointJson>,
    pub(crate) ports: Option<Vec<EndpointPortJson>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndpointJson {
    #[serde(default)]
    pub(crate) addresses: Vec<String>,
    pub(crate) conditions: Option<ConditionsJson>,
    pub(crate) node_name: Option<String>,
    pub(crate) zone: Option<String>,
    pub(crate) hints: Option<HintsJson>,
}

#[derive(Deserialize)]
pub(crate) struct ConditionsJson {
    pub(crate) ready: Option<bool>,
    pub(crate) serving: Option<bool>,
    pub(crate) terminating: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HintsJson {
    pub(crate) for_zones: Option<Vec<NamedJson>>,
    pub(crate) for_nodes: Option<Vec<NamedJson>>,
}

#[derive(Deserialize)]
pub(crate) struct NamedJson {
    #[serde(default)]
    pub(crate) name: String,
}

#[derive(Deserialize)]
pub(crate) struct EndpointPortJson {
    pub(crate) name: Option<String>,
    pub(crate) protocol: Option<String>,
    pub(crate) port: Option<i32>,
}

impl From<SliceJson> for WatchedSlice {
    fn from(slice: SliceJson) -> WatchedSlice {
        let meta = slice.metadata.object_meta();
        let proxied = slice.metadata.labels.as_ref().is_none_or(verdict_model::proxied_by_labels);
        let record = source::EndpointSlice {
            namespace: slice.metadata.namespace(),
            name: slice.metadata.name.unwrap_or_default(),
            service_name: slice.metadata.labels.and_then(|mut l| l.remove(SERVICE_NAME_LABEL)).unwrap_or_default(),
            address_type: slice.address_type,
            ports: slice
                .ports
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
                .into_iter()
                .map(|ep| {
                    let (ready, serving, terminating) =
                        ep.conditions.map_or((None, None, None), |c| (c.ready, c.serving, c.terminating));
                    let names = |v: Vec<NamedJson>| v.into_iter().map(|n| n.name).collect::<Vec<_>>();
                    let (zone_hints, node_hints) = match ep.hints {
                        Some(h) => (h.for_zones.map(names), h.for_nodes.map(names)),
                        None => (None, None),
                    };
                    source::Endpoint {
                        addresses: ep.addresses,
                        ready,
                        serving,
                        terminating,
                        node_name: ep.node_name,
                        zone: ep.zone,
                        zone_hints,
                        node_hints,
                    }
                })
                .collect(),
            trigger_time: slice.metadata.annotations.as_deref().and_then(crate::translate::trigger_time),
        };
        WatchedSlice { meta, record, proxied }
    }
}
