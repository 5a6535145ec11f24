//! The controller as it runs in the agent (kube-rs watchers, the sync loop) against the test
//! API server over TCP, programming a namespace's kernel table.

use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, Controller, node, service, slice};
use verdict_e2e::require_kernel;

const SYNC: Duration = Duration::from_secs(10);
const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

fn ips(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A lab with node n1 and `n` Services `svc-i` (172.30.1.i) with one endpoint each, and its
/// controller past the first sync.
fn started(tag: &str, n: usize) -> (ApiLab, Controller) {
    let lab = ApiLab::new(tag).unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    for i in 0..n {
        lab.server.apply(service("ns1", &format!("svc-{i}"), &format!("172.30.1.{i}"), 80));
        lab.server.apply(slice("ns1", &format!("svc-{i}"), &ips(&[&format!("10.0.1.{i}")]), None));
    }
    let c = lab.controller("n1", Duration::from_millis(50)).unwrap();
    let first = c.next(Duration::from_secs(30)).unwrap();
    assert!(first.error.is_none() && first.full, "{first:?}");
    (lab, c)
}

/// The next sync, which must succeed and be partial.
fn next_partial(c: &Controller) -> verdict_controller::sync::SyncReport {
    let r = c.next(SYNC).unwrap();
    assert!(r.error.is_none() && !r.full, "{r:?}");
    r
}

/// Waits until the four watchers (Services, EndpointSlices, Node, ServiceCIDRs) are connected,
/// so that cutting them now makes every one of them resume (after a backoff) from where it was.
fn wait_for_watches(lab: &ApiLab, n: usize) {
    let deadline = std::time::Instant::now() + SYNC;
    while lab.server.open_watches() < n {
        assert!(std::time::Instant::now() < deadline, "only {} watches open", lab.server.open_watches());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn creates_updates_and_deletes_each_reach_the_kernel_in_the_next_sync() {
    require_kernel!();
    let (lab, c) = started("capi", 3);
    assert!(lab.table().contains("172.30.1.0 . tcp . 80"), "{}", lab.table());

    lab.server.apply(service("ns1", "api", "172.30.0.11", 80));
    next_partial(&c);
    assert!(
        lab.table().contains("172.30.0.11 . tcp . 80 comment \"ns1/api:http\" : goto reject-chain"),
        "{}",
        lab.table()
    );

    lab.server.apply(slice("ns1", "api", &ips(&["10.0.9.2"]), None));
    let r = next_partial(&c);
    assert_eq!(r.rendered_ports, 1, "only the changed Service is rendered");
    assert!(lab.table().contains("10.0.9.2 . 8080"), "{}", lab.table());

    lab.server.apply(slice("ns1", "svc-0", &ips(&["10.0.9.3"]), None));
    next_partial(&c);
    let table = lab.table();
    assert!(table.contains("10.0.9.3 . 8080") && !table.contains("10.0.1.0 . 8080"), "{table}");

    lab.server.delete::<k8s_openapi::api::core::v1::Service>(Some("ns1"), "svc-0");
    next_partial(&c);
    assert!(!lab.table().contains("172.30.1.0 "), "{}", lab.table());

    lab.server.delete::<k8s_openapi::api::discovery::v1::EndpointSlice>(Some("ns1"), "api-1");
    next_partial(&c);
    assert!(
        lab.table().contains("172.30.0.11 . tcp . 80 comment \"ns1/api:http\" : goto reject-chain"),
        "{}",
        lab.table()
    );
}

#[test]
fn a_dropped_watch_and_a_410_relist_lose_no_update_and_flush_nothing() {
    require_kernel!();
    let (lab, c) = started("crelist", 40);
    let objects_total = 40 * 4;

    // A watch cut mid-stream: the watcher resumes from its resourceVersion; the change made
    // while it was away arrives, and nothing is listed again.
    lab.server.clear_requests();
    lab.server.break_watches();
    lab.server.apply(slice("ns1", "svc-1", &ips(&["10.0.9.1"]), None));
    let syncs = c.until(SYNC, || lab.table().contains("10.0.9.1 . 8080")).unwrap();
    assert!(syncs.iter().all(|r| r.error.is_none() && r.objects < 10), "{syncs:#?}");
    let relist_count = lab.server.requests().iter().filter(|r| relists(r, SERVICES) || relists(r, SLICES)).count();
    assert_eq!(relist_count, 0, "a resumed watch must not relist: {:#?}", lab.server.requests());

    // Watches cut, changes made, history compacted before the watchers come back (they back
    // off after an error): resuming fails with 410 Gone, the watchers relist, and the
    // difference is programmed as a small partial sync, never a flush. A watcher that
    // reconnects before the compaction resumes normally instead; the round is repeated (with
    // new changes) until a relist has happened.
    let mut relisted = Vec::new();
    for round in 0..5 {
        wait_for_watches(&lab, 4);
        lab.server.clear_requests();
        lab.server.break_watches();
        let (gone, late, moved) =
            (format!("svc-{}", 2 + round), format!("late-{round}"), format!("svc-{}", 10 + round));
        let late_ip = format!("172.30.0.{}", 90 + round);
        let moved_ip = format!("10.0.9.{}", 40 + round);
        lab.server.delete::<k8s_openapi::api::core::v1::Service>(Some("ns1"), &gone);
        lab.server.apply(service("ns1", &late, &late_ip, 80));
        lab.server.apply(slice("ns1", &moved, std::slice::from_ref(&moved_ip), None));
        lab.server.compact();
        let syncs = c
            .until(SYNC, || {
                let t = lab.table();
                t.contains(&format!("{late_ip} . tcp . 80"))
                    && !t.contains(&format!("172.30.1.{} ", 2 + round))
                    && t.contains(&format!("{moved_ip} . 8080"))
            })
            .unwrap();
        for r in &syncs {
            assert!(r.error.is_none() && !r.full && r.objects < objects_total / 4, "a relist must not flush: {r:?}");
        }
        let requests = lab.server.requests();
        relisted = [SERVICES, SLICES].into_iter().filter(|p| requests.iter().any(|r| relists(r, p))).collect();
        if !relisted.is_empty() {
            break;
        }
    }
    assert!(!relisted.is_empty(), "no watcher ever met 410 Gone and relisted in 5 rounds");
    eprintln!("relisted after 410 Gone: {relisted:?}");
    let table = lab.table();
    for i in [0, 1, 20, 39] {
        assert!(table.contains(&format!("172.30.1.{i} . tcp . 80")), "svc-{i} survived the relist:\n{table}");
    }
}

/// Whether `r` lists `path` again: a LIST, or a watch that streams the current objects first
/// (`sendInitialEvents`, how verdict lists where the API server offers it).
fn relists(r: &verdict_testapi::RequestRecord, path: &str) -> bool {
    r.is_list_of(path) || (r.is_watch_of(path) && r.param("sendInitialEvents").as_deref() == Some("true"))
}

#[test]
fn without_streaming_lists_the_watchers_fall_back_to_paged_lists() {
    require_kernel!();
    let lab = ApiLab::new("capi-paged").unwrap();
    lab.server.set_streaming_lists(false);
    lab.server.apply(node("n1", "192.168.0.2"));
    for i in 0..3 {
        lab.server.apply(service("ns1", &format!("svc-{i}"), &format!("172.30.1.{i}"), 80));
        lab.server.apply(slice("ns1", &format!("svc-{i}"), &ips(&[&format!("10.0.1.{i}")]), None));
    }
    let c = lab.controller("n1", Duration::from_millis(50)).unwrap();
    let first = c.next(Duration::from_secs(30)).unwrap();
    assert!(first.error.is_none() && first.full, "{first:?}");
    assert!(lab.table().contains("172.30.1.2 . tcp . 80"), "{}", lab.table());
    let requests = lab.server.requests();
    for path in [SERVICES, SLICES] {
        assert!(requests.iter().any(|r| r.is_list_of(path)), "no paged list of {path}: {requests:#?}");
    }
    // Changes still arrive over the watches that follow the lists.
    lab.server.apply(service("ns1", "late", "172.30.0.77", 80));
    next_partial(&c);
    assert!(lab.table().contains("172.30.0.77 . tcp . 80"), "{}", lab.table());
}

#[test]
fn watchers_wait_for_a_sync_loop_that_falls_behind_and_lose_nothing() {
    use verdict_controller::event::{Event, Kind, Object, QUEUE};
    require_kernel!();
    let lab = ApiLab::new("cqueue").unwrap();
    let n = 2 * QUEUE + 100;
    lab.server.apply(node("n1", "192.168.0.2"));
    for i in 0..n {
        let ip = format!("172.30.{}.{}", i / 250, i % 250 + 1);
        lab.server.apply(service("ns1", &format!("svc-{i}"), &ip, 80));
        lab.server.apply(slice("ns1", &format!("svc-{i}"), &ips(&["10.0.1.1"]), None));
    }
    let (tx, rx) = verdict_controller::event::queue();
    let server = lab.server.clone();
    let client = lab.rt.block_on(lab.rt.spawn(async move { server.client() })).unwrap();
    let watch = lab.rt.spawn(async move { verdict_controller::watch::watch(client, "n1", tx).await });
    // Nothing is read for a while: the watchers fill the queue and must wait, not drop.
    std::thread::sleep(Duration::from_secs(1));
    let (mut services, mut slices) = (0, 0);
    let mut done = std::collections::HashSet::new();
    while !(done.contains(&Kind::Service) && done.contains(&Kind::EndpointSlice)) {
        match rx.recv_timeout(SYNC).expect("the watchers stalled") {
            Event::Apply(Object::Service(_)) => services += 1,
            Event::Apply(Object::EndpointSlice(_)) => slices += 1,
            Event::InitDone(kind) => {
                done.insert(kind);
            }
            _ => {}
        }
    }
    watch.abort();
    assert_eq!((services, slices), (n, n), "every listed object arrives once");
}
