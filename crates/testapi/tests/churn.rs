//! Writes racing with disconnects and compactions: whatever happens, a watcher never sees an
//! object go back in time or the same change twice, and converges to the server's state.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{service, service_with_port, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ResourceExt};
use kube::runtime::watcher;
use verdict_testapi::TestApiServer;

fn rv(svc: &Service) -> u64 {
    svc.resource_version().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_converges_under_churn_disconnects_and_compaction() {
    let server = TestApiServer::start().await.unwrap();
    server.set_bookmark_interval(Duration::from_millis(20));
    let config = watcher::Config::default().page_size(3);
    let mut stream = watcher(Api::<Service>::all(server.client()), config).boxed();

    let writer = tokio::spawn({
        let server = server.clone();
        async move {
            for i in 0..400u32 {
                let name = format!("s{}", i % 17);
                match i % 5 {
                    0 | 1 => drop(server.apply(service("default", &name, &[]))),
                    2 => drop(server.apply(service_with_port("default", &name, 1000 + i as i32))),
                    3 => drop(server.delete::<Service>(Some("default"), &name)),
                    _ => match i % 3 {
                        0 => server.drop_watches(),
                        1 => server.break_watches(),
                        _ => server.compact(),
                    },
                }
                if i % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
    });

    // The watcher's view, maintained from its events the way a reflector does.
    let mut view: BTreeMap<String, u64> = BTreeMap::new();
    let mut buffer: BTreeMap<String, u64> = BTreeMap::new();
    let expected = |server: &TestApiServer| -> BTreeMap<String, u64> {
        server.list::<Service>().iter().map(|s| (s.name_any(), rv(s))).collect()
    };
    within("convergence", async {
        loop {
            if writer.is_finished() && view == expected(&server) {
                break;
            }
            let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(50), stream.next()).await else {
                continue; // idle: re-check convergence
            };
            match event {
                Ok(watcher::Event::Init) => buffer.clear(),
                Ok(watcher::Event::InitApply(s)) => drop(buffer.insert(s.name_any(), rv(&s))),
                Ok(watcher::Event::InitDone) => {
                    // A relist may only move objects forward in time.
                    for (name, new) in &buffer {
                        if let Some(old) = view.get(name) {
                            assert!(new >= old, "{name} went back from {old} to {new} on relist");
                        }
                    }
                    view = std::mem::take(&mut buffer);
                }
                Ok(watcher::Event::Apply(s)) => {
                    let old = view.insert(s.name_any(), rv(&s));
                    assert!(
                        old.is_none_or(|old| old < rv(&s)),
                        "{} seen twice or out of order at {}",
                        s.name_any(),
                        rv(&s)
                    );
                }
                Ok(watcher::Event::Delete(s)) => {
                    let old = view.remove(&s.name_any());
                    assert!(old.is_some_and(|old| old < rv(&s)), "unexpected delete of {} at {}", s.name_any(), rv(&s));
                }
                Err(_) => {} // expected around broken connections and 410s
            }
        }
    })
    .await;
    writer.await.unwrap();
    let requests = server.requests();
    let lists = requests.iter().filter(|r| r.is_list_of("/api/v1/services")).count();
    let watches = requests.iter().filter(|r| r.is_watch_of("/api/v1/services")).count();
    eprintln!("churn: {lists} list pages, {watches} watches");
}
