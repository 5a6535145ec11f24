//! The real `verdict run` process, watched from outside as an operator would: its log lines
//! (JSON), its memory from `/proc`, and SIGTERM to stop it.

use crate::agent_process::{AgentLaunch, AgentProcess};
use crate::netns::Netns;
use anyhow::Result;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One `synced` log line of the agent.
#[derive(Clone, Debug, Default)]
pub struct Synced {
    /// A full reconcile.
    pub full: bool,
    /// Service ports in the model.
    pub services: u64,
    /// Kernel objects written.
    pub objects: u64,
    /// The sync's own duration.
    pub ms: f64,
    /// When the line arrived, since the process started.
    pub at: Duration,
    /// Transactions it committed and the longest in the kernel (ms); an older binary (a
    /// baseline) logs neither: `None`.
    pub transactions: Option<(u64, f64)>,
    /// Its commit phase (ms): encoding and the kernel, all transactions.
    pub commit_ms: f64,
}

/// Starts `verdict --log-format json run` in namespace `ns` with the API server of
/// `kubeconfig`, as node `node`, plus `extra` arguments.
pub fn start(ns: &Netns, verdict: &Path, kubeconfig: &Path, node: &str, extra: &[&str]) -> Result<AgentProcess> {
    AgentLaunch::new(ns, verdict, "bench-agent")?
        .args(["--log-format", "json", "run", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--hostname-override", node, "--cluster-cidr", "10.0.0.0/8"])
        .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
        .args(extra)
        .spawn()
}

/// Waits for the agent's next sync (after those an earlier call saw) that satisfies `done`;
/// fails if the agent exits first.
pub fn wait_synced(agent: &AgentProcess, within: Duration, done: impl Fn(&Synced) -> bool) -> Result<Synced> {
    let (synced, at) = agent.wait_line("matching sync", within, |line| parse_synced(line).filter(|s| done(s)))?;
    Ok(Synced { at, ..synced })
}

/// The resident memory of a process: now, and the peak, sampled every 10 ms from when it is
/// watched until it is dropped (the kernel's high-water mark misses nothing, but a process
/// that hands memory back lowers what a late look at `VmRSS` would say).
pub struct Memory {
    pid: u32,
    peak_sampled_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Memory {
    /// Starts sampling process `pid`.
    pub fn watch(pid: u32) -> Memory {
        let peak_sampled_kib = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (peak, stopped) = (peak_sampled_kib.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                if let Some(kib) = status_kib(pid, "VmRSS:") {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Memory { pid, peak_sampled_kib, stop }
    }

    /// Resident memory now, in MiB.
    pub fn rss_mib(&self) -> f64 {
        status_kib(self.pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0
    }

    /// Peak resident memory (the kernel's high-water mark, and what the sampler saw), in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let hwm = status_kib(self.pid, "VmHWM:").unwrap_or(0);
        hwm.max(self.peak_sampled_kib.load(Ordering::Relaxed)) as f64 / 1024.0
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// The fields of the agent's first log line with this message.
fn logged(log: &str, message: &str) -> Option<serde_json::Value> {
    log.lines().find_map(|line| {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let fields = v.get("fields")?;
        (fields.get("message")?.as_str()? == message).then(|| fields.clone())
    })
}

/// From the agent's log: the size (bytes) and time (ms) of the table state it saved at stop.
pub fn saved_state(log: &str) -> Option<(u64, f64)> {
    let f = logged(log, "saved the table state for the next start")?;
    Some((f.get("bytes")?.as_u64()?, f.get("ms")?.as_f64()?))
}

/// From the agent's log: its heap (allocated, resident MiB) after its first full sync.
pub fn heap_after_sync(log: &str) -> Option<(u64, u64)> {
    let f = logged(log, "heap after the full sync")?;
    Some((f.get("allocated_mib")?.as_u64()?, f.get("resident_mib")?.as_u64()?))
}

fn parse_synced(line: &str) -> Option<Synced> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let f = v.get("fields")?;
    if f.get("message")?.as_str()? != "synced" {
        return None;
    }
    Some(Synced {
        full: f.get("full")?.as_bool()?,
        services: f.get("services")?.as_u64()?,
        objects: f.get("objects")?.as_u64()?,
        ms: f.get("ms")?.as_f64()?,
        at: Duration::ZERO,
        transactions: f
            .get("transactions")
            .and_then(|n| n.as_u64())
            .zip(f.get("longest_transaction_ms").and_then(|ms| ms.as_f64())),
        commit_ms: f.get("commit_ms").and_then(|ms| ms.as_f64()).unwrap_or(0.0),
    })
}
