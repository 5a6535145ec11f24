//! The `verdict run` daemon against an [`ApiLab`]'s test API server, in the lab's namespace:
//! the one launcher the agent's API tests share, with what they read of it (its log, its
//! `/metrics`, the Events it published on the Node).

use crate::apilab::ApiLab;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The agent process; killed on drop, its kubeconfig, log and state removed with it.
pub struct LabAgent {
    child: Child,
    log: std::path::PathBuf,
    _dir: TempDir,
}

impl LabAgent {
    /// Starts `verdict` (the binary at `verdict`) for node `n1` with the pod network
    /// 10.0.0.0/8, metrics on 127.0.0.1:10249 and health on 127.0.0.1:10256 of the lab's
    /// namespace, and `extra` flags.
    pub fn start(lab: &ApiLab, verdict: &str, tag: &str, extra: &[&str]) -> LabAgent {
        let dir = TempDir::with_prefix(format!("verdict-{tag}-")).expect("a scratch directory");
        let kubeconfig = dir.path().join("kubeconfig");
        lab.server.write_kubeconfig(&kubeconfig).expect("the kubeconfig");
        let log = dir.path().join("agent.log");
        let child = Command::new("ip")
            .args(["netns", "exec", lab.ns.name(), verdict, "run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8"])
            .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the log"))
            .spawn()
            .expect("the agent");
        LabAgent { child, log, _dir: dir }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `f` holds, at most `within`; fails the test with the log otherwise.
    pub fn wait_within(&self, what: &str, within: Duration, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}\nagent log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// [`LabAgent::wait_within`] 20 s.
    pub fn wait(&self, what: &str, f: impl FnMut() -> bool) {
        self.wait_within(what, Duration::from_secs(20), f)
    }
}

impl Drop for LabAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's `/metrics` text ("" while it does not answer).
pub fn scrape(lab: &ApiLab) -> String {
    lab.ns
        .run(|| {
            let mut s = TcpStream::connect("127.0.0.1:10249").ok()?;
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            Some(out)
        })
        .unwrap_or_default()
}

/// The value of the series `series` (the name with its labels, as `/metrics` writes it).
pub fn series(lab: &ApiLab, series: &str) -> Option<f64> {
    let text = scrape(lab);
    let line = text.lines().find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// The Events published about Node `node`: `type reason: note` each.
pub fn node_events(lab: &ApiLab, node: &str) -> Vec<String> {
    lab.server
        .events()
        .iter()
        .filter(|e| {
            let about = e.get("regarding").or_else(|| e.get("involvedObject")).cloned().unwrap_or_default();
            about["kind"] == "Node" && about["name"] == node
        })
        .map(|e| {
            format!("{} {}: {}", e["type"], e["reason"], e["note"].as_str().or(e["message"].as_str()).unwrap_or(""))
        })
        .collect()
}
