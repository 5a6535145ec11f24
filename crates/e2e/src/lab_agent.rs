//! The `verdict run` daemon against an [`ApiLab`]'s test API server, in the lab's namespace:
//! the command line the agent's API tests share, and what they read of it (its `/metrics`,
//! the Events it published on the Node).

use crate::agent_process::{AgentLaunch, AgentProcess};
use crate::apilab::ApiLab;
use anyhow::Result;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Starts `verdict` (the binary at `verdict`) for node `n1` with the pod network
/// 10.0.0.0/8, metrics on 127.0.0.1:10249 and health on 127.0.0.1:10256 of the lab's
/// namespace, and `extra` flags; its kubeconfig, log and state in its scratch directory.
pub fn start(lab: &ApiLab, verdict: &str, tag: &str, extra: &[&str]) -> Result<AgentProcess> {
    let launch = AgentLaunch::new(&lab.ns, verdict, tag)?;
    let kubeconfig = launch.dir().join("kubeconfig");
    lab.server.write_kubeconfig(&kubeconfig)?;
    let state = launch.dir().join("state");
    launch
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--hostname-override", "n1", "--cluster-cidr", "10.0.0.0/8"])
        .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
        .arg("--state-dir")
        .arg(&state)
        .args(extra)
        .spawn()
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
