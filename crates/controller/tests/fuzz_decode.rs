//! The watchers' decoding (`verdict_controller::decode`) against the reference path it
//! replaces: k8s-openapi's types, then `translate`. For generated Services and EndpointSlices
//! with hostile values, plus metadata verdict does not read (annotations, `managedFields`,
//! owner references), the JSON an API server would send must decode into exactly the record
//! `translate` makes of the same object, inside a watch event as kube reads it.

mod fuzz;

use fuzz::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference};
use kube::Resource;
use kube::core::WatchEvent;
use proptest::option::of;
use proptest::prelude::*;
use std::collections::BTreeMap;
use verdict_controller::decode::{WatchedService, WatchedSlice};
use verdict_controller::translate::{self, TRIGGER_TIME_ANNOTATION};

/// Metadata verdict skips, and sometimes the one annotation it reads.
fn noise(meta: &mut ObjectMeta, trigger: Option<String>, rv: u32) {
    let mut annotations = BTreeMap::from([(
        "kubectl.kubernetes.io/last-applied-configuration".to_string(),
        "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{}}".repeat(20),
    )]);
    if let Some(t) = trigger {
        annotations.insert(TRIGGER_TIME_ANNOTATION.to_string(), t);
    }
    meta.annotations = Some(annotations);
    meta.resource_version = Some(rv.to_string());
    meta.uid = Some("7e57a91d-0000-4000-8000-000000000001".into());
    meta.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kube-controller-manager".into()),
        operation: Some("Update".into()),
        ..Default::default()
    }]);
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: "owner".into(),
        uid: "u".into(),
        ..Default::default()
    }]);
}

fn trigger() -> impl Strategy<Value = Option<String>> {
    of(prop_oneof![
        Just("2026-11-25T16:24:18Z".to_string()),
        Just("2026-11-25T16:24:18.123456Z".to_string()),
        Just("yesterday".to_string())
    ])
}

/// `object` inside an `ADDED` event, as an API server writes it.
fn event_line<T: serde::Serialize>(object: &T) -> String {
    format!("{{\"type\":\"ADDED\",\"object\":{}}}", serde_json::to_string(object).expect("serializes"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn services_decode_as_translate_reads_them(
        svc in hostile_service(of(dns_label()).prop_map(Option::unwrap_or_default)),
        trigger in trigger(),
        rv in 1u32..100000,
        namespaced in any::<bool>(),
    ) {
        let mut svc: Service = svc;
        if !namespaced {
            svc.metadata.namespace = None;
        }
        noise(&mut svc.metadata, trigger, rv);
        let line = event_line(&svc);
        let event: WatchEvent<WatchedService> = serde_json::from_str(&line).expect("decodes");
        let WatchEvent::Added(got) = event else { panic!("an ADDED event") };
        prop_assert_eq!(&got.record, &translate::service(&svc));
        prop_assert_eq!(got.meta().resource_version.clone(), Some(rv.to_string()));
        prop_assert_eq!(got.meta().name.as_deref(), svc.metadata.name.as_deref());
    }

    #[test]
    fn slices_decode_as_translate_reads_them(
        slice in hostile_slice(dns_label()),
        trigger in trigger(),
        rv in 1u32..100000,
    ) {
        let mut slice: EndpointSlice = slice;
        noise(&mut slice.metadata, trigger, rv);
        let line = event_line(&slice);
        let event: WatchEvent<WatchedSlice> = serde_json::from_str(&line).expect("decodes");
        let WatchEvent::Added(got) = event else { panic!("an ADDED event") };
        prop_assert_eq!(&got.record, &translate::endpoint_slice(&slice));
        prop_assert_eq!(got.meta().resource_version.clone(), Some(rv.to_string()));
        prop_assert_eq!(got.meta().namespace.as_deref(), slice.metadata.namespace.as_deref());
    }
}

/// Whether an object is refused for a missing field is decided as k8s-openapi decides it (a
/// refused object is reported by the watcher as an error, not read with an invented value).
#[test]
fn missing_fields_are_refused_exactly_where_k8s_openapi_refuses_them() {
    let slices = [
        r#"{"metadata":{"name":"s"},"addressType":"IPv4"}"#,
        r#"{"metadata":{"name":"s"},"endpoints":[]}"#,
        r#"{"metadata":{"name":"s"},"addressType":"IPv4","endpoints":[{}]}"#,
        r#"{"metadata":{"name":"s"},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"]}],"ports":[{}]}"#,
        r#"{"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"hints":{"forZones":[{}]}}]}"#,
    ];
    for json in slices {
        let (reference, ours) =
            (serde_json::from_str::<EndpointSlice>(json), serde_json::from_str::<WatchedSlice>(json));
        assert_eq!(reference.is_ok(), ours.is_ok(), "{json}: k8s-openapi {reference:?}, verdict {ours:?}");
        if let (Ok(r), Ok(o)) = (reference, ours) {
            assert_eq!(o.record, translate::endpoint_slice(&r), "{json}");
        }
    }
    let services = [
        r#"{"metadata":{"name":"s"}}"#,
        r#"{"metadata":{"name":"s"},"spec":{"ports":[{"name":"http"}]}}"#,
        r#"{"metadata":{"name":"s"},"spec":{"ports":[{"port":80}]},"status":{"loadBalancer":{"ingress":[{}]}}}"#,
        r#"{"spec":{"sessionAffinityConfig":{"clientIP":{}}}}"#,
    ];
    for json in services {
        let (reference, ours) = (serde_json::from_str::<Service>(json), serde_json::from_str::<WatchedService>(json));
        assert_eq!(reference.is_ok(), ours.is_ok(), "{json}: k8s-openapi {reference:?}, verdict {ours:?}");
        if let (Ok(r), Ok(o)) = (reference, ours) {
            assert_eq!(o.record, translate::service(&r), "{json}");
        }
    }
}
