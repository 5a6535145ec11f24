//! A broken or hostile API server can neither freeze the agent nor take its memory (root
//! only, each test in a network namespace of its own, against the test API server):
//! - a list that stalls after half its body, paged or streaming, is abandoned after
//!   `--api-timeout` and retried: a change made meanwhile is programmed within seconds, and
//!   `verdict_api_stalls_total` shows the stall;
//! - a watch line of 1 GiB is cut at client-go's 16 MiB frame limit: the agent's peak RSS
//!   stays bounded (measured), it watches again and programs the next change.

use k8s_openapi::api::core::v1::Service;
use std::time::{Duration, Instant};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent;
use verdict_e2e::require_kernel;

/// Short, so that the tests take seconds (the default is a minute).
const API_TIMEOUT: &[&str] = &["--api-timeout", "3s"];

fn start(lab: &ApiLab, tag: &str) -> verdict_e2e::agent_process::AgentProcess {
    let mut flags = vec!["--min-sync-period", "50ms", "--cleanup-leftovers=false"];
    flags.extend_from_slice(API_TIMEOUT);
    lab_agent::start(lab, env!("CARGO_BIN_EXE_verdict"), tag, &flags).unwrap()
}

/// A node and ten Services (172.30.1.1-10, port 80).
fn cluster(lab: &ApiLab) {
    lab.server.apply(node("n1", "192.168.0.2"));
    for i in 1..=10 {
        lab.server.apply(service("ns1", &format!("s{i:02}"), &format!("172.30.1.{i}"), 80));
    }
}

fn programmed(lab: &ApiLab, ip: &str) -> bool {
    lab.table().contains(&format!("{ip} . tcp . 80"))
}

fn stalled_list_is_retried(tag: &str, streaming: bool) {
    let lab = ApiLab::new(tag).unwrap();
    lab.server.set_streaming_lists(streaming);
    cluster(&lab);
    lab.server.stall_next_list::<Service>();
    let started = Instant::now();
    let agent = start(&lab, tag);
    // A change made while the list stalls.
    lab.server.apply(service("ns1", "later", "172.30.2.1", 80));
    agent.wait("every Service and the later one programmed", || {
        programmed(&lab, "172.30.2.1") && (1..=10).all(|i| programmed(&lab, &format!("172.30.1.{i}")))
    });
    let took = started.elapsed();
    let stalls = lab_agent::series(&lab, r#"verdict_api_stalls_total{kind="Service",reason="timeout"}"#);
    eprintln!("{tag}: programmed {took:?} after the start, stalls counted: {stalls:?}");
    assert!(stalls.is_some_and(|n| n >= 1.0), "the stall is not in /metrics: {stalls:?}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let progress = lab_agent::series(&lab, r#"verdict_api_progress_timestamp_seconds{kind="Service"}"#);
    assert!(progress.is_some_and(|t| (now - t).abs() < 30.0), "progress at {progress:?}, now {now}");
    // Later changes keep coming, and healthy watches are not taken for stalled ones.
    lab.server.apply(service("ns1", "later2", "172.30.2.2", 80));
    agent.wait("a change after the retry", || programmed(&lab, "172.30.2.2"));
    std::thread::sleep(Duration::from_secs(4));
    let text = lab_agent::scrape(&lab);
    let stalls: Vec<&str> = text.lines().filter(|l| l.starts_with("verdict_api_stalls_total{")).collect();
    assert_eq!(stalls, [r#"verdict_api_stalls_total{kind="Service",reason="timeout"} 1"#], "{}", agent.log_tail(30));
}

#[test]
fn a_paged_list_that_stalls_half_way_is_retried() {
    require_kernel!();
    stalled_list_is_retried("stall-paged", false);
}

#[test]
fn a_streaming_list_that_stalls_half_way_is_retried() {
    require_kernel!();
    stalled_list_is_retried("stall-stream", true);
}

/// The process's peak resident memory (VmHWM), bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

const MIB: u64 = 1 << 20;

#[test]
fn a_one_gib_watch_line_is_cut_and_the_agent_goes_on() {
    require_kernel!();
    oversized_event_is_cut("long-line", "application/json");
}

/// In protobuf, the frame's length says 1 GiB: the watch is broken off on reading it.
#[test]
fn a_one_gib_protobuf_watch_frame_is_refused_and_the_agent_goes_on() {
    require_kernel!();
    oversized_event_is_cut("long-frame", "application/vnd.kubernetes.protobuf");
}

fn oversized_event_is_cut(tag: &str, content_type: &str) {
    let lab = ApiLab::new(tag).unwrap();
    cluster(&lab);
    lab.server.apply(slice("ns1", "s01", &["10.0.1.1".to_string()], None));
    let mut flags =
        vec!["--min-sync-period", "50ms", "--cleanup-leftovers=false", "--kube-api-content-type", content_type];
    flags.extend_from_slice(API_TIMEOUT);
    let agent = lab_agent::start(&lab, env!("CARGO_BIN_EXE_verdict"), tag, &flags).unwrap();
    let json = content_type == "application/json";
    agent.wait("the Services programmed", || programmed(&lab, "172.30.1.10"));
    let before = peak_rss(agent.pid());

    // The next watch of Services starts with a 1 GiB line: end the watches to get there.
    lab.server.send_oversized_line::<Service>(1 << 30);
    let sent = lab.server.bytes_sent();
    lab.server.drop_watches();
    if json {
        agent.wait("the long line sent", || lab.server.bytes_sent() - sent > 16 * MIB);
    }
    lab.server.apply(service("ns1", "later", "172.30.2.1", 80));
    agent.wait_until("the next change programmed", Duration::from_secs(60), || programmed(&lab, "172.30.2.1")).unwrap();
    let after = peak_rss(agent.pid());
    let sent = lab.server.bytes_sent() - sent;
    eprintln!(
        "peak RSS {} MiB before the line, {} MiB after; {} MiB sent to the agent",
        before / MIB,
        after / MIB,
        sent / MIB
    );
    assert!(after < before + 100 * MIB, "peak RSS went from {} MiB to {} MiB", before / MIB, after / MIB);
    let oversized = lab_agent::series(&lab, r#"verdict_api_stalls_total{kind="Service",reason="oversized"}"#);
    assert!(oversized.is_some_and(|n| n >= 1.0), "the cut line is not in /metrics: {oversized:?}");
}
