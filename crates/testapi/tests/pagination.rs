//! `limit`/`continue` pagination: every page comes from one snapshot, and kube's watcher
//! pages its initial list.

mod common;

use std::collections::BTreeSet;

use common::{describe, next_event, service, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, ResourceExt};
use kube::runtime::watcher;
use verdict_testapi::TestApiServer;

#[tokio::test]
async fn watcher_initial_list_pages_deliver_every_object_once_from_one_snapshot() {
    let server = TestApiServer::start().await.unwrap();
    server.set_bookmark_interval(std::time::Duration::from_secs(3600));
    let all: BTreeSet<String> = (0..23).map(|i| format!("svc-{i:02}")).collect();
    for name in &all {
        server.apply(service("default", name, &[]));
    }
    let config = watcher::Config::default().page_size(4);
    let mut stream = watcher(Api::<Service>::all(server.client()), config).boxed();
    let mut errors = Vec::new();
    assert_eq!(describe(&next_event(&mut stream, &mut errors).await), "Init");

    // The first page is fetched; change objects on later pages before they are fetched.
    let first = next_event(&mut stream, &mut errors).await;
    assert!(matches!(first, watcher::Event::InitApply(_)));
    let late = server.apply(service("default", "svc-99", &[]));
    let gone = server.delete::<Service>(Some("default"), "svc-20").unwrap();

    let mut listed = vec![match first {
        watcher::Event::InitApply(s) => s.name_any(),
        _ => unreachable!(),
    }];
    loop {
        match next_event(&mut stream, &mut errors).await {
            watcher::Event::InitApply(s) => {
                listed.push(s.name_any());
                assert!(listed.len() <= all.len(), "objects listed more than once: {listed:?}");
            }
            watcher::Event::InitDone => break,
            other => panic!("unexpected {}", describe(&other)),
        }
    }
    // Exactly the snapshot at the first page: svc-20 still there, svc-99 not yet.
    assert_eq!(listed.len(), all.len(), "{listed:?}");
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), all);

    // The changes made meanwhile arrive through the watch, from the snapshot's RV.
    assert_eq!(describe(&next_event(&mut stream, &mut errors).await), format!("Apply(svc-99@{late})"));
    assert_eq!(describe(&next_event(&mut stream, &mut errors).await), format!("Delete(svc-20@{gone})"));
    assert!(errors.is_empty(), "{errors:?}");

    let lists: Vec<_> = server.requests().into_iter().filter(|r| r.is_list_of("/api/v1/services")).collect();
    assert_eq!(lists.len(), 6, "23 objects in pages of 4");
    assert!(lists.iter().all(|r| r.param("limit").as_deref() == Some("4")));
    assert!(lists[0].param("continue").is_none() && lists[1..].iter().all(|r| r.param("continue").is_some()));
}

#[tokio::test]
async fn continue_tokens_page_through_and_expire_with_compaction() {
    let server = TestApiServer::start().await.unwrap();
    for i in 0..5 {
        server.apply(service("default", &format!("s{i}"), &[]));
    }
    let api = Api::<Service>::all(server.client());

    let page1 = within("list", api.list(&ListParams::default().limit(2))).await.unwrap();
    assert_eq!(page1.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["s0", "s1"]);
    assert_eq!(page1.metadata.remaining_item_count, Some(3));
    let token = page1.metadata.continue_.clone().unwrap();
    let page2 = within("list", api.list(&ListParams::default().limit(2).continue_token(&token))).await.unwrap();
    assert_eq!(page2.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["s2", "s3"]);
    assert_eq!(page2.metadata.resource_version, page1.metadata.resource_version);
    let token2 = page2.metadata.continue_.clone().unwrap();
    let page3 = within("list", api.list(&ListParams::default().limit(2).continue_token(&token2))).await.unwrap();
    assert_eq!(page3.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["s4"]);
    assert_eq!(page3.metadata.continue_, None);

    // Without a limit everything comes in one page.
    let whole = within("list", api.list(&ListParams::default())).await.unwrap();
    assert_eq!((whole.items.len(), whole.metadata.continue_), (5, None));

    // A token whose snapshot was compacted away is 410, so the client restarts the list.
    server.apply(service("default", "s5", &[]));
    server.compact();
    match within("list", api.list(&ListParams::default().limit(2).continue_token(&token))).await {
        Err(kube::Error::Api(status)) => assert_eq!((status.code, status.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    match within("list", api.list(&ListParams::default().continue_token("not-a-token"))).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 400),
        other => panic!("expected 400, got {other:?}"),
    }
}

/// As the real API server: a list at resourceVersion "0" (or "not older than" one) is served
/// from the watch cache, whole, whatever the `limit`; a consistent list (no resourceVersion)
/// is served from etcd and paged.
#[tokio::test]
async fn lists_from_the_watch_cache_come_whole_and_consistent_lists_page() {
    let server = TestApiServer::start().await.unwrap();
    for i in 0..7 {
        server.apply(service("default", &format!("s{i}"), &[]));
    }
    let api = Api::<Service>::all(server.client());
    // As client-go's reflector asks (kube's `ListParams` drops resourceVersion "0" when a
    // limit is set, so the request is built by hand).
    let client = server.client();
    let raw = |query: &str| {
        let request = http::Request::get(format!("/api/v1/services?{query}")).body(Vec::new()).unwrap();
        client.request::<kube::core::ObjectList<Service>>(request)
    };
    let cached = within("list", raw("limit=2&resourceVersion=0")).await.unwrap();
    assert_eq!((cached.items.len(), cached.metadata.continue_), (7, None));
    let not_older = within("list", raw("limit=2&resourceVersion=1&resourceVersionMatch=NotOlderThan")).await.unwrap();
    assert_eq!((not_older.items.len(), not_older.metadata.continue_), (7, None));

    let consistent = within("list", api.list(&ListParams::default().limit(2))).await.unwrap();
    assert_eq!(consistent.items.len(), 2);
    assert!(consistent.metadata.continue_.is_some());
    // An exact resourceVersion with a limit is served from etcd too (paged).
    let rv = consistent.metadata.resource_version.clone().unwrap();
    let exact = within("list", api.list(&ListParams::default().limit(2).at(&rv))).await.unwrap();
    assert_eq!(exact.items.len(), 2);

    // kube's watcher with "any" semantics, as client-go's reflector lists: one request.
    server.clear_requests();
    let mut config = watcher::Config::default().any_semantic();
    config.page_size = None;
    let mut stream = watcher(api.clone(), config).boxed();
    let mut errors = Vec::new();
    let mut listed = 0;
    loop {
        match next_event(&mut stream, &mut errors).await {
            watcher::Event::InitApply(_) => listed += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(listed, 7);
    let lists: Vec<_> = server.requests().into_iter().filter(|r| r.is_list_of("/api/v1/services")).collect();
    assert_eq!(lists.len(), 1, "{lists:#?}");
    assert_eq!(lists[0].param("resourceVersion").as_deref(), Some("0"));
}
