//! Compaction: a watcher that falls out of the history window gets 410 Expired, relists, and
//! its reflector store ends up equal to the server, including deletions it never saw.

mod common;

use std::collections::BTreeMap;

use common::{next, service, service_with_port, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, ResourceExt, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::{reflector, watcher};
use verdict_testapi::TestApiServer;

fn snapshot<'a>(objects: impl IntoIterator<Item = &'a Service>) -> BTreeMap<String, String> {
    objects.into_iter().map(|s| (s.name_any(), s.resource_version().unwrap())).collect()
}

#[tokio::test]
async fn compaction_forces_a_relist_that_converges_the_reflector() {
    let server = TestApiServer::start().await.unwrap();
    server.set_bookmark_interval(std::time::Duration::from_secs(3600));
    for name in ["a", "b", "c"] {
        server.apply(service("default", name, &[]));
    }
    let (reader, writer) = reflector::store::<Service>();
    let mut stream =
        reflector(writer, watcher(Api::<Service>::all(server.client()), watcher::Config::default())).boxed();
    for _ in 0..5 {
        next(&mut stream).await.unwrap(); // Init, InitApply x3, InitDone
    }
    within("the store", reader.wait_until_ready()).await.unwrap();

    // Get the watch open by having it deliver a live event.
    let pending = tokio::spawn({
        let server = server.clone();
        async move {
            within("the watch to open", server.wait_for_watches(1)).await;
            server.apply(service("default", "d", &[]))
        }
    });
    next(&mut stream).await.unwrap();
    let d = within("the writer task", pending).await.unwrap();
    assert_eq!(reader.state().len(), 4);

    // While the watcher is not being polled it cannot reconnect: end its watch, change
    // things, and forget the history it would need to catch up.
    server.drop_watches();
    server.delete::<Service>(Some("default"), "b");
    server.delete::<Service>(Some("default"), "d");
    server.apply(service_with_port("default", "c", 8080));
    server.apply(service("kube-system", "e", &[]));
    server.compact();

    within("the reflector to converge", async {
        let mut saw_gone = false;
        while !saw_gone || snapshot(reader.state().iter().map(|s| &**s)) != snapshot(&server.list::<Service>()) {
            match stream.next().await.expect("the watcher stream ended") {
                Err(watcher::Error::WatchError(status)) if status.code == 410 => saw_gone = true,
                Err(e) => panic!("unexpected watcher error {e}"),
                Ok(_) => {}
            }
        }
    })
    .await;
    let mut names: Vec<String> = reader.state().iter().map(|s| s.name_any()).collect();
    names.sort();
    assert_eq!(names, ["a", "c", "e"]);

    let requests = server.requests();
    let lists: Vec<_> = requests.iter().filter(|r| r.is_list_of("/api/v1/services")).collect();
    assert_eq!(lists.len(), 2, "initial list + relist after 410");
    let watches: Vec<_> = requests.iter().filter(|r| r.is_watch_of("/api/v1/services")).collect();
    assert_eq!(watches[1].param("resourceVersion"), Some(d.to_string()), "tried to resume first");
}

#[tokio::test]
async fn watch_and_exact_list_from_compacted_versions_are_gone() {
    let server = TestApiServer::start().await.unwrap();
    let old = server.apply(service("default", "a", &[]));
    let api = Api::<Service>::all(server.client());

    // Before compaction an exact list at an old RV is served from history.
    server.apply(service("default", "b", &[]));
    let exact = ListParams::default().at(&old.to_string()).matching(VersionMatch::Exact);
    let list = within("list", api.list(&exact)).await.unwrap();
    assert_eq!(list.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(list.metadata.resource_version, Some(old.to_string()));

    server.compact();
    match within("list", api.list(&exact)).await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    // Like the real server, an expired watch is HTTP 200 with a single ERROR event.
    let mut events = within("watch", api.watch(&WatchParams::default(), &old.to_string())).await.unwrap().boxed();
    match next(&mut events).await.unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(status.message.starts_with(&format!("too old resource version: {old} (")), "{}", status.message);
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(within("end of stream", events.next()).await.is_none());

    // The current RV is still fine to watch from, and "any" lists are served.
    let now = server.resource_version();
    let _open = within("watch", api.watch(&WatchParams::default(), &now.to_string())).await.unwrap();
    let any = within("list", api.list(&ListParams::default().match_any())).await.unwrap();
    assert_eq!(any.items.len(), 2);
}
