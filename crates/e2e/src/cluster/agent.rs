//! One node's `verdict run` daemon, started in the node's namespace as kubeadm's DaemonSet
//! runs kube-proxy: the binary invoked as `kube-proxy`, kubeadm's command line, its ConfigMap
//! at `/var/lib/kube-proxy` and the state directory at `/run/verdict`.

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

/// The healthz port every agent serves on (on every address of its node): kube-proxy's
/// default, which kubeadm's empty `healthzBindAddress` means (0.0.0.0:10256).
pub const HEALTHZ_PORT: u16 = 10256;

/// Mounts a node's volumes where kubeadm's DaemonSet mounts them, then runs the command after
/// the two directories. Each agent gets a mount namespace of its own (`unshare --mount`,
/// private propagation: the host sees none of these mounts), so two nodes on one host read
/// each their own `/var/lib/kube-proxy` and `/run/verdict`, as two real nodes would. The
/// paths are tmpfs'd first because they need not exist on the host, and the test must not
/// create them there. `exec` keeps the agent's PID that of the child the test signals.
const MOUNT_VOLUMES: &str = "set -e; \
    mount -t tmpfs verdict-e2e /var/lib && mkdir /var/lib/kube-proxy && mount --bind \"$1\" /var/lib/kube-proxy; \
    mount -t tmpfs verdict-e2e /run && mkdir /run/verdict && mount --bind \"$2\" /run/verdict; \
    shift 2; exec \"$@\"";

pub(super) struct Agent {
    child: Option<Child>,
    log: PathBuf,
    /// (engine, name) of the agent's container, removed on drop.
    container: Option<(String, String)>,
}

impl Agent {
    /// Starts `kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=NODE`
    /// (kubeadm's command line) in `ns`, with `config_map` (config.conf, kubeconfig.conf)
    /// mounted at `/var/lib/kube-proxy` and `state` at `/run/verdict`. `kube_proxy` is a
    /// symlink named `kube-proxy` to the verdict binary: that name is what makes it `run`.
    pub fn start(ns: &Netns, node: &str, kube_proxy: &Path, volumes: (&Path, &Path), log: &Path) -> Result<Agent> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name(), "unshare", "--mount", "--propagation", "private"])
            .args(["sh", "-c", MOUNT_VOLUMES, "sh", utf8(volumes.0)?, utf8(volumes.1)?, utf8(kube_proxy)?])
            .args(["--config=/var/lib/kube-proxy/config.conf", &format!("--hostname-override={node}")]);
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
