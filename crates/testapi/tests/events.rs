//! Events: kube-runtime's `Recorder` (events.k8s.io/v1: POST, then merge PATCH with a series
//! for repeats), core/v1 events, and the write verbs' status codes.

mod common;

use common::{service, within};
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Resource};
use kube::runtime::events::{Event as RecorderEvent, EventType, Recorder, Reporter};
use verdict_testapi::{TestApiServer, Verb};

#[tokio::test]
async fn recorder_events_are_created_then_patched_with_a_series() {
    let server = TestApiServer::start().await.unwrap();
    server.apply(service("default", "web", &[]));
    let svc = server.get::<Service>(Some("default"), "web").unwrap();
    let reference = svc.object_ref(&());

    let reporter = Reporter { controller: "verdict".into(), instance: Some("node-1".into()) };
    let recorder = Recorder::new(server.client(), reporter);
    let event = || RecorderEvent {
        type_: EventType::Warning,
        reason: "NoEndpoints".into(),
        note: Some("service has no ready endpoints".into()),
        action: "Sync".into(),
        secondary: None,
    };
    within("publish", recorder.publish(&event(), &reference)).await.unwrap();

    let events = server.events();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["apiVersion"], "events.k8s.io/v1");
    assert_eq!(e["reason"], "NoEndpoints");
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["regarding"]["name"], "web");
    assert_eq!(e["regarding"]["uid"], svc.metadata.uid.clone().unwrap().as_str());
    assert_eq!(e["reportingController"], "verdict");
    assert_eq!(e["metadata"]["namespace"], "default");

    // The same event again is a PATCH of the stored one, carrying a series count.
    within("publish", recorder.publish(&event(), &reference)).await.unwrap();
    within("publish", recorder.publish(&event(), &reference)).await.unwrap();
    let events = server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["series"]["count"], 3);
    assert_eq!(events[0]["note"], "service has no ready endpoints");

    let verbs: Vec<(Verb, String)> =
        server.requests().into_iter().filter(|r| r.path.contains("events")).map(|r| (r.verb, r.path)).collect();
    let name = events[0]["metadata"]["name"].as_str().unwrap();
    let one = format!("/apis/events.k8s.io/v1/namespaces/default/events/{name}");
    assert_eq!(
        verbs,
        [
            (Verb::Create, "/apis/events.k8s.io/v1/namespaces/default/events".to_string()),
            (Verb::Patch, one.clone()),
            (Verb::Patch, one),
        ]
    );

    // Readable through the API as well.
    let stored = within("get", Api::<Event>::namespaced(server.client(), "default").get(name)).await.unwrap();
    assert_eq!(stored.series.unwrap().count, 3);
}

#[tokio::test]
async fn write_verbs_answer_like_the_api_server() {
    let server = TestApiServer::start().await.unwrap();
    let events = Api::<CoreEvent>::namespaced(server.client(), "default");
    let event = CoreEvent {
        metadata: ObjectMeta { generate_name: Some("web.".into()), ..Default::default() },
        involved_object: ObjectReference {
            kind: Some("Service".into()),
            name: Some("web".into()),
            ..Default::default()
        },
        reason: Some("Synced".into()),
        ..Default::default()
    };
    let created = within("create", events.create(&PostParams::default(), &event)).await.unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("web.") && name.len() == "web.".len() + 5, "{name}");
    assert_eq!(server.events().len(), 1);
    assert_eq!(server.requests().last().unwrap().verb, Verb::Create);

    // Creating it again conflicts.
    let mut again = created.clone();
    again.metadata.resource_version = None;
    match within("create", events.create(&PostParams::default(), &again)).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("expected 409, got {other:?}"),
    }
    // Replacing with a stale resourceVersion conflicts; with the current one it works.
    let mut update = created.clone();
    update.message = Some("first".into());
    let updated = within("replace", events.replace(&name, &PostParams::default(), &update)).await.unwrap();
    assert_ne!(updated.metadata.resource_version, created.metadata.resource_version);
    match within("replace", events.replace(&name, &PostParams::default(), &update)).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("expected 409, got {other:?}"),
    }
    // Patching a missing object is 404; merge patches merge.
    let patch = serde_json::json!({"message": "patched", "count": 2});
    match within("patch", events.patch("missing", &PatchParams::default(), &Patch::Merge(&patch))).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }
    let patched = within("patch", events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))).await.unwrap();
    assert_eq!(
        (patched.message.as_deref(), patched.count, patched.reason.as_deref()),
        (Some("patched"), Some(2), Some("Synced"))
    );
    // Server-side apply creates.
    let apply = serde_json::json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "applied"}, "reason": "X",
        "involvedObject": {}});
    let applied =
        within("apply", events.patch("applied", &PatchParams::apply("verdict"), &Patch::Apply(&apply))).await.unwrap();
    assert_eq!(applied.reason.as_deref(), Some("X"));

    within("delete", events.delete(&name, &DeleteParams::default())).await.unwrap();
    match within("delete", events.delete(&name, &DeleteParams::default())).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }
    assert_eq!(server.events().len(), 1);
}
