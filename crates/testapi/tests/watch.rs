//! WATCH through kube's `watcher`: ordering and resourceVersions, bookmarks, re-watching
//! after dropped or broken connections, selector transitions, timeouts, streaming lists.
//!
//! The watcher streams are polled directly by the test (not spawned), so "while the watch is
//! down" is deterministic: a watcher that is not polled cannot reconnect.

mod common;

use std::time::Duration;

use common::{describe, next, next_event, service, service_with_port, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use verdict_testapi::{TestApiServer, Verb};

/// Bookmarks off unless a test wants them, so event sequences are exact.
fn quiet(server: &TestApiServer) {
    server.set_bookmark_interval(Duration::from_secs(3600));
}

#[tokio::test]
async fn watcher_sees_changes_in_order_with_resource_versions() {
    let server = TestApiServer::start().await.unwrap();
    quiet(&server);
    let rv_old = server.apply(service("default", "old", &[]));
    let mut stream = watcher(Api::<Service>::all(server.client()), watcher::Config::default()).boxed();
    let mut errors = Vec::new();

    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_event(&mut stream, &mut errors).await));
    }
    assert_eq!(seen, ["Init", format!("InitApply(old@{rv_old})").as_str(), "InitDone"]);

    // The watch opens when the watcher is next polled; make the changes after that.
    let pending = tokio::spawn({
        let server = server.clone();
        async move {
            within("the watch to open", server.wait_for_watches(1)).await;
            let a = server.apply(service("default", "web", &[]));
            let m = server.apply(service_with_port("default", "web", 8080));
            let d = server.delete::<Service>(Some("default"), "web").unwrap();
            (a, m, d)
        }
    });
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_event(&mut stream, &mut errors).await));
    }
    let (a, m, d) = within("the writer task", pending).await.unwrap();
    assert!(a < m && m < d);
    assert_eq!(seen, [format!("Apply(web@{a})"), format!("Apply(web@{m})"), format!("Delete(web@{d})")]);
    assert!(errors.is_empty(), "{errors:?}");

    // The watch resumed exactly from the list's resourceVersion, with the watcher's defaults.
    let watch = server.requests().into_iter().find(|r| r.verb == Verb::Watch).unwrap();
    assert_eq!(watch.param("resourceVersion"), Some(rv_old.to_string()));
    assert_eq!(watch.param("allowWatchBookmarks").as_deref(), Some("true"));
    assert_eq!(watch.param("timeoutSeconds").as_deref(), Some("290"));
}

#[tokio::test]
async fn bookmarks_arrive_only_when_allowed() {
    let server = TestApiServer::start().await.unwrap();
    server.set_bookmark_interval(Duration::from_millis(50));
    let start = server.apply(service("default", "a", &[]));
    let api = Api::<Service>::all(server.client());

    let mut with = within("watch", api.watch(&WatchParams::default(), &start.to_string())).await.unwrap().boxed();
    let later = server.apply(service("default", "b", &[]));
    match next(&mut with).await.unwrap() {
        WatchEvent::Added(svc) => assert_eq!(svc.metadata.resource_version, Some(later.to_string())),
        other => panic!("expected ADDED, got {other:?}"),
    }
    match next(&mut with).await.unwrap() {
        WatchEvent::Bookmark(bm) => {
            assert_eq!(bm.metadata.resource_version, later.to_string());
            assert_eq!((bm.types.api_version.as_str(), bm.types.kind.as_str()), ("v1", "Service"));
        }
        other => panic!("expected BOOKMARK, got {other:?}"),
    }

    let mut without = within("watch", api.watch(&WatchParams::default().disable_bookmarks(), &later.to_string()))
        .await
        .unwrap()
        .boxed();
    let quiet = tokio::time::timeout(Duration::from_millis(300), without.next()).await;
    assert!(quiet.is_err(), "no event expected without bookmarks, got {quiet:?}");
}

#[tokio::test]
async fn bookmarks_let_a_filtered_watcher_resume_after_compaction() {
    let server = TestApiServer::start().await.unwrap();
    server.set_bookmark_interval(Duration::from_millis(50));
    let config = watcher::Config::default().labels("app=web");
    let mut stream = watcher(Api::<Service>::all(server.client()), config).boxed();
    let mut errors = Vec::new();
    for _ in 0..2 {
        next_event(&mut stream, &mut errors).await; // Init, InitDone
    }
    // Changes the watcher cannot see; only bookmarks move its resourceVersion forward.
    let pending = tokio::spawn({
        let server = server.clone();
        async move {
            within("the watch to open", server.wait_for_watches(1)).await;
            for i in 0..5 {
                server.apply(service("default", &format!("db{i}"), &[("app", "db")]));
            }
            tokio::time::sleep(Duration::from_secs(1)).await; // ~20 bookmarks, even on a busy machine
            server.compact();
            server.drop_watches();
            within("the re-watch", server.wait_for_watches(1)).await;
            server.apply(service("default", "web", &[("app", "web")]))
        }
    });
    let event = next_event(&mut stream, &mut errors).await;
    assert!(errors.is_empty(), "the re-watch from the bookmark must not hit 410: {errors:?}");
    let web_rv = within("the writer task", pending).await.unwrap();
    assert_eq!(describe(&event), format!("Apply(web@{web_rv})"));
    let lists = server.requests().iter().filter(|r| r.is_list_of("/api/v1/services")).count();
    assert_eq!(lists, 1, "no relist needed");
}

/// Drop (clean end) or break (transport error) the watch, change things while the watcher is
/// not reconnected, and check it resumes from its last resourceVersion without relisting,
/// missing or duplicating anything.
#[tokio::test]
async fn rewatch_after_dropped_or_broken_watches_loses_nothing() {
    for broken in [false, true] {
        let server = TestApiServer::start().await.unwrap();
        quiet(&server);
        server.apply(service("default", "a", &[]));
        let mut stream = watcher(Api::<Service>::all(server.client()), watcher::Config::default()).boxed();
        let mut errors = Vec::new();
        for _ in 0..3 {
            next_event(&mut stream, &mut errors).await; // Init, InitApply(a), InitDone
        }
        // Have the watch open and a live event delivered on it.
        let pending = tokio::spawn({
            let server = server.clone();
            async move {
                within("the watch to open", server.wait_for_watches(1)).await;
                server.apply(service("default", "b", &[]))
            }
        });
        let event = next_event(&mut stream, &mut errors).await;
        let b = within("the writer task", pending).await.unwrap();
        assert_eq!(describe(&event), format!("Apply(b@{b})"));

        if broken {
            server.break_watches();
        } else {
            server.drop_watches();
        }
        assert_eq!(server.open_watches(), 0);
        let c = server.apply(service("default", "c", &[]));
        let m = server.apply(service_with_port("default", "a", 81));
        let d = server.delete::<Service>(Some("default"), "b").unwrap();

        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(describe(&next_event(&mut stream, &mut errors).await));
        }
        assert_eq!(
            seen,
            [format!("Apply(c@{c})"), format!("Apply(a@{m})"), format!("Delete(b@{d})")],
            "broken={broken}"
        );
        if !broken {
            assert!(errors.is_empty(), "{errors:?}");
        }

        let requests = server.requests();
        let watches: Vec<_> = requests.iter().filter(|r| r.is_watch_of("/api/v1/services")).collect();
        assert_eq!(watches.len(), 2);
        assert_eq!(watches[1].param("resourceVersion"), Some(b.to_string()), "resumed from the last seen RV");
        assert_eq!(requests.iter().filter(|r| r.is_list_of("/api/v1/services")).count(), 1, "no relist");
        // Nothing more is pending: the next event is the next change.
        let e = server.apply(service("default", "e", &[]));
        assert_eq!(describe(&next_event(&mut stream, &mut errors).await), format!("Apply(e@{e})"));
    }
}

#[tokio::test]
async fn objects_entering_and_leaving_the_selector_are_added_and_deleted() {
    let server = TestApiServer::start().await.unwrap();
    quiet(&server);
    let proxied = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
    let mut stream =
        watcher(Api::<Service>::namespaced(server.client(), "default"), watcher::Config::default().labels(proxied))
            .boxed();
    let mut errors = Vec::new();
    for _ in 0..2 {
        next_event(&mut stream, &mut errors).await;
    }
    let pending = tokio::spawn({
        let server = server.clone();
        async move {
            within("the watch to open", server.wait_for_watches(1)).await;
            vec![
                server.apply(service("default", "x", &[])),
                server.apply(service("other", "elsewhere", &[])), // other namespace: invisible
                server.apply(service("default", "x", &[("service.kubernetes.io/headless", "")])),
                server.apply(service("default", "x", &[("service.kubernetes.io/headless", ""), ("v", "2")])),
                server.apply(service("default", "x", &[])),
            ]
        }
    });
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_event(&mut stream, &mut errors).await));
    }
    let rvs = within("the writer task", pending).await.unwrap();
    assert_eq!(seen, [format!("Apply(x@{})", rvs[0]), format!("Delete(x@{})", rvs[2]), format!("Apply(x@{})", rvs[4])]);
}

#[tokio::test]
async fn watch_timeout_ends_the_stream_and_the_watcher_resumes() {
    let server = TestApiServer::start().await.unwrap();
    quiet(&server);
    let mut stream = watcher(Api::<Service>::all(server.client()), watcher::Config::default().timeout(1)).boxed();
    let mut errors = Vec::new();
    for _ in 0..2 {
        next_event(&mut stream, &mut errors).await;
    }
    let pending = tokio::spawn({
        let server = server.clone();
        async move {
            within("the watch to open", server.wait_for_watches(1)).await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            server.apply(service("default", "late", &[]))
        }
    });
    let event = next_event(&mut stream, &mut errors).await;
    let late = within("the writer task", pending).await.unwrap();
    assert_eq!(describe(&event), format!("Apply(late@{late})"));
    let watches = server.requests().iter().filter(|r| r.verb == Verb::Watch).count();
    assert!(watches >= 2, "the 1 s timeout should have forced a re-watch, saw {watches} watches");
}

#[tokio::test]
async fn streaming_lists_and_metadata_watches() {
    let server = TestApiServer::start().await.unwrap();
    quiet(&server);
    let a = server.apply(service("default", "a", &[]));
    let b = server.apply(service("default", "b", &[]));

    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher(Api::<Service>::all(server.client()), config).boxed();
    let mut errors = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(describe(&next_event(&mut stream, &mut errors).await));
    }
    assert_eq!(seen, ["Init".to_string(), format!("InitApply(a@{a})"), format!("InitApply(b@{b})"), "InitDone".into()]);
    let first = &server.requests()[0];
    assert_eq!(first.param("sendInitialEvents").as_deref(), Some("true"));
    assert!(server.requests().iter().all(|r| r.verb != Verb::List), "a streaming list does not LIST");
    let c = server.apply(service("default", "c", &[]));
    assert_eq!(describe(&next_event(&mut stream, &mut errors).await), format!("Apply(c@{c})"));

    // `Api<PartialObjectMeta<K>>` asks for PartialObjectMetadata in the Accept header.
    let meta_api = Api::<PartialObjectMeta<Service>>::all(server.client());
    let mut meta = watcher(meta_api, watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(describe(&next_event(&mut meta, &mut errors).await));
    }
    assert_eq!(seen[1..4], [format!("InitApply(a@{a})"), format!("InitApply(b@{b})"), format!("InitApply(c@{c})")]);
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test]
async fn raw_watches_from_zero_and_from_history() {
    let server = TestApiServer::start().await.unwrap();
    let a = server.apply(service("default", "a", &[]));
    let a2 = server.apply(service_with_port("default", "a", 81));
    let b = server.apply(service("other", "b", &[]));
    let api = Api::<Service>::all(server.client());
    let params = WatchParams::default().disable_bookmarks();
    let show = |e: WatchEvent<Service>| match e {
        WatchEvent::Added(s) => format!("ADDED {}@{}", s.metadata.name.unwrap(), s.metadata.resource_version.unwrap()),
        WatchEvent::Modified(s) => {
            format!("MODIFIED {}@{}", s.metadata.name.unwrap(), s.metadata.resource_version.unwrap())
        }
        other => format!("{other:?}"),
    };

    // "0" means "start at any version": the current state as synthetic ADDED events first.
    let mut from_zero = within("watch", api.watch(&params, "0")).await.unwrap().boxed();
    assert_eq!(show(next(&mut from_zero).await.unwrap()), format!("ADDED a@{a2}"));
    assert_eq!(show(next(&mut from_zero).await.unwrap()), format!("ADDED b@{b}"));

    // A concrete RV replays exactly the later history, then goes live.
    let mut from_a = within("watch", api.watch(&params, &a.to_string())).await.unwrap().boxed();
    assert_eq!(show(next(&mut from_a).await.unwrap()), format!("MODIFIED a@{a2}"));
    assert_eq!(show(next(&mut from_a).await.unwrap()), format!("ADDED b@{b}"));
    let c = server.apply(service("default", "c", &[]));
    assert_eq!(show(next(&mut from_a).await.unwrap()), format!("ADDED c@{c}"));
    assert_eq!(show(next(&mut from_zero).await.unwrap()), format!("ADDED c@{c}"));
}
