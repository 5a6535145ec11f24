//! Removing kube-proxy's rules once verdict's own table is in place: `verdict
//! remove-leftovers`, and how `verdict run` starts it.
//!
//! The order is what makes the switch hitless: kube-proxy's rules keep serving until verdict's
//! first sync has programmed every Service, so no new connection meets a node with neither.
//! The removal runs in a process of its own because the agent drops its capabilities (and
//! sets no_new_privs) before its first thread starts, long before that sync: iptables-legacy
//! needs NET_RAW, and its binaries' file capabilities do not apply under no_new_privs. The
//! agent starts the process at once, while it may, and tells it when to go through a pipe;
//! the pipe closing first (the agent stopped before programming) means kube-proxy's rules
//! stay.

use crate::cli::{LogFormat, RemoveLeftoversArgs};
use crate::config::parse_duration;
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;
use verdict_controller::leftovers::{IpvsDrain, LeftoverReport, remove_leftovers_draining};

/// How often IPVS's connections are counted while its virtual servers are drained.
const DRAIN_POLL: Duration = Duration::from_secs(1);

/// `verdict remove-leftovers`.
pub fn run(args: &RemoveLeftoversArgs) -> Result<()> {
    crate::privileges::ensure_net_admin()?;
    let bound = parse_duration(&args.ipvs_drain_timeout)
        .ok_or_else(|| anyhow!("--ipvs-drain-timeout {:?} is not a duration", args.ipvs_drain_timeout))?;
    let report = if args.wait_for_stdin {
        let lines = stdin_lines();
        if lines.recv().is_err() {
            tracing::info!("the agent stopped before its first sync: kube-proxy's rules are left in place");
            return Ok(());
        }
        // After the word to go, the pipe closing means the agent stopped: end the IPVS wait.
        let mut wait = |d: Duration| matches!(lines.recv_timeout(d), Err(RecvTimeoutError::Timeout) | Ok(()));
        remove_leftovers_draining(Some(IpvsDrain { bound, poll: DRAIN_POLL, wait: &mut wait }))
    } else {
        let mut wait = |d: Duration| {
            std::thread::sleep(d);
            true
        };
        remove_leftovers_draining(Some(IpvsDrain { bound, poll: DRAIN_POLL, wait: &mut wait }))
    };
    log_report(&report);
    if !report.failed.is_empty() {
        bail!("could not remove every rule of kube-proxy: {}", report.failed.join("; "));
    }
    Ok(())
}

/// Each line of stdin as one message; the channel closes at end of input.
fn stdin_lines() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if line.is_err() || tx.send(()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Sums up what leftover removal did (each object was logged as it went).
pub fn log_report(report: &LeftoverReport) {
    match report.failed.len() {
        0 => tracing::info!(removed = report.removed.len(), "kube-proxy's rules: done"),
        failed => {
            tracing::warn!(removed = report.removed.len(), failed, "kube-proxy's rules: some could not be removed")
        }
    }
}

/// The `remove-leftovers` process `verdict run` starts before it drops its capabilities, and
/// tells to go after its first sync.
pub struct PendingRemoval {
    child: Child,
    stdin: ChildStdin,
    /// Set until the process has exited: kube-proxy's rules are the ones being replaced.
    pub replacing: Arc<AtomicBool>,
}

impl PendingRemoval {
    /// Starts `verdict remove-leftovers --wait-for-stdin` (this same binary, named verdict
    /// whatever name this one runs under), which waits for [`PendingRemoval::go`].
    pub fn start(ipvs_drain_timeout: &str, log_format: LogFormat) -> Result<PendingRemoval> {
        let exe = std::env::current_exe().context("finding verdict's own binary")?;
        let format = match log_format {
            LogFormat::Json => "json",
            LogFormat::Human => "human",
        };
        let mut child = Command::new(&exe)
            .arg0("verdict")
            .args(["--log-format", format, "remove-leftovers", "--wait-for-stdin", "--ipvs-drain-timeout"])
            .arg(ipvs_drain_timeout)
            .stdin(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} remove-leftovers", exe.display()))?;
        let stdin = child.stdin.take().context("the remover's stdin")?;
        Ok(PendingRemoval { child, stdin, replacing: Arc::new(AtomicBool::new(true)) })
    }

    /// Tells the process to remove kube-proxy's rules now; `done` runs once it has exited.
    /// The pipe stays open for as long as the returned handle lives: closing it tells the
    /// process that the agent stopped.
    pub fn go(mut self, done: impl FnOnce() + Send + 'static) -> ChildStdin {
        if let Err(e) = self.stdin.write_all(b"go\n") {
            tracing::warn!("could not tell the remover of kube-proxy's rules to start: {e}");
        }
        let (mut child, replacing) = (self.child, self.replacing);
        std::thread::Builder::new()
            .name("leftovers".into())
            .spawn(move || {
                match child.wait() {
                    Ok(status) if status.success() => tracing::info!("kube-proxy's rules are removed"),
                    Ok(status) => tracing::warn!(%status, "the remover of kube-proxy's rules failed (see above)"),
                    Err(e) => tracing::warn!("waiting for the remover of kube-proxy's rules: {e}"),
                }
                replacing.store(false, Ordering::Release);
                done();
            })
            .map(drop)
            .unwrap_or_else(|e| tracing::warn!("no thread to wait for the remover of kube-proxy's rules: {e}"));
        self.stdin
    }

    /// Tells the process to go and waits for it (`--once`).
    pub fn go_and_wait(self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        let stdin = self.go(move || {
            let _ = tx.send(());
        });
        let _ = rx.recv();
        drop(stdin);
        Ok(())
    }
}
