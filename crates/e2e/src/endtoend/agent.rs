//! The real `verdict run` process, watched from outside as an operator would: its log lines
//! (JSON), its memory from `/proc`, and SIGTERM to stop it.

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
}

/// A running agent.
pub struct RunningAgent {
    child: Child,
    synced: Receiver<Synced>,
    tail: Arc<Mutex<Vec<String>>>,
    peak_sampled_kib: Arc<AtomicU64>,
    stop_sampler: Arc<AtomicBool>,
}

impl RunningAgent {
    /// Starts `verdict run` in namespace `ns` with the API server of `kubeconfig`, as node
    /// `node`, plus `extra` arguments.
    pub fn start(ns: &str, verdict: &Path, kubeconfig: &Path, node: &str, extra: &[&str]) -> Result<RunningAgent> {
        let started = Instant::now();
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(verdict)
            .args(["--log-format", "json", "run", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--hostname-override", node, "--cluster-cidr", "10.0.0.0/8"])
            .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting verdict run")?;
        let stderr = child.stderr.take().context("the agent's stderr")?;
        let (tx, synced) = channel();
        let tail = Arc::new(Mutex::new(Vec::new()));
        let lines = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(s) = parse_synced(&line, started.elapsed()) {
                    let _ = tx.send(s);
                }
                let mut t = lines.lock().unwrap_or_else(|e| e.into_inner());
                t.push(line);
                if t.len() > 200 {
                    t.drain(..100);
                }
            }
        });
        // `ip netns exec` execs the program, so the PID is the agent's own.
        let pid = child.id();
        let peak_sampled_kib = Arc::new(AtomicU64::new(0));
        let stop_sampler = Arc::new(AtomicBool::new(false));
        let (peak, stop) = (peak_sampled_kib.clone(), stop_sampler.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(kib) = status_kib(pid, "VmRSS:") {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Ok(RunningAgent { child, synced, tail, peak_sampled_kib, stop_sampler })
    }

    /// The agent's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the first sync that satisfies `done`; fails if the agent exits first.
    pub fn wait_synced(&mut self, within: Duration, done: impl Fn(&Synced) -> bool) -> Result<Synced> {
        let deadline = Instant::now() + within;
        loop {
            match self.synced.recv_timeout(Duration::from_millis(100)) {
                Ok(s) if done(&s) => return Ok(s),
                Ok(_) => {}
                Err(_) => {
                    if let Some(status) = self.child.try_wait()? {
                        bail!("the agent exited ({status}):\n{}", self.log_tail(30));
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("no matching sync within {within:?}:\n{}", self.log_tail(30));
            }
        }
    }

    /// Resident memory now, in MiB.
    pub fn rss_mib(&self) -> f64 {
        status_kib(self.pid(), "VmRSS:").unwrap_or(0) as f64 / 1024.0
    }

    /// Peak resident memory (the kernel's high-water mark, and what the sampler saw), in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let hwm = status_kib(self.pid(), "VmHWM:").unwrap_or(0);
        hwm.max(self.peak_sampled_kib.load(Ordering::Relaxed)) as f64 / 1024.0
    }

    /// SIGTERM and wait for a clean exit; returns the log's last lines.
    pub fn terminate(mut self) -> Result<String> {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).context("signalling the agent")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait()? {
                self.stop_sampler.store(true, Ordering::Relaxed);
                if !status.success() {
                    bail!("the agent exited with {status} on SIGTERM:\n{}", self.log_tail(20));
                }
                // The reader thread sees the last lines a moment after the exit.
                std::thread::sleep(Duration::from_millis(100));
                return Ok(self.log_tail(200));
            }
            if Instant::now() > deadline {
                bail!("the agent did not exit within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last log lines.
    pub fn log_tail(&self, n: usize) -> String {
        let t = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        t[t.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        self.stop_sampler.store(true, Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn parse_synced(line: &str, at: Duration) -> Option<Synced> {
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
        at,
    })
}
