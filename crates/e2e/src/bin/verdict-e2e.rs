//! `verdict-e2e` (run through `cargo xtask e2e`): the two-node namespace cluster with a real
//! `verdict run` daemon per node watching the test API server, and the scenarios, with
//! progress as they go. Exit status 0 when every scenario passed.
//!
//! Usage: verdict-e2e --verdict PATH --echo PATH [--only TEXT]
//!        [--containers RENDERED.yaml --image IMAGE --engine CLIENT]
//!
//! With `--containers`, each agent is a container of IMAGE run as the DaemonSet in
//! RENDERED.yaml (`kubectl kustomize deploy/overlays/kubeadm`) says; then its probes are
//! asked, and two runs with less privilege must fail with one line saying why.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Container;
use std::path::PathBuf;
use std::time::Instant;
use verdict_e2e::cluster::container::Containers;
use verdict_e2e::cluster::{Binaries, NsCluster, scenarios};

fn main() -> Result<()> {
    let mut bins = Binaries { verdict: "verdict".into(), echo: "verdict-echo".into() };
    let (mut only, mut rendered, mut image, mut engine) = (None, None, "verdict:dev".to_string(), "docker".to_string());
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).cloned().context("a flag without a value")?;
        match pair[0].as_str() {
            "--verdict" => bins.verdict = PathBuf::from(value),
            "--echo" => bins.echo = PathBuf::from(value),
            "--only" => only = Some(value),
            "--containers" => rendered = Some(value),
            "--image" => image = value,
            "--engine" => engine = value,
            other => bail!(
                "unknown flag {other}; usage: verdict-e2e --verdict PATH --echo PATH [--only TEXT] [--containers RENDERED.yaml --image IMAGE --engine CLIENT]"
            ),
        }
    }
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the e2e cluster needs root: it creates network namespaces and programs nftables");
    }
    let containers = match &rendered {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
            Some(Containers::from_rendered(&engine, &image, &text)?)
        }
        None => None,
    };
    let started = Instant::now();
    let how = if containers.is_some() {
        format!("one {image} container per node")
    } else {
        "one verdict agent per node".into()
    };
    println!("e2e: starting a two-node namespace cluster, the test API server and {how}");
    let mut cluster = NsCluster::start_with("e2e", &bins, containers.clone())?;
    println!("e2e: cluster up in {:.1} s", started.elapsed().as_secs_f64());
    if verdict_e2e::dataplane::fast_path_from_env() {
        check_fast_path(&cluster)?;
    }
    if let Some(c) = &containers {
        let agent = c.agent();
        println!("e2e: agent container: {:?} {:?}", agent.command.clone().unwrap_or_default(), agent.security_context);
        check_probes(&cluster)?;
    }
    let n = scenarios::run(&mut cluster, only.as_deref())?;
    if containers.is_some() {
        check_probes(&cluster)?;
        least_privilege(&mut cluster)?;
    }
    println!("e2e: all {n} scenarios passed in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// With `VERDICT_FAST_PATH=1`: every node's agent read the fast path from kubeadm's
/// `config.conf` and put the node's interfaces in the flowtable (so every scenario's
/// established connections through a node are offloaded).
fn check_fast_path(cluster: &NsCluster) -> Result<()> {
    for node in &cluster.topo.nodes {
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let listed = node.ns.check(&["nft", "list", "flowtables"])?;
            if listed.contains("flowtable fastpath") && listed.contains("devices = {") {
                let devices = listed.lines().find(|l| l.contains("devices")).unwrap_or_default().trim();
                println!("e2e: {}: fast path on ({}): {devices}", node.name, verdict_e2e::cluster::FAST_PATH_FIELD);
                break;
            }
            if Instant::now() > deadline {
                bail!("{}: VERDICT_FAST_PATH=1, but the table has no flowtable with devices:\n{listed}", node.name);
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    Ok(())
}

/// Every probe of every node's agent container answers 200.
fn check_probes(cluster: &NsCluster) -> Result<()> {
    for (i, node) in cluster.topo.nodes.iter().enumerate() {
        let probes = cluster.probes(i);
        if probes.is_empty() {
            bail!("the agent container has no HTTP probes");
        }
        for (what, path, port, code) in probes {
            println!("e2e: {}: {what} probe GET {}:{port}{path} -> {code:?}", node.name, node.ipv4);
            if code != Some(200) {
                bail!("{}: the {what} probe GET {path} on port {port} answered {code:?}, not 200", node.name);
            }
        }
    }
    Ok(())
}

/// A change to the agent container's spec.
type Tweak = dyn Fn(&mut Container);

/// Node 1's agent, stopped, then run with NET_ADMIN removed and with
/// `allowPrivilegeEscalation: false`: each must exit non-zero with one line naming the cause.
fn least_privilege(cluster: &mut NsCluster) -> Result<()> {
    cluster.stop_agent(0)?;
    let without_net_admin = |c: &mut Container| {
        let caps = c.security_context.as_mut().and_then(|s| s.capabilities.as_mut());
        if let Some(add) = caps.and_then(|c| c.add.as_mut()) {
            add.retain(|cap| cap != "NET_ADMIN");
        }
    };
    let no_escalation = |c: &mut Container| {
        c.security_context.get_or_insert_default().allow_privilege_escalation = Some(false);
    };
    let runs: [(&str, &Tweak, &str); 2] = [
        ("without NET_ADMIN", &without_net_admin, "the container lacks NET_ADMIN"),
        (
            "with allowPrivilegeEscalation: false",
            &no_escalation,
            "no_new_privs is set (allowPrivilegeEscalation: false)",
        ),
    ];
    for (what, tweak, expected) in runs {
        let out = cluster.run_agent_tweaked(0, tweak)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The docker client's own warning (dockerd runs with --ip-forward=false) is not the agent's.
        let engine_warning = |l: &str| l.starts_with("WARNING: IPv4 forwarding is disabled");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty() && !engine_warning(l)).collect();
        println!("e2e: agent {what}: {} ({})", lines.join(" | "), out.status);
        let crashed = stderr.contains("panicked") || stderr.to_lowercase().contains("backtrace");
        if out.status.success() || lines.len() != 1 || !lines[0].contains(expected) || crashed {
            bail!(
                "the agent {what} must exit non-zero with one line containing {expected:?}; it exited {} with:\n{stderr}",
                out.status
            );
        }
    }
    Ok(())
}
