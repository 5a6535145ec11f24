//! How the agent lists (root only, against the test API server): where the API server refuses
//! streaming lists, it lists as client-go's reflector does, at resourceVersion "0", which the
//! API server answers from its watch cache in one response; so a start costs a handful of
//! requests, not one rate-limited request per page.

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
    agent.wait("every Service programmed", || {
        let table = lab.table();
        (0..n).step_by(97).chain([n - 1]).all(|i| table.contains(&format!("{} . tcp . 80", ip(i))))
    });
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
