//! The steady-traffic harness: traffic held through a change of the node's proxy (kube-proxy to
//! verdict and back), recording every disruption.
//!
//! Started in a client's network namespace against Service addresses (a ClusterIP:port, a
//! NodeIP:nodePort, ...), it holds until stopped:
//! - new TCP connections at a fixed rate (20/s by default, spread over the targets), each:
//!   connect, one request, the answer (which pod), close, within a timeout (1 s); every
//!   failure is recorded with its kind and time;
//! - long-lived TCP connections (20), each sending a request every 100 ms and reading the
//!   answer; a stall (no answer within the timeout), a reset, a close and a change of the
//!   answering pod are recorded;
//! - UDP flows (3) from fixed source ports, a datagram every 100 ms; the gaps between answers
//!   and every change of the answering pod are recorded.
//!
//! The TCP targets must lead to the echo servers' session port
//! ([`crate::topology::SESSION_PORT`]), which keeps connections open and answers every line
//! (on their other ports the server answers once and closes: new connections and UDP flows
//! work there too, long-lived connections do not). [`Steady::stop`] returns a
//! [`Summary`]; [`Summary::disruptions`] is empty when nothing was disrupted.
//!
//! ```no_run
//! # use verdict_e2e::steady::{Config, Steady, Target};
//! # fn demo(client_ns: &str) -> anyhow::Result<()> {
//! let targets = vec![Target::new("10.96.0.10:80".parse()?), Target::new("192.168.50.11:30080".parse()?)];
//! let steady = Steady::start(Some(client_ns), Config::new(targets.clone(), targets))?;
//! // ... switch the node's proxy ...
//! steady.mark("switched");
//! let summary = steady.stop();
//! assert_eq!(summary.disruptions(), Vec::<String>::new(), "{summary:#?}");
//! # Ok(()) }
//! ```
//!
//! `verdict-steady` runs the same harness as a program (in the namespace `ip netns exec`
//! puts it in, or in a VM), printing the summary as JSON.

pub mod summary;
mod workers;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use summary::{Attempt, ConnLog, Mark, UdpLog};
pub use summary::{FailureKind, Summary};

/// Where traffic goes, and which pods may answer there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The address.
    pub addr: SocketAddr,
    /// The pods that may answer; empty: any echo server.
    #[serde(default)]
    pub pods: Vec<String>,
}

impl Target {
    /// Any echo server may answer at `addr`.
    pub fn new(addr: SocketAddr) -> Target {
        Target { addr, pods: Vec::new() }
    }

    /// Only these pods may answer; another's answer is a wrong answer.
    pub fn answered_by(mut self, pods: &[&str]) -> Target {
        self.pods = pods.iter().map(|p| p.to_string()).collect();
        self
    }

    fn accepts(&self, pod: &str) -> bool {
        self.pods.is_empty() || self.pods.iter().any(|p| p == pod)
    }
}

/// What traffic to hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// TCP targets: new connections and long-lived ones go round them in turn.
    pub tcp: Vec<Target>,
    /// UDP targets: flows go round them in turn.
    pub udp: Vec<Target>,
    /// New connections per second, over all TCP targets.
    pub new_per_second: f64,
    /// Long-lived connections.
    pub long_lived: usize,
    /// UDP flows.
    pub udp_flows: usize,
    /// Between two requests of a long-lived connection or a UDP flow.
    pub interval: Duration,
    /// How long a new connection may take (connect and answer); how long a long-lived
    /// connection or a UDP flow may wait for an answer before it counts as stalled.
    pub timeout: Duration,
    /// UDP flow `i` sends from this port + `i`.
    pub udp_source_port: u16,
}

impl Config {
    /// The defaults: 20 new connections a second, 20 long-lived connections, 3 UDP flows from
    /// ports 47000-47002, a request every 100 ms, a timeout of 1 s.
    pub fn new(tcp: Vec<Target>, udp: Vec<Target>) -> Config {
        Config {
            tcp,
            udp,
            new_per_second: 20.0,
            long_lived: 20,
            udp_flows: 3,
            interval: Duration::from_millis(100),
            timeout: Duration::from_secs(1),
            udp_source_port: 47000,
        }
    }

    fn check(&self) -> Result<()> {
        if self.tcp.is_empty() && (self.new_per_second > 0.0 || self.long_lived > 0) {
            bail!("new or long-lived TCP connections need a TCP target");
        }
        if self.udp.is_empty() && self.udp_flows > 0 {
            bail!("UDP flows need a UDP target");
        }
        if !(self.new_per_second >= 0.0 && self.new_per_second <= 1000.0) {
            bail!("the rate of new connections must be 0 to 1000 a second");
        }
        if self.interval.is_zero() || self.timeout.is_zero() {
            bail!("the interval and the timeout must be more than 0");
        }
        if usize::from(self.udp_source_port) + self.udp_flows > 65536 {
            bail!("the UDP flows' source ports run past 65535");
        }
        Ok(())
    }
}

/// The records the workers write, shared with the harness.
#[derive(Default)]
struct Records {
    attempts: Mutex<Vec<Attempt>>,
    conns: Vec<Mutex<ConnLog>>,
    flows: Vec<Mutex<UdpLog>>,
    marks: Mutex<Vec<Mark>>,
}

/// What the workers share: when the run started, whether to stop, where to record.
struct Shared {
    start: Instant,
    stop: AtomicBool,
    records: Records,
    config: Config,
}

impl Shared {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A running harness; [`Steady::stop`] ends it (dropping it stops the workers too).
pub struct Steady {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<Result<()>>>,
}

impl Steady {
    /// Starts the traffic from the namespace named `netns` (the current one when `None`), and
    /// returns once every long-lived connection and UDP flow has had its first answer, or
    /// failed, or 5 timeouts have passed (what did not answer by then is in the summary).
    pub fn start(netns: Option<&str>, config: Config) -> Result<Steady> {
        config.check()?;
        let records = Records {
            conns: (0..config.long_lived)
                .map(|i| {
                    let target = config.tcp[i % config.tcp.len()].addr.to_string();
                    Mutex::new(ConnLog { target, ..ConnLog::default() })
                })
                .collect(),
            flows: (0..config.udp_flows)
                .map(|i| {
                    let target = config.udp[i % config.udp.len()].addr.to_string();
                    Mutex::new(UdpLog { target, source_port: config.udp_source_port + i as u16, ..UdpLog::default() })
                })
                .collect(),
            ..Records::default()
        };
        // Each worker enters the namespace by itself; one that cannot fails at once, so the
        // namespace is tried first.
        match crate::netns::spawn_in(netns, || ()).join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.context("the steady-traffic harness cannot enter its namespace")),
            Err(_) => bail!("the steady-traffic harness's namespace probe panicked"),
        }
        let shared = Arc::new(Shared { start: Instant::now(), stop: AtomicBool::new(false), records, config });
        let workers = workers::spawn_all(netns, &shared);
        let steady = Steady { shared, workers };
        steady.wait_first_answers();
        Ok(steady)
    }

    fn wait_first_answers(&self) {
        let deadline = Instant::now() + self.shared.config.timeout * 5;
        let records = &self.shared.records;
        let settled = || {
            records.conns.iter().all(|c| {
                let c = c.lock().unwrap_or_else(|e| e.into_inner());
                c.open_failed.is_some() || c.ended.is_some() || c.flow.answered > 0
            }) && records.flows.iter().all(|f| {
                let f = f.lock().unwrap_or_else(|e| e.into_inner());
                f.open_failed.is_some() || f.flow.answered > 0
            })
        };
        while !settled() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Since the start.
    pub fn elapsed(&self) -> Duration {
        self.shared.start.elapsed()
    }

    /// Records a named moment, to read the events against.
    pub fn mark(&self, label: &str) {
        let at_s = self.shared.now();
        self.shared.records.marks.lock().unwrap_or_else(|e| e.into_inner()).push(Mark { label: label.into(), at_s });
    }

    /// How many new connections failed so far (to wait for, or to check, mid-run).
    pub fn failed_so_far(&self) -> usize {
        let attempts = self.shared.records.attempts.lock().unwrap_or_else(|e| e.into_inner());
        attempts.iter().filter(|a| a.outcome.is_err()).count()
    }

    /// Stops the traffic, waits for the workers (at most a timeout and a bit), and summarizes.
    pub fn stop(mut self) -> Summary {
        self.shared.stop.store(true, Ordering::Relaxed);
        let end = self.shared.now();
        for w in self.workers.drain(..) {
            if let Ok(Err(e)) = w.join() {
                eprintln!("steady: a worker failed: {e:#}");
            }
        }
        let r = &self.shared.records;
        summary::summarize(
            end,
            take(&r.marks),
            take(&r.attempts),
            r.conns.iter().map(take).collect(),
            r.flows.iter().map(take).collect(),
        )
    }
}

/// What a mutex holds, taken out (a poisoned one's too: a worker's panic loses no records).
fn take<T: Default>(m: &Mutex<T>) -> T {
    std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()))
}

impl Drop for Steady {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}
