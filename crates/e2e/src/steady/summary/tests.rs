use super::*;
use std::io::{Error, ErrorKind};

/// A flow answered by `pod` every `step` seconds from `from` to `to` (exclusive).
fn steady(log: &mut FlowLog, pod: &str, from: f64, to: f64, step: f64) {
    let mut t = from;
    while t < to - 1e-9 {
        log.sent(t);
        log.waiting(t + step / 2.0, 1.0);
        log.answered(t + 0.001, pod);
        t += step;
    }
}

#[test]
fn a_healthy_flow_has_no_stall_no_change_and_gaps_of_one_interval() {
    let mut log = FlowLog::default();
    steady(&mut log, "pod-a", 0.0, 5.0, 0.1);
    log.finish(5.0);
    assert_eq!((log.sent, log.answered), (50, 50));
    assert_eq!(log.pod.as_deref(), Some("pod-a"));
    assert!(log.stalls.is_empty() && log.pod_changes.is_empty(), "{log:?}");
    assert!((log.longest_gap_s - 0.1).abs() < 0.01, "{}", log.longest_gap_s);
}

#[test]
fn a_stall_begins_at_the_unanswered_request_once_the_timeout_passes_and_ends_at_the_answer() {
    let mut log = FlowLog::default();
    steady(&mut log, "pod-a", 0.0, 1.0, 0.1);
    log.sent(1.0);
    log.waiting(1.5, 1.0);
    assert!(log.stalls.is_empty(), "half the timeout is no stall");
    log.waiting(2.0, 1.0);
    log.waiting(2.5, 1.0);
    assert_eq!(log.stalls, [Stall { from_s: 1.0, to_s: None }], "one stall, opened once");
    assert!((log.longest_stall(3.0) - 2.0).abs() < 1e-9, "an open stall lasts until the end");
    log.answered(2.6, "pod-a");
    assert_eq!(log.stalls, [Stall { from_s: 1.0, to_s: Some(2.6) }]);
    assert!((log.longest_stall(9.0) - 1.6).abs() < 1e-9);
    // The last answer before the stall was at 0.901.
    assert!((log.longest_gap_s - (2.6 - 0.901)).abs() < 1e-9, "{}", log.longest_gap_s);
    // A second stall is a second entry.
    log.sent(3.0);
    log.waiting(4.1, 1.0);
    assert_eq!(log.stalls.len(), 2);
}

#[test]
fn a_udp_flow_whose_answers_stop_has_the_gap_until_the_end() {
    let mut log = FlowLog::default();
    steady(&mut log, "pod-b", 0.0, 1.0, 0.1);
    let mut t = 1.0;
    while t < 3.0 {
        log.sent(t);
        log.waiting(t, 1.0);
        t += 0.1;
    }
    log.finish(3.0);
    assert!((log.longest_gap_s - (3.0 - 0.901)).abs() < 1e-9, "{}", log.longest_gap_s);
    assert_eq!(log.stalls.len(), 1);
    assert!((log.stalls[0].from_s - 1.0).abs() < 1e-9, "from the first unanswered datagram: {:?}", log.stalls);
}

#[test]
fn every_change_of_the_answering_pod_is_recorded_with_its_time() {
    let mut log = FlowLog::default();
    for (t, pod) in [(0.0, "a"), (0.1, "a"), (0.2, "b"), (0.3, "b"), (0.4, "a")] {
        log.sent(t);
        log.answered(t, pod);
    }
    assert_eq!(log.pod.as_deref(), Some("a"), "the first pod");
    assert_eq!(
        log.pod_changes,
        [
            PodChange { at_s: 0.2, from: "a".into(), to: "b".into() },
            PodChange { at_s: 0.4, from: "b".into(), to: "a".into() }
        ]
    );
}

#[test]
fn socket_errors_map_to_failure_kinds() {
    let cases = [
        (ErrorKind::ConnectionRefused, FailureKind::Refused),
        (ErrorKind::ConnectionReset, FailureKind::Reset),
        (ErrorKind::BrokenPipe, FailureKind::Reset),
        (ErrorKind::TimedOut, FailureKind::Timeout),
        (ErrorKind::WouldBlock, FailureKind::Timeout),
        (ErrorKind::HostUnreachable, FailureKind::Unreachable),
        (ErrorKind::PermissionDenied, FailureKind::Other),
    ];
    for (kind, want) in cases {
        assert_eq!(FailureKind::of(&Error::from(kind)), want, "{kind:?}");
    }
    assert_eq!(FailureKind::of(&Error::from_raw_os_error(113)), FailureKind::Unreachable);
    let json = serde_json::to_string(&FailureKind::WrongAnswer).unwrap();
    assert_eq!(json, format!("\"{}\"", FailureKind::WrongAnswer.name()));
}

fn attempt(at: f64, outcome: Result<&str, FailureKind>) -> Attempt {
    Attempt {
        at_s: at,
        target: "10.96.0.10:80".into(),
        outcome: outcome.map(str::to_string).map_err(|k| (k, k.name().to_string())),
    }
}

fn healthy_conn(pod: &str) -> ConnLog {
    let mut c = ConnLog { target: "10.96.0.10:80".into(), ..ConnLog::default() };
    steady(&mut c.flow, pod, 0.0, 5.0, 0.1);
    c
}

fn healthy_udp(port: u16, pod: &str) -> UdpLog {
    let mut u = UdpLog { target: "10.96.0.10:80".into(), source_port: port, ..UdpLog::default() };
    steady(&mut u.flow, pod, 0.0, 5.0, 0.1);
    u
}

#[test]
fn a_clean_run_has_no_disruption() {
    let attempts = (0..100).map(|i| attempt(f64::from(i) * 0.05, Ok(if i % 2 == 0 { "a" } else { "b" }))).collect();
    let conns = vec![healthy_conn("a"), healthy_conn("b")];
    let flows = vec![healthy_udp(47000, "a"), healthy_udp(47001, "b")];
    let s = summarize(5.0, vec![], attempts, conns, flows);
    assert_eq!(s.disruptions(), Vec::<String>::new(), "{s:#?}");
    assert_eq!((s.new_connections.attempted, s.new_connections.answered), (100, 100));
    assert_eq!(s.new_connections.answers_by_pod, BTreeMap::from([("a".into(), 50), ("b".into(), 50)]));
    assert_eq!((s.long_lived.opened, s.long_lived.alive_at_end), (2, 2));
    assert!(s.udp.longest_gap_s < 0.11, "{}", s.udp.longest_gap_s);
    let back: Summary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back.disruptions(), s.disruptions());
    assert_eq!(back.new_connections, s.new_connections);
}

#[test]
fn every_kind_of_disruption_is_counted_and_named() {
    let attempts = vec![
        attempt(2.0, Err(FailureKind::Timeout)),
        attempt(0.5, Ok("a")),
        attempt(1.5, Err(FailureKind::Refused)),
        attempt(2.5, Err(FailureKind::Timeout)),
    ];
    let mut stalled = healthy_conn("a");
    stalled.flow.sent(5.0);
    stalled.flow.waiting(6.5, 1.0);
    let mut reset = healthy_conn("b");
    reset.ended = Some(ConnEnd { at_s: 3.0, kind: FailureKind::Reset, detail: "reset".into() });
    let mut closed = healthy_conn("b");
    closed.ended = Some(ConnEnd { at_s: 4.0, kind: FailureKind::Closed, detail: "eof".into() });
    let unopened = ConnLog { open_failed: Some((FailureKind::Timeout, "timed out".into())), ..ConnLog::default() };
    let mut moved = healthy_udp(47000, "a");
    moved.flow.sent(5.0);
    moved.flow.answered(5.01, "b");
    let mut silent = UdpLog { source_port: 47001, ..UdpLog::default() };
    silent.flow.sent(0.0);
    silent.flow.waiting(1.5, 1.0);
    let s = summarize(
        7.0,
        vec![Mark { label: "switch".into(), at_s: 1.8 }],
        attempts,
        vec![stalled, reset, closed, unopened],
        vec![moved, silent],
    );
    let n = &s.new_connections;
    assert_eq!((n.attempted, n.answered, n.failed), (4, 1, 3));
    assert_eq!(n.failed_by_kind, BTreeMap::from([("refused".into(), 1), ("timeout".into(), 2)]));
    let times: Vec<f64> = n.failures.iter().map(|f| f.at_s).collect();
    assert_eq!(times, [1.5, 2.0, 2.5], "failures in time order");
    assert_eq!(s.failures_between(Some("switch"), None).len(), 2, "the two after the mark");
    assert_eq!(s.failures_between(None, Some("switch")).len(), 1);
    let l = &s.long_lived;
    assert_eq!((l.connections, l.opened, l.alive_at_end, l.reset, l.closed, l.stalled), (4, 3, 1, 1, 1, 1));
    assert!((l.longest_stall_s - 2.0).abs() < 1e-9, "the open stall lasts until the end: {}", l.longest_stall_s);
    let u = &s.udp;
    assert_eq!((u.flows, u.never_answered, u.endpoint_changes), (2, 1, 1));
    let lines = s.disruptions();
    assert_eq!(lines.len(), 7, "{lines:#?}");
    for needle in
        ["3 of 4 new connections failed", "1 of 4 long-lived", "2 of 3 long-lived", "1 long-lived connections stalled"]
    {
        assert!(lines.iter().any(|l| l.contains(needle)), "{needle:?} not in {lines:#?}");
    }
    for needle in ["changed pods 1 times", "1 of 2 UDP flows were never answered", "1 UDP flows stalled"] {
        assert!(lines.iter().any(|l| l.contains(needle)), "{needle:?} not in {lines:#?}");
    }
}
