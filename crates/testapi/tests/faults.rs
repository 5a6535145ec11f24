//! The faults a test arms to play a broken or hostile API server, against the real kube
//! client: a list that stops half-way and holds its connection, a streaming list that stops
//! after half its objects, and a watch line of megabytes; each hits one request, and the
//! next one is whole.

mod common;

use std::time::Duration;

use common::{next, service, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use verdict_testapi::TestApiServer;

async fn server_with(services: usize) -> TestApiServer {
    let server = TestApiServer::start().await.unwrap();
    for i in 0..services {
        server.apply(service("default", &format!("s{i:02}"), &[]));
    }
    server
}

#[tokio::test]
async fn a_stalled_list_sends_half_its_body_and_holds_the_connection() {
    let server = server_with(10).await;
    let api = Api::<Service>::all(server.client());
    server.stall_next_list::<Service>();
    let before = server.bytes_sent();
    let stalled = tokio::time::timeout(Duration::from_secs(1), api.list(&ListParams::default())).await;
    assert!(stalled.is_err(), "the stalled list ended: {stalled:?}");
    let whole = within("the next list", api.list(&ListParams::default())).await.unwrap();
    assert_eq!(whole.items.len(), 10);
    // The stalled one sent about half of what the whole one did.
    let sent = server.bytes_sent() - before;
    let whole_len = serde_json::to_vec(&serde_json::json!({"items": whole.items})).unwrap().len() as u64;
    assert!(sent > whole_len + whole_len / 4 && sent < 2 * whole_len, "sent {sent}, a whole list ~{whole_len}");
}

#[tokio::test]
async fn a_stalled_streaming_list_sends_half_its_objects() {
    let server = server_with(10).await;
    server.stall_next_list::<Service>();
    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher(Api::<Service>::all(server.client()), config).boxed();
    let mut applied = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
            Err(_) => break, // stalled
            Ok(Some(Ok(watcher::Event::InitApply(_)))) => applied += 1,
            Ok(Some(Ok(watcher::Event::Init))) => {}
            Ok(other) => panic!("a stalled streaming list went on: {other:?}"),
        }
    }
    assert_eq!(applied, 5);
    // The test ending the watch ends the stall; the relist is whole.
    server.drop_watches();
    let mut applied = 0;
    loop {
        match next(&mut stream).await.unwrap() {
            watcher::Event::InitApply(_) => applied += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(applied, 10);
}

#[tokio::test]
async fn an_oversized_line_comes_first_then_the_watch_goes_on() {
    let server = server_with(1).await;
    let api = Api::<Service>::all(server.client());
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    const LINE: u64 = 3 << 20;
    server.send_oversized_line::<Service>(LINE);
    let before = server.bytes_sent();
    let mut events = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    within("the watch to open", server.wait_for_watches(1)).await;
    server.apply(service("default", "later", &[]));
    // kube's client skips a blank line (after holding all of it); the event behind it comes.
    match next(&mut events).await.unwrap() {
        WatchEvent::Added(s) => assert_eq!(s.metadata.name.as_deref(), Some("later")),
        other => panic!("expected the new Service, got {other:?}"),
    }
    assert!(server.bytes_sent() - before > LINE, "sent {}", server.bytes_sent() - before);
    // Only that watch: the next one has no such line.
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let before = server.bytes_sent();
    let mut events = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    within("the watch to open", server.wait_for_watches(2)).await;
    server.apply(service("default", "later2", &[]));
    next(&mut events).await.unwrap();
    assert!(server.bytes_sent() - before < 1 << 20);
}
