//! Lists decoded as they arrive: upstream's objects in both encodings, in every chunking,
//! give what the whole body gives; objects come out before the body ends; a body cut short,
//! of another kind, or with an object that never ends is refused.

use super::WatchedService;
use super::list_stream::{ListEnd, ListStream};
use super::proto::{self, envelope};
use super::wire::{Encoding, MAX_FRAME, WireError};
use serde_json::json;

const SERVICE_PB: &[u8] = include_bytes!("testdata/core.v1.Service.pb");
const SERVICE_JSON: &[u8] = include_bytes!("testdata/core.v1.Service.json");

/// Upstream's Service fixture with `name` and one label of `value`.
fn service_json(name: &str, value: &str) -> serde_json::Value {
    let mut object: serde_json::Value = serde_json::from_slice(SERVICE_JSON).unwrap();
    object["metadata"]["name"] = json!(name);
    object["metadata"]["labels"] = json!({ "tricky": value });
    object
}

/// Upstream's Service fixture (its own protobuf bytes, no envelope) `n` times, as a list.
fn protobuf_list(n: usize, list_kind: &str) -> Vec<u8> {
    let inner = proto::unwrap_envelope(SERVICE_PB).unwrap().1;
    let list = proto::List {
        metadata: Some(proto::ListMeta {
            resource_version: Some("4242".into()),
            continue_: Some("more".into()),
            remaining_item_count: Some(7),
        }),
        items: vec![inner; n],
    };
    envelope("v1", list_kind, &list)
}

/// Strings a bracket counter that ignored strings and escapes would be fooled by.
const TRICKY: [&str; 5] = ["}", "]}],{\"items\":[", "a \\\" quote", "\\\\", "tab\t, newline\n"];

fn json_list(pretty: bool) -> Vec<u8> {
    let items: Vec<_> = TRICKY.iter().enumerate().map(|(i, v)| service_json(&format!("s{i}"), v)).collect();
    let list = json!({
        "kind": "ServiceList",
        "apiVersion": "v1",
        "extra": {"nested": [1, {"b": "]"}, null, true, -2.5e3]},
        "metadata": {"resourceVersion": "4242", "continue": "more", "remainingItemCount": 7},
        "items": items,
        "after": "}",
    });
    match pretty {
        true => serde_json::to_vec_pretty(&list).unwrap(),
        false => serde_json::to_vec(&list).unwrap(),
    }
}

/// `body` pushed in pieces of `chunk` bytes: the objects and the end.
fn read(encoding: Encoding, body: &[u8], chunk: usize) -> Result<(Vec<WatchedService>, ListEnd), WireError> {
    let mut list = ListStream::<WatchedService>::new(encoding);
    let mut items = Vec::new();
    for piece in body.chunks(chunk.max(1)) {
        items.extend(list.push(piece)?);
    }
    Ok((items, list.finish()?))
}

fn records(items: &[WatchedService]) -> Vec<verdict_model::source::Service> {
    items.iter().map(|s| s.record.clone()).collect()
}

#[test]
fn upstreams_protobuf_objects_decode_the_same_in_every_chunking() {
    let body = protobuf_list(3, "ServiceList");
    let (whole, end) = read(Encoding::Protobuf, &body, body.len()).unwrap();
    assert_eq!(whole.len(), 3);
    assert_eq!(end, ListEnd { resource_version: "4242".into(), continue_token: Some("more".into()) });
    let expected: WatchedService = proto::open::<proto::Service>(SERVICE_PB, "Service").unwrap().into();
    assert!(whole.iter().all(|s| s.record == expected.record));
    for chunk in [1, 2, 3, 5, 64, 1000] {
        let (items, e) = read(Encoding::Protobuf, &body, chunk).unwrap();
        assert_eq!((records(&items), &e), (records(&whole), &end), "chunk {chunk}");
    }
}

#[test]
fn json_objects_decode_the_same_in_every_chunking_whatever_their_strings_hold() {
    for pretty in [false, true] {
        let body = json_list(pretty);
        let (whole, end) = read(Encoding::Json, &body, body.len()).unwrap();
        assert_eq!(end, ListEnd { resource_version: "4242".into(), continue_token: Some("more".into()) });
        // Each object is what serde makes of it on its own, strings intact.
        let expected: Vec<WatchedService> = TRICKY
            .iter()
            .enumerate()
            .map(|(i, v)| serde_json::from_value(service_json(&format!("s{i}"), v)).unwrap())
            .collect();
        assert_eq!(records(&whole), records(&expected));
        assert_eq!(whole[2].record.labels.get("tricky").map(String::as_str), Some(TRICKY[2]));
        for chunk in [1, 2, 3, 7, 64, 1000] {
            let (items, e) = read(Encoding::Json, &body, chunk).unwrap();
            assert_eq!((records(&items), &e), (records(&whole), &end), "pretty {pretty}, chunk {chunk}");
        }
    }
}

#[test]
fn a_protobuf_list_and_a_json_list_of_upstreams_object_make_the_same_records() {
    let object: serde_json::Value = serde_json::from_slice(SERVICE_JSON).unwrap();
    let json = json!({"kind": "ServiceList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "4242", "continue": "more"}, "items": [object, object, object]});
    let (from_json, json_end) = read(Encoding::Json, json.to_string().as_bytes(), 1 << 20).unwrap();
    let body = protobuf_list(3, "ServiceList");
    let (from_pb, pb_end) = read(Encoding::Protobuf, &body, body.len()).unwrap();
    assert_eq!(records(&from_pb), records(&from_json));
    assert_eq!(pb_end, json_end);
}

#[test]
fn lists_without_objects_and_without_metadata_are_lists() {
    for body in [r#"{"kind":"ServiceList","items":null}"#, r#"{"items":[]}"#, r#" { } "#] {
        let (items, end) = read(Encoding::Json, body.as_bytes(), 1).unwrap();
        assert!(items.is_empty(), "{body}");
        assert_eq!(end, ListEnd::default(), "{body}");
    }
    let (items, end) = read(Encoding::Protobuf, &protobuf_list(0, "ServiceList"), 3).unwrap();
    assert!(items.is_empty());
    assert_eq!(end.resource_version, "4242");
}

#[test]
fn each_object_comes_out_once_its_bytes_are_in_not_at_the_end_of_the_body() {
    for (encoding, body) in [(Encoding::Json, json_list(false)), (Encoding::Protobuf, protobuf_list(5, "ServiceList"))]
    {
        let mut list = ListStream::<WatchedService>::new(encoding);
        let mut seen_at = Vec::new();
        for (i, byte) in body.iter().enumerate() {
            for _ in list.push(&[*byte]).unwrap() {
                seen_at.push(i);
            }
        }
        list.finish().unwrap();
        assert_eq!(seen_at.len(), 5, "{encoding:?}");
        // The first object is out before the body is half read, and each one before the next.
        assert!(seen_at[0] < body.len() / 2, "{encoding:?}: first object at byte {} of {}", seen_at[0], body.len());
        assert!(seen_at.windows(2).all(|w| w[0] < w[1]), "{encoding:?}");
    }
}

#[test]
fn a_body_cut_anywhere_is_never_taken_for_a_shorter_list() {
    for (encoding, body) in [(Encoding::Json, json_list(false)), (Encoding::Protobuf, protobuf_list(2, "ServiceList"))]
    {
        let (whole, end) = read(encoding, &body, body.len()).unwrap();
        let mut taken = 0;
        for cut in 0..body.len() {
            // Protobuf has no end mark: a body cut after the list, between the envelope's last
            // (empty) fields, is whole; anything shorter is refused.
            if let Ok((items, e)) = read(encoding, &body[..cut], 97) {
                assert_eq!((records(&items), &e), (records(&whole), &end), "{encoding:?}: cut at {cut}");
                taken += 1;
            }
        }
        let expected = match encoding {
            Encoding::Json => 0,
            Encoding::Protobuf => 2,
        };
        assert_eq!(taken, expected, "{encoding:?}: cuts taken");
    }
}

#[test]
fn malformed_lists_are_refused() {
    let bad_json: [&str; 8] = [
        r#"[]"#,
        r#"{"items":{}}"#,
        r#"{"items":[1,]}"#,
        r#"{"items":[],}"#,
        r#"{"metadata":{"resourceVersion":5},"items":[]}"#,
        r#"{"kind":"ServiceList" "items":[]}"#,
        r#"{"a":{]}"#,
        r#"{"items":[]} x"#,
    ];
    for body in bad_json {
        assert!(read(Encoding::Json, body.as_bytes(), 4).is_err(), "{body} was taken");
    }
    // A list of another kind, and no envelope at all.
    let other = read(Encoding::Protobuf, &protobuf_list(1, "NodeList"), 16).unwrap_err();
    assert!(other.to_string().contains("NodeList"), "{other}");
    let no_magic = read(Encoding::Protobuf, &protobuf_list(1, "ServiceList")[4..], 16).unwrap_err();
    assert!(no_magic.to_string().contains("prefix"), "{no_magic}");
}

#[test]
fn an_object_longer_than_the_limit_is_refused_before_it_is_held() {
    // JSON: an object that never closes.
    let mut list = ListStream::<WatchedService>::new(Encoding::Json);
    list.push(br#"{"items":[{"metadata":{"name":""#).unwrap();
    let piece = vec![b'x'; 1 << 20];
    let mut fed = 0;
    let err = loop {
        match list.push(&piece) {
            Ok(items) => assert!(items.is_empty()),
            Err(e) => break e,
        }
        fed += piece.len();
        assert!(fed <= MAX_FRAME + piece.len(), "held {fed} bytes of one object");
    };
    assert!(matches!(err, WireError::TooLong), "{err}");
    // Protobuf: an item whose length says more than the limit, refused from its header.
    let mut body = proto::MAGIC.to_vec();
    body.extend([0x12, 0xff, 0xff, 0xff, 0x7f]); // raw: a list of 256 MiB
    body.extend([0x12, 0x81, 0x80, 0x80, 0x08]); // an item of 16 MiB + 1
    let mut list = ListStream::<WatchedService>::new(Encoding::Protobuf);
    assert!(matches!(list.push(&body), Err(WireError::TooLong)));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// A hostile or broken API server's bytes: a list with bytes overwritten, cut short, in any
    /// chunking, is read or refused, and never panics the decoder.
    #[test]
    fn any_bytes_in_any_chunking_are_read_or_refused(
        flips in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 0..8),
        protobuf in proptest::prelude::any::<bool>(),
        chunk in 1usize..300,
        cut in proptest::prelude::any::<proptest::sample::Index>(),
    ) {
        let (encoding, mut body) = match protobuf {
            true => (Encoding::Protobuf, protobuf_list(3, "ServiceList")),
            false => (Encoding::Json, json_list(false)),
        };
        for (at, byte) in flips {
            let i = at.index(body.len());
            body[i] = byte;
        }
        let end = cut.index(body.len() + 1);
        let _ = read(encoding, &body[..end], chunk);
    }
}
