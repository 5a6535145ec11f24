//! One node's `verdict run` daemon, started in the node's namespace as kubeadm would run it:
//! the API server from a kubeconfig, kube-proxy's flags.

use super::utf8;
use crate::netns::Netns;
use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The healthz port every agent serves on (on every address of its node).
pub const HEALTHZ_PORT: u16 = 10256;

pub(super) struct Agent {
    child: Option<Child>,
    log: PathBuf,
    /// (engine, name) of the agent's container, removed on drop.
    container: Option<(String, String)>,
}

impl Agent {
    pub fn start(ns: &Netns, node: &str, verdict: &Path, kubeconfig: &Path, log: &Path) -> Result<Agent> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name(), utf8(verdict)?, "run", "--kubeconfig", utf8(kubeconfig)?])
            .args(["--hostname-override", node, "--cluster-cidr", crate::topology::CLUSTER_CIDR_V4])
            .args(["--metrics-bind-address", "127.0.0.1:10249"])
            .args(["--healthz-bind-address", &format!("0.0.0.0:{HEALTHZ_PORT}")])
            .args(["--min-sync-period", "100ms", "--sync-period", "5s"])
            .arg("--state-dir")
            .arg(log.with_extension("state"));
        Agent::spawn(&mut cmd, log, None)
    }

    /// Starts `cmd` with its stderr appended to `log`.
    pub fn spawn(cmd: &mut Command, log: &Path, container: Option<(String, String)>) -> Result<Agent> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        Ok(Agent { child: Some(child), log: log.to_path_buf(), container })
    }

    /// Waits until `/healthz` answers 200 (the agent has programmed its first sync).
    pub fn wait_healthy(&mut self, ns: &Netns, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if ns.run(healthz) == Some(200) {
                return Ok(());
            }
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                bail!("the agent exited ({status}) before becoming healthy:\n{}", self.log_tail(40));
            }
            if Instant::now() > deadline {
                bail!("the agent did not become healthy within {within:?}:\n{}", self.log_tail(40));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then wait for the exit (the agent leaves its rules in place).
    pub fn terminate(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).context("signalling the agent")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("the agent exited with {status} on SIGTERM:\n{}", self.log_tail(20));
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("the agent did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some((engine, name)) = &self.container {
            let _ = Command::new(engine).args(["rm", "-f", name]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
    }
}

/// The status code of `GET path` on `addr`, from the current namespace.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// The status code of `GET /healthz` on this namespace's loopback.
fn healthz() -> Option<u16> {
    http_get(SocketAddr::from(([127, 0, 0, 1], HEALTHZ_PORT)), "/healthz")
}
