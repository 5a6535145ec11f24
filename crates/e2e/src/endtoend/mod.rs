//! The end-to-end benchmark: the real `verdict run` binary against the test API server holding
//! N Services, in a fresh network namespace, timed from process start to the committed full
//! sync, then stopped with SIGTERM and started again over the table it left (a warm restart).
//! Memory comes from `/proc`, the API server's cost from its request log and byte counter.

pub mod agent;
pub mod plot;

use crate::apilab::{self, ApiLab};
use crate::synth;
use agent::Memory;
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;
use verdict_testapi::Verb;

/// The node the agent runs as.
pub const NODE: &str = "bench";

/// A workload: `services` ClusterIP Services with one TCP port, `endpoints` ready endpoints
/// each in one EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Services.
    pub services: usize,
    /// Endpoints per Service.
    pub endpoints: usize,
}

impl std::str::FromStr for Point {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Point> {
        let (n, e) = s.split_once('x').unwrap_or((s, "10"));
        Ok(Point { services: n.trim().parse().context("services")?, endpoints: e.trim().parse().context("endpoints")? })
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} x {}", self.services, self.endpoints)
    }
}

/// One start of the agent.
#[derive(Clone, Debug, Default)]
pub struct Start {
    /// Process start to the committed full sync that holds every Service, in seconds.
    pub programmed_s: f64,
    /// That full sync's own duration (ms).
    pub full_sync_ms: f64,
    /// Kernel objects it wrote.
    pub objects: u64,
    /// Transactions it committed, and the longest in the kernel (ms), when the binary says.
    pub transactions: Option<(u64, f64)>,
    /// That sync's commit phase (ms): encoding and the kernel.
    pub commit_ms: f64,
    /// Peak RSS up to a few seconds after it (MiB).
    pub peak_rss_mib: f64,
    /// RSS 3 s after the sync (MiB): what was freed may not be handed back yet.
    pub early_rss_mib: f64,
    /// RSS once settled (MiB): after the settling time the benchmark was given (the allocator
    /// hands freed memory back to the kernel over seconds, not at once).
    pub settled_rss_mib: f64,
    /// LIST requests the start cost the API server.
    pub lists: usize,
    /// WATCH requests.
    pub watches: usize,
    /// Response bytes the API server sent.
    pub bytes: u64,
    /// The table state saved at the stop that followed: bytes and milliseconds.
    pub saved_state: Option<(u64, f64)>,
    /// The agent's heap just after its first full sync, as its allocator counts it:
    /// (allocated, resident) MiB. RSS is this plus the binary, stacks and freed pages.
    pub heap_mib: Option<(u64, u64)>,
}

/// Both starts at one point.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The workload.
    pub point: Point,
    /// Into an empty namespace.
    pub cold: Start,
    /// Over the table the first run left.
    pub warm: Start,
}

/// When the first RSS reading is taken after the first full sync.
const EARLY: Duration = Duration::from_secs(3);

/// Loads `point` into a test API server in a fresh namespace and measures a cold start and a
/// warm restart of `verdict`, started with `extra` arguments, each given `settle` after its
/// first full sync before its settled RSS is read.
pub fn measure(verdict: &Path, workdir: &Path, point: Point, extra: &[&str], settle: Duration) -> Result<Outcome> {
    let lab = ApiLab::new("e2ebench")?;
    load(&lab, point);
    let kubeconfig = workdir.join(format!("kubeconfig-{}", lab.ns.name()));
    lab.server.write_kubeconfig(&kubeconfig)?;
    let state = workdir.join(format!("state-{}", lab.ns.name()));
    let state_s = state.display().to_string();
    // An older binary (a baseline) may not have the flag.
    let mut args = if supports(verdict, "--state-dir") { vec!["--state-dir", state_s.as_str()] } else { vec![] };
    args.extend_from_slice(extra);
    let cold = start(&lab, verdict, &kubeconfig, point, &args, settle);
    let warm = cold.is_ok().then(|| start(&lab, verdict, &kubeconfig, point, &args, settle));
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_dir_all(&state);
    let (cold, warm) = (cold?, warm.expect("started after a cold start")?);
    Ok(Outcome { point, cold, warm })
}

/// Whether `verdict run` has `flag`.
fn supports(verdict: &Path, flag: &str) -> bool {
    std::process::Command::new(verdict)
        .args(["run", "--help"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
}

/// Puts `point`'s Services, EndpointSlices and the node into the lab's server, then forgets
/// the write history (an API server's watch cache holds the objects, not how they came).
pub fn load(lab: &ApiLab, point: Point) {
    lab.server.apply(apilab::node(NODE, "192.168.0.2"));
    let pool = synth::POD_POOL.min(point.services * point.endpoints);
    for i in 0..point.services {
        let name = format!("svc-{i}");
        lab.server.apply(apilab::service("bench", &name, &synth::cluster_ip(i), 80));
        let ips: Vec<String> = (0..point.endpoints).map(|k| synth::pod_ip((i * point.endpoints + k) % pool)).collect();
        lab.server.apply(apilab::slice("bench", &name, &ips, None));
    }
    lab.server.compact();
}

/// One start of the agent until it has programmed every Service and settled; then SIGTERM.
pub fn start(
    lab: &ApiLab,
    verdict: &Path,
    kubeconfig: &Path,
    point: Point,
    extra: &[&str],
    settle: Duration,
) -> Result<Start> {
    lab.server.clear_requests();
    let bytes_before = lab.server.bytes_sent();
    let daemon = agent::start(&lab.ns, verdict, kubeconfig, NODE, extra)?;
    let memory = Memory::watch(daemon.pid());
    let want = point.services as u64;
    let synced = agent::wait_synced(&daemon, Duration::from_secs(600), |s| s.full && s.services == want)?;
    std::thread::sleep(EARLY.min(settle));
    let early_rss_mib = memory.rss_mib();
    std::thread::sleep(settle.saturating_sub(EARLY));
    let requests = lab.server.requests();
    let out = Start {
        programmed_s: synced.at.as_secs_f64(),
        full_sync_ms: synced.ms,
        objects: synced.objects,
        transactions: synced.transactions,
        commit_ms: synced.commit_ms,
        peak_rss_mib: memory.peak_rss_mib(),
        early_rss_mib,
        settled_rss_mib: memory.rss_mib(),
        lists: requests.iter().filter(|r| r.verb == Verb::List).count(),
        watches: requests.iter().filter(|r| r.verb == Verb::Watch).count(),
        bytes: lab.server.bytes_sent() - bytes_before,
        saved_state: None,
        heap_mib: None,
    };
    drop(memory);
    daemon.terminate(Duration::from_secs(20))?;
    let log = daemon.log_tail(200);
    Ok(Start { saved_state: agent::saved_state(&log), heap_mib: agent::heap_after_sync(&log), ..out })
}

/// How a start lists and what it asks the API server for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiVariant {
    /// The API server offers streaming lists (else it refuses them, and the agent lists at
    /// resourceVersion "0").
    pub streaming: bool,
    /// The agent asks for protobuf (kube-proxy's default), else JSON.
    pub protobuf: bool,
}

impl ApiVariant {
    /// Streaming or rv=0 lists, JSON or protobuf: the four.
    pub const ALL: [ApiVariant; 4] = [
        ApiVariant { streaming: true, protobuf: false },
        ApiVariant { streaming: true, protobuf: true },
        ApiVariant { streaming: false, protobuf: false },
        ApiVariant { streaming: false, protobuf: true },
    ];
}

/// Cold starts of `verdict` against one test API server holding `point`, one per variant;
/// the table is deleted between them, so each start is cold.
pub fn measure_api(
    verdict: &Path,
    workdir: &Path,
    point: Point,
    variants: &[ApiVariant],
    settle: Duration,
) -> Result<Vec<(ApiVariant, Start)>> {
    let lab = ApiLab::new("e2eapi")?;
    load(&lab, point);
    let kubeconfig = workdir.join(format!("kubeconfig-{}", lab.ns.name()));
    lab.server.write_kubeconfig(&kubeconfig)?;
    let mut out = Vec::new();
    // Each start gets a state directory of its own: one shared (or the default) hands the
    // state the last start saved to the next, which reads it in (at 100k, 140 MiB and 0.2 s
    // that a cold start does not have).
    let has_state_dir = supports(verdict, "--state-dir");
    for (i, &v) in variants.iter().enumerate() {
        lab.server.set_streaming_lists(v.streaming);
        let content_type = if v.protobuf { "application/vnd.kubernetes.protobuf" } else { "application/json" };
        let state = workdir.join(format!("state-{}-{i}", lab.ns.name()));
        let state_s = state.display().to_string();
        let mut args = vec!["--kube-api-content-type", content_type];
        if has_state_dir {
            args.extend(["--state-dir", state_s.as_str()]);
        }
        let started = start(&lab, verdict, &kubeconfig, point, &args, settle);
        // What it left is deleted: the next start is cold.
        let _ = lab.ns.exec(&["nft", "delete", "table", "inet", "kube-proxy"]);
        let _ = std::fs::remove_dir_all(&state);
        out.push((v, started.with_context(|| format!("{v:?} at {point}"))?));
    }
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(out)
}
