//! What the steady-traffic harness records, and the summary it makes of it: pure functions of
//! the records (times in seconds since the start), so that what counts as a failure, a stall, a
//! gap or an endpoint change is decided in one place and unit-tested.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a new connection failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// Connection refused (a TCP reset to the SYN, or an ICMP port-unreachable).
    Refused,
    /// Reset after the connection was made.
    Reset,
    /// No connection, or no answer, within the timeout.
    Timeout,
    /// Network or host unreachable (an ICMP error).
    Unreachable,
    /// Closed by the other side before it answered.
    Closed,
    /// An answer that is not an echo server's, or from a pod the target does not expect.
    WrongAnswer,
    /// Any other error.
    Other,
}

impl FailureKind {
    /// The kind of a socket error.
    pub fn of(e: &std::io::Error) -> FailureKind {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => FailureKind::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => FailureKind::Reset,
            K::TimedOut | K::WouldBlock => FailureKind::Timeout,
            K::NetworkUnreachable | K::HostUnreachable => FailureKind::Unreachable,
            _ => match e.raw_os_error() {
                Some(101) | Some(113) => FailureKind::Unreachable,
                _ => FailureKind::Other,
            },
        }
    }

    /// The kebab-case name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Refused => "refused",
            FailureKind::Reset => "reset",
            FailureKind::Timeout => "timeout",
            FailureKind::Unreachable => "unreachable",
            FailureKind::Closed => "closed",
            FailureKind::WrongAnswer => "wrong-answer",
            FailureKind::Other => "other",
        }
    }
}

/// One new connection's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// When it started.
    pub at_s: f64,
    /// The target, `ip:port`.
    pub target: String,
    /// The pod that answered, or why it failed.
    pub outcome: Result<String, (FailureKind, String)>,
}

/// A period without an answer: from the request left unanswered to the answer that ended it
/// (`to_s` is `None` when none came before the end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// When the unanswered request was sent.
    pub from_s: f64,
    /// When the next answer came.
    pub to_s: Option<f64>,
}

/// The pod answering a flow changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodChange {
    /// When the new pod first answered.
    pub at_s: f64,
    /// The pod that answered before.
    pub from: String,
    /// The pod that answered now.
    pub to: String,
}

/// One flow's exchanges (a long-lived TCP connection's requests, or a UDP flow's datagrams):
/// who answered, the stalls, the gaps. Fed by the worker as things happen.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowLog {
    /// Requests sent.
    pub sent: u64,
    /// Answers received.
    pub answered: u64,
    /// The first pod that answered.
    pub pod: Option<String>,
    /// Every change of the answering pod.
    pub pod_changes: Vec<PodChange>,
    /// Periods of more than the timeout without an answer.
    pub stalls: Vec<Stall>,
    /// The longest time without an answer: between two answers, from the first request to the
    /// first answer, and from the last answer to the end.
    pub longest_gap_s: f64,
    /// Errors seen while waiting (e.g. ICMP refusals of datagrams), by kind.
    pub errors: BTreeMap<String, u64>,
    /// The first request not answered yet.
    #[serde(skip)]
    pending_since: Option<f64>,
    /// The last answer, or the first request before any answer.
    #[serde(skip)]
    gap_since: Option<f64>,
    #[serde(skip)]
    last_pod: Option<String>,
}

impl FlowLog {
    /// A request went out at `at`.
    pub fn sent(&mut self, at: f64) {
        self.sent += 1;
        self.pending_since.get_or_insert(at);
        self.gap_since.get_or_insert(at);
    }

    /// `pod` answered at `at`.
    pub fn answered(&mut self, at: f64, pod: &str) {
        self.answered += 1;
        if let Some(since) = self.gap_since {
            self.longest_gap_s = self.longest_gap_s.max(at - since);
        }
        self.gap_since = Some(at);
        self.pending_since = None;
        if let Some(stall) = self.stalls.last_mut().filter(|s| s.to_s.is_none()) {
            stall.to_s = Some(at);
        }
        match &self.last_pod {
            None => self.pod = Some(pod.to_string()),
            Some(last) if last != pod => {
                self.pod_changes.push(PodChange { at_s: at, from: last.clone(), to: pod.to_string() })
            }
            Some(_) => {}
        }
        self.last_pod = Some(pod.to_string());
    }

    /// Still waiting at `at`: a stall begins once the oldest unanswered request is `timeout`
    /// old.
    pub fn waiting(&mut self, at: f64, timeout: f64) {
        let Some(since) = self.pending_since else { return };
        let open = self.stalls.last().is_some_and(|s| s.to_s.is_none());
        if !open && at - since >= timeout {
            self.stalls.push(Stall { from_s: since, to_s: None });
        }
    }

    /// An error while waiting (counted; the flow goes on).
    pub fn error(&mut self, kind: FailureKind) {
        *self.errors.entry(kind.name().to_string()).or_default() += 1;
    }

    /// The flow ends at `at` (the harness stops, or the connection is gone): the time since the
    /// last answer counts as a gap.
    pub fn finish(&mut self, at: f64) {
        if let Some(since) = self.gap_since {
            self.longest_gap_s = self.longest_gap_s.max(at - since);
        }
        self.gap_since = None;
    }

    /// The longest stall: an open one lasts until `end`.
    pub fn longest_stall(&self, end: f64) -> f64 {
        self.stalls.iter().map(|s| s.to_s.unwrap_or(end) - s.from_s).fold(0.0, f64::max)
    }
}

/// How a long-lived connection ended, if it did before the harness stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnEnd {
    /// When.
    pub at_s: f64,
    /// Reset, closed, or another error.
    pub kind: FailureKind,
    /// The error's text.
    pub detail: String,
}

/// One long-lived TCP connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnLog {
    /// The target, `ip:port`.
    pub target: String,
    /// Why it could not be opened, if it could not.
    pub open_failed: Option<(FailureKind, String)>,
    /// Its exchanges.
    pub flow: FlowLog,
    /// How it ended before the harness stopped, if it did.
    pub ended: Option<ConnEnd>,
    /// Answers that were not an echo server's or came from a pod the target does not expect.
    pub wrong_answers: u64,
}

/// One UDP flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpLog {
    /// The target, `ip:port`.
    pub target: String,
    /// The fixed source port.
    pub source_port: u16,
    /// Why the socket could not be set up, if it could not.
    pub open_failed: Option<String>,
    /// Its exchanges.
    pub flow: FlowLog,
    /// Answers that were not an echo server's or came from a pod the target does not expect.
    pub wrong_answers: u64,
}

/// A named moment (e.g. "verdict started"), to read the events against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// What happened.
    pub label: String,
    /// When.
    pub at_s: f64,
}

/// New connections.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NewConnections {
    /// Started.
    pub attempted: u64,
    /// Answered by an expected pod.
    pub answered: u64,
    /// Failed.
    pub failed: u64,
    /// Failures by kind.
    pub failed_by_kind: BTreeMap<String, u64>,
    /// Every failure, in time order.
    pub failures: Vec<Attempt>,
    /// Answers by pod.
    pub answers_by_pod: BTreeMap<String, u64>,
}

/// Long-lived connections.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LongLived {
    /// Connections wanted.
    pub connections: usize,
    /// Opened.
    pub opened: usize,
    /// Open at the end, never reset or closed.
    pub alive_at_end: usize,
    /// Stalled at least once (no answer within the timeout).
    pub stalled: usize,
    /// Reset.
    pub reset: usize,
    /// Closed by the other side, or ended by another error.
    pub closed: usize,
    /// Changes of the answering pod, over all connections.
    pub endpoint_changes: usize,
    /// Answers not from an echo server or from an unexpected pod, over all connections.
    pub wrong_answers: u64,
    /// The longest stall of any connection.
    pub longest_stall_s: f64,
    /// Each connection.
    pub each: Vec<ConnLog>,
}

/// UDP flows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Udp {
    /// Flows wanted.
    pub flows: usize,
    /// Flows that never got an answer.
    pub never_answered: usize,
    /// Stalled at least once.
    pub stalled: usize,
    /// The longest gap between answers of any flow.
    pub longest_gap_s: f64,
    /// Changes of the answering pod, over all flows.
    pub endpoint_changes: usize,
    /// Answers not from an echo server or from an unexpected pod, over all flows.
    pub wrong_answers: u64,
    /// Each flow.
    pub each: Vec<UdpLog>,
}

/// Everything the harness saw, JSON-serialisable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// How long it ran.
    pub seconds: f64,
    /// The marks set while it ran.
    pub marks: Vec<Mark>,
    /// New connections.
    pub new_connections: NewConnections,
    /// Long-lived connections.
    pub long_lived: LongLived,
    /// UDP flows.
    pub udp: Udp,
}

/// The summary of the records of a run that ended at `end`.
pub fn summarize(
    end: f64,
    marks: Vec<Mark>,
    attempts: Vec<Attempt>,
    conns: Vec<ConnLog>,
    flows: Vec<UdpLog>,
) -> Summary {
    let mut new = NewConnections { attempted: attempts.len() as u64, ..NewConnections::default() };
    let mut attempts = attempts;
    attempts.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    for a in attempts {
        match &a.outcome {
            Ok(pod) => {
                new.answered += 1;
                *new.answers_by_pod.entry(pod.clone()).or_default() += 1;
            }
            Err((kind, _)) => {
                new.failed += 1;
                *new.failed_by_kind.entry(kind.name().to_string()).or_default() += 1;
                new.failures.push(a);
            }
        }
    }
    let mut long = LongLived { connections: conns.len(), ..LongLived::default() };
    for mut c in conns {
        c.flow.finish(c.ended.as_ref().map_or(end, |e| e.at_s));
        if c.open_failed.is_none() {
            long.opened += 1;
        }
        match c.ended.as_ref().map(|e| e.kind) {
            None if c.open_failed.is_none() => long.alive_at_end += 1,
            None => {}
            Some(FailureKind::Reset) => long.reset += 1,
            Some(_) => long.closed += 1,
        }
        long.stalled += usize::from(!c.flow.stalls.is_empty());
        long.endpoint_changes += c.flow.pod_changes.len();
        long.wrong_answers += c.wrong_answers;
        long.longest_stall_s = long.longest_stall_s.max(c.flow.longest_stall(end));
        long.each.push(c);
    }
    let mut udp = Udp { flows: flows.len(), ..Udp::default() };
    for mut f in flows {
        f.flow.finish(end);
        udp.never_answered += usize::from(f.flow.answered == 0);
        udp.stalled += usize::from(!f.flow.stalls.is_empty());
        udp.longest_gap_s = udp.longest_gap_s.max(f.flow.longest_gap_s);
        udp.endpoint_changes += f.flow.pod_changes.len();
        udp.wrong_answers += f.wrong_answers;
        udp.each.push(f);
    }
    Summary { seconds: end, marks, new_connections: new, long_lived: long, udp }
}

impl Summary {
    /// Everything that disrupted the traffic, one line each; empty when nothing did: no failed
    /// new connection, every long-lived connection open, answering and never stalled, every UDP
    /// flow answered without a stall, and no flow's pod changed.
    pub fn disruptions(&self) -> Vec<String> {
        let mut out = Vec::new();
        let n = &self.new_connections;
        if n.failed > 0 {
            let first = n.failures.first().map_or(0.0, |f| f.at_s);
            let last = n.failures.last().map_or(0.0, |f| f.at_s);
            out.push(format!(
                "{} of {} new connections failed ({:?}), from {first:.2} s to {last:.2} s",
                n.failed, n.attempted, n.failed_by_kind
            ));
        }
        let l = &self.long_lived;
        if l.opened < l.connections {
            out.push(format!(
                "{} of {} long-lived connections could not be opened",
                l.connections - l.opened,
                l.connections
            ));
        }
        if l.alive_at_end < l.opened {
            out.push(format!(
                "{} of {} long-lived connections ended early ({} reset, {} closed)",
                l.opened - l.alive_at_end,
                l.opened,
                l.reset,
                l.closed
            ));
        }
        if l.stalled > 0 {
            out.push(format!("{} long-lived connections stalled (longest {:.2} s)", l.stalled, l.longest_stall_s));
        }
        if l.endpoint_changes > 0 {
            out.push(format!("long-lived connections changed pods {} times", l.endpoint_changes));
        }
        if l.wrong_answers > 0 {
            out.push(format!("long-lived connections got {} wrong answers", l.wrong_answers));
        }
        let u = &self.udp;
        if u.never_answered > 0 {
            out.push(format!("{} of {} UDP flows were never answered", u.never_answered, u.flows));
        }
        if u.stalled > 0 {
            out.push(format!("{} UDP flows stalled (longest gap {:.2} s)", u.stalled, u.longest_gap_s));
        }
        if u.endpoint_changes > 0 {
            out.push(format!("UDP flows changed pods {} times", u.endpoint_changes));
        }
        if u.wrong_answers > 0 {
            out.push(format!("UDP flows got {} wrong answers", u.wrong_answers));
        }
        out
    }

    /// The failures of new connections between two marks (or from/to the ends).
    pub fn failures_between(&self, from: Option<&str>, to: Option<&str>) -> Vec<&Attempt> {
        let at = |label: Option<&str>, default: f64| {
            label.and_then(|l| self.marks.iter().find(|m| m.label == l)).map_or(default, |m| m.at_s)
        };
        let (from, to) = (at(from, f64::NEG_INFINITY), at(to, f64::INFINITY));
        self.new_connections.failures.iter().filter(|f| f.at_s >= from && f.at_s < to).collect()
    }
}

#[cfg(test)]
mod tests;
