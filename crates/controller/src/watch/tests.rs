//! Decoding checked against upstream's own bytes: the protobuf and JSON fixtures
//! kubernetes/api keeps for each type (`testdata/HEAD`, see `testdata/README.md`) make the
//! same records, and watch streams framed as apimachinery frames them decode event by event.

use super::proto::{self, envelope};
use super::wire::{self, Encoding, Framer, WatchEvent};
use super::{ContentTypes, WatchedService, WatchedSlice};
use crate::translate;
use k8s_openapi::api::core::v1::Node;
use prost::Message;

const SERVICE_PB: &[u8] = include_bytes!("testdata/core.v1.Service.pb");
const SERVICE_JSON: &[u8] = include_bytes!("testdata/core.v1.Service.json");
const SLICE_PB: &[u8] = include_bytes!("testdata/discovery.k8s.io.v1.EndpointSlice.pb");
const SLICE_JSON: &[u8] = include_bytes!("testdata/discovery.k8s.io.v1.EndpointSlice.json");
const NODE_PB: &[u8] = include_bytes!("testdata/core.v1.Node.pb");
const NODE_JSON: &[u8] = include_bytes!("testdata/core.v1.Node.json");

fn service_from_pb(bytes: &[u8]) -> WatchedService {
    proto::open::<proto::Service>(bytes, "Service").unwrap().into()
}

#[test]
fn upstreams_service_fixture_makes_the_same_record_in_protobuf_as_in_json() {
    let from_pb = service_from_pb(SERVICE_PB);
    let from_json: WatchedService = serde_json::from_slice(SERVICE_JSON).unwrap();
    assert_eq!(from_pb.record, from_json.record);
    // And the record holds the fixture's values, not defaults.
    let r = &from_pb.record;
    assert_eq!((r.namespace.as_str(), r.name.as_str()), ("namespaceValue", "nameValue"));
    assert_eq!(r.cluster_ips, ["clusterIPsValue"]);
    assert_eq!((r.ports[0].port, r.ports[0].node_port, r.ports[0].protocol.as_str()), (3, Some(5), "protocolValue"));
    assert_eq!((r.session_affinity_timeout_seconds, r.health_check_node_port), (Some(1), Some(12)));
    assert_eq!(r.load_balancer_ingress[0].ip_mode.as_deref(), Some("ipModeValue"));
    assert_eq!(r.labels.get("labelsKey").map(String::as_str), Some("labelsValue"));
    assert_eq!(kube::Resource::meta(&from_pb).resource_version.as_deref(), Some("resourceVersionValue"));
}

#[test]
fn upstreams_endpointslice_fixture_makes_the_same_record_in_protobuf_as_in_json() {
    let from_pb: WatchedSlice = proto::open::<proto::EndpointSlice>(SLICE_PB, "EndpointSlice").unwrap().into();
    let from_json: WatchedSlice = serde_json::from_slice(SLICE_JSON).unwrap();
    assert_eq!(from_pb.record, from_json.record);
    assert_eq!(from_pb.proxied, from_json.proxied);
    let r = &from_pb.record;
    assert_eq!(r.address_type, "addressTypeValue");
    let e = &r.endpoints[0];
    assert_eq!(e.addresses, ["addressesValue"]);
    assert_eq!((e.ready, e.serving, e.terminating), (Some(true), Some(true), Some(true)));
    assert_eq!(e.zone_hints.as_deref(), Some(&["nameValue".to_string()][..]));
    assert_eq!((r.ports[0].port, r.ports[0].name.as_str()), (Some(3), "nameValue"));
}

#[test]
fn upstreams_node_fixture_makes_the_same_record_in_protobuf_as_in_json() {
    let from_pb: Node = proto::open::<proto::Node>(NODE_PB, "Node").unwrap().into();
    let from_json: Node = serde_json::from_slice(NODE_JSON).unwrap();
    let (pb, json) = (translate::node(&from_pb), translate::node(&from_json));
    assert_eq!(pb, json);
    assert_eq!(pb.addresses, [("typeValue".to_string(), "addressValue".to_string())]);
    assert_eq!(
        (pb.pod_cidrs.as_slice(), pb.taints.as_slice(), pb.deleting),
        (&["podCIDRsValue".to_string()][..], &["keyValue".to_string()][..], true)
    );
}

#[test]
fn an_envelope_of_another_kind_or_without_its_prefix_is_refused() {
    assert!(proto::open::<proto::Service>(NODE_PB, "Service").is_err());
    assert!(proto::open::<proto::Service>(&SERVICE_PB[4..], "Service").is_err());
    assert!(proto::open::<proto::Service>(&SERVICE_PB[..SERVICE_PB.len() / 2], "Service").is_err());
}

/// A watch event as the API server encodes it: the object in its envelope (the fixture's
/// own bytes) inside a `metav1.WatchEvent`.
fn event_frame(type_: &str, object: &[u8]) -> Vec<u8> {
    wire::frame(&proto::WatchEvent {
        type_: Some(type_.into()),
        object: Some(proto::RawExtension { raw: Some(object.to_vec().into()) }),
    })
}

fn bookmark_bytes(rv: &str, end: bool) -> Vec<u8> {
    let mut meta = proto::ObjectMeta { resource_version: Some(rv.into()), ..Default::default() };
    if end {
        meta.annotations.insert(wire::INITIAL_EVENTS_END.into(), "true".into());
    }
    envelope("v1", "Service", &proto::Service { metadata: Some(meta), spec: None, status: None })
}

fn decode_stream(encoding: Encoding, stream: &[u8], chunk: usize) -> Vec<WatchEvent<WatchedService>> {
    let mut framer = Framer::new(encoding);
    let mut events = Vec::new();
    for piece in stream.chunks(chunk) {
        framer.push(piece);
        while let Some(frame) = framer.next_frame().unwrap() {
            events.push(wire::event(encoding, &frame).unwrap());
        }
    }
    if let Some(frame) = framer.finish().unwrap() {
        events.push(wire::event(encoding, &frame).unwrap());
    }
    events
}

#[test]
fn a_protobuf_watch_stream_decodes_event_by_event_in_any_chunking() {
    let expected = service_from_pb(SERVICE_PB).record;
    let mut stream = Vec::new();
    stream.extend(event_frame("ADDED", SERVICE_PB));
    stream.extend(event_frame("BOOKMARK", &bookmark_bytes("41", true)));
    stream.extend(event_frame("MODIFIED", SERVICE_PB));
    stream.extend(event_frame("BOOKMARK", &bookmark_bytes("42", false)));
    stream.extend(event_frame("DELETED", SERVICE_PB));
    let status = proto::Status { message: Some("too old".into()), reason: Some("Expired".into()), code: Some(410) };
    stream.extend(event_frame("ERROR", &envelope("v1", "Status", &status)));
    for chunk in [1, 7, 100, stream.len()] {
        let events = decode_stream(Encoding::Protobuf, &stream, chunk);
        let shape: Vec<String> = events
            .iter()
            .map(|e| match e {
                WatchEvent::Added(s) | WatchEvent::Modified(s) | WatchEvent::Deleted(s) => {
                    assert_eq!(s.record, expected);
                    format!("{:?}", std::mem::discriminant(e))
                }
                WatchEvent::Bookmark { resource_version, initial_events_end } => {
                    format!("bookmark {resource_version} {initial_events_end}")
                }
                WatchEvent::Error(s) => format!("error {} {}", s.code, s.reason),
            })
            .collect();
        assert_eq!(shape.len(), 6, "{shape:?}");
        assert_eq!(shape[1], "bookmark 41 true");
        assert_eq!(shape[3], "bookmark 42 false");
        assert_eq!(shape[5], "error 410 Expired");
        assert!(matches!(events[0], WatchEvent::Added(_)));
        assert!(matches!(events[2], WatchEvent::Modified(_)));
        assert!(matches!(events[4], WatchEvent::Deleted(_)));
    }
}

#[test]
fn a_protobuf_frame_longer_than_the_limit_is_refused_before_it_is_held() {
    let mut framer = Framer::new(Encoding::Protobuf);
    framer.push(&(u32::try_from(wire::MAX_FRAME).unwrap() + 1).to_be_bytes());
    assert!(matches!(framer.next_frame(), Err(wire::WireError::TooLong)));
    let mut framer = Framer::new(Encoding::Protobuf);
    framer.push(&event_frame("ADDED", SERVICE_PB)[..20]);
    assert!(framer.next_frame().unwrap().is_none());
    assert!(framer.finish().is_err(), "half a frame at the end is an error");
}

#[test]
fn a_json_watch_stream_decodes_the_same() {
    let object: serde_json::Value = serde_json::from_slice(SERVICE_JSON).unwrap();
    let bookmark = serde_json::json!({"kind": "Service", "apiVersion": "v1",
        "metadata": {"resourceVersion": "41", "annotations": {wire::INITIAL_EVENTS_END: "true"}}});
    let mut stream = String::new();
    for (t, o) in [("ADDED", &object), ("BOOKMARK", &bookmark), ("DELETED", &object)] {
        stream.push_str(&serde_json::json!({"type": t, "object": o}).to_string());
        stream.push('\n');
    }
    stream.push_str(r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"x"}}"#);
    let events = decode_stream(Encoding::Json, stream.as_bytes(), 13);
    assert_eq!(events.len(), 4);
    let expected = service_from_pb(SERVICE_PB).record;
    assert!(matches!(&events[0], WatchEvent::Added(s) if s.record == expected));
    assert!(
        matches!(&events[1], WatchEvent::Bookmark { resource_version, initial_events_end: true } if resource_version == "41")
    );
    assert!(matches!(&events[2], WatchEvent::Deleted(s) if s.record == expected));
    assert!(matches!(&events[3], WatchEvent::Error(s) if s.code == 410));
}

#[test]
fn statuses_in_either_encoding() {
    let pb = proto::Status { message: Some("m".into()), reason: Some("Invalid".into()), code: Some(422) };
    let s = wire::status(Encoding::Protobuf, &envelope("v1", "Status", &pb), 500);
    assert_eq!((s.code, s.reason.as_str(), s.message.as_str()), (422, "Invalid", "m"));
    let s = wire::status(Encoding::Json, br#"{"kind":"Status","code":410,"reason":"Expired","message":"gone"}"#, 500);
    assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
    // A body that is no Status keeps the HTTP code.
    assert_eq!(wire::status(Encoding::Json, b"<html>", 503).code, 503);
}

#[test]
fn the_accept_header_follows_client_gos_rules() {
    let pb = "application/vnd.kubernetes.protobuf";
    assert_eq!(ContentTypes::new(pb, "").accept(), "application/vnd.kubernetes.protobuf, application/json");
    assert_eq!(ContentTypes::new("application/json", "").accept(), "application/json");
    assert_eq!(ContentTypes::new("", "").accept(), "application/json");
    assert_eq!(ContentTypes::new(pb, "application/json").accept(), "application/json");
    assert_eq!(Encoding::of(Some("application/vnd.kubernetes.protobuf;stream=watch")), Encoding::Protobuf);
    assert_eq!(Encoding::of(Some("application/json")), Encoding::Json);
    assert_eq!(Encoding::of(None), Encoding::Json);
}

#[test]
fn the_fixtures_are_upstreams_bytes() {
    // Decoding and encoding again gives other bytes (the fields verdict skips are gone), so
    // the tests above read upstream's encoding, not one made here.
    let reencoded = envelope("v1", "Service", &proto::open::<proto::Service>(SERVICE_PB, "Service").unwrap());
    assert!(reencoded.len() < SERVICE_PB.len());
    assert!(proto::Service::decode(&*proto::unwrap_envelope(SERVICE_PB).unwrap().1).is_ok());
}
