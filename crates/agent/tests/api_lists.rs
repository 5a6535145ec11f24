//! How the agent lists and watches (root only, against the test API server):
//! - where the API server refuses streaming lists, it lists as client-go's reflector does, at
//!   resourceVersion "0", which the API server answers from its watch cache in one response;
//!   so a start costs a handful of requests, not one rate-limited request per page;
//! - it asks for protobuf as kube-proxy does (`--kube-api-content-type`), and programs the
//!   same table from protobuf as from JSON, for a fraction of the bytes.

use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent;
use verdict_e2e::require_kernel;
use verdict_testapi::Verb;

const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

#[test]
fn without_streaming_lists_a_start_lists_each_kind_once_from_the_watch_cache() {
    require_kernel!();
    let lab = ApiLab::new("lists-rv0").unwrap();
    lab.server.set_streaming_lists(false);
    lab.server.apply(node("n1", "192.168.0.2"));
    // Three pages and more of 500, had the lists been paged.
    let n = 1600;
    let ip = |i: usize| format!("172.30.{}.{}", i / 250, i % 250 + 1);
    for i in 0..n {
        lab.server.apply(service("ns1", &format!("s{i}"), &ip(i), 80));
        lab.server.apply(slice("ns1", &format!("s{i}"), &["10.0.1.1".to_string()], None));
    }
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "lists-rv0",
        &["--min-sync-period", "50ms", "--cleanup-leftovers=false"],
    )
    .unwrap();
    agent.wait("every Service programmed", || programmed(&lab, n));
    let requests = lab.server.requests();
    for path in [SERVICES, SLICES] {
        let lists: Vec<_> = requests.iter().filter(|r| r.is_list_of(path)).collect();
        assert_eq!(lists.len(), 1, "one list of {path}: {lists:#?}");
        assert_eq!(lists[0].param("resourceVersion").as_deref(), Some("0"), "{lists:#?}");
    }
    let api_requests = requests.iter().filter(|r| r.verb != Verb::Other).count();
    eprintln!("{n} Services programmed with {api_requests} API requests ({} in all)", requests.len());
    assert!(api_requests <= 16, "{requests:#?}");
}

fn ip(i: usize) -> String {
    format!("172.30.{}.{}", i / 250, i % 250 + 1)
}

fn programmed(lab: &ApiLab, n: usize) -> bool {
    let table = lab.table();
    (0..n).step_by(97).chain([n - 1]).all(|i| table.contains(&format!("{} . tcp . 80", ip(i))))
}

/// One start with `flags` against `n` Services with 3 endpoints each: the table it programmed,
/// and the response bytes and requests it cost the API server.
fn start(tag: &str, n: usize, streaming: bool, flags: &[&str]) -> (String, u64, usize) {
    let lab = ApiLab::new(tag).unwrap();
    lab.server.set_streaming_lists(streaming);
    lab.server.apply(node("n1", "192.168.0.2"));
    for i in 0..n {
        let pods: Vec<String> = (0..3).map(|k| format!("10.1.{}.{}", i / 80, (i % 80) * 3 + k + 1)).collect();
        lab.server.apply(service("ns1", &format!("s{i}"), &ip(i), 80));
        lab.server.apply(slice("ns1", &format!("s{i}"), &pods, None));
    }
    let before = lab.server.bytes_sent();
    let mut all = vec!["--min-sync-period", "50ms", "--cleanup-leftovers=false"];
    all.extend_from_slice(flags);
    let agent = lab_agent::start(&lab, env!("CARGO_BIN_EXE_verdict"), tag, &all).unwrap();
    agent.wait("every Service programmed", || programmed(&lab, n));
    // The last Service's endpoints too, and one change over the watch.
    agent.wait("endpoints programmed", || {
        lab.table().contains(&format!("10.1.{}.{} . 8080", (n - 1) / 80, ((n - 1) % 80) * 3 + 3))
    });
    lab.server.apply(service("ns1", "late", "172.30.200.1", 80));
    agent.wait("a change over the watch", || lab.table().contains("172.30.200.1 . tcp . 80"));
    lab.server.delete::<k8s_openapi::api::core::v1::Service>(Some("ns1"), "late");
    agent.wait("a deletion over the watch", || !lab.table().contains("172.30.200.1 . tcp . 80"));
    let bytes = lab.server.bytes_sent() - before;
    let requests = lab.server.requests().iter().filter(|r| r.verb != Verb::Other).count();
    let table = lab.table();
    agent.terminate(Duration::from_secs(20)).unwrap();
    (table, bytes, requests)
}

/// Sets of the table: every element line, sorted (a table listing's order is not a contract).
fn elements(table: &str) -> Vec<String> {
    let mut lines: Vec<String> = table.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn protobuf_and_json_program_the_same_table_and_protobuf_costs_far_fewer_bytes() {
    require_kernel!();
    let n = 400;
    for streaming in [true, false] {
        let mode = if streaming { "streaming" } else { "rv0" };
        let (json_table, json_bytes, json_requests) =
            start(&format!("ct-json-{mode}"), n, streaming, &["--kube-api-content-type", "application/json"]);
        let (pb_table, pb_bytes, pb_requests) = start(&format!("ct-pb-{mode}"), n, streaming, &[]);
        eprintln!(
            "{mode}: JSON {json_bytes} bytes in {json_requests} requests; protobuf {pb_bytes} bytes in {pb_requests} requests ({:.0}%)",
            100.0 * pb_bytes as f64 / json_bytes as f64
        );
        assert!(elements(&json_table).len() > n, "{json_table}");
        assert_eq!(elements(&pb_table), elements(&json_table));
        assert!(pb_bytes * 10 < json_bytes * 6, "protobuf {pb_bytes} bytes, JSON {json_bytes}");
    }
}
