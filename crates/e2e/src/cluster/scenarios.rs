//! The e2e scenarios: each changes the cluster through the API server, waits until both
//! agents have programmed it, and checks real connections.

use super::NsCluster;
use super::objects::{State, Svc};
use super::prober::{Prober, Tally};
use crate::probe::{self, Outcome};
use crate::topology::{ECHO_PORT, EXTERNAL_V4};
use anyhow::{Result, bail, ensure};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// A scenario: its name and what it does.
pub type Scenario = (&'static str, fn(&mut NsCluster) -> Result<()>);

/// Every scenario, in the order they run.
pub const ALL: &[Scenario] = &[
    ("clusterip reaches endpoints on both nodes", clusterip_reaches_endpoints_on_both_nodes),
    ("nodeport on node1 reaches a pod on node2, masqueraded", nodeport_crosses_nodes_masqueraded),
    ("externalTrafficPolicy Local with and without a local endpoint", external_local),
    ("internalTrafficPolicy Local stays on the node", internal_local),
    ("scale to zero endpoints and back", scale_to_zero_and_back),
    ("rolling update of endpoints: no failed connection", rolling_update),
    ("agent restarted mid-traffic: no failed connection", agent_restart),
];

/// Runs the scenarios whose name contains `filter` (all without one), printing progress;
/// on a failure prints the diagnostics and returns the error.
pub fn run(c: &mut NsCluster, filter: Option<&str>) -> Result<usize> {
    let chosen: Vec<&Scenario> = ALL.iter().filter(|(name, _)| filter.is_none_or(|f| name.contains(f))).collect();
    ensure!(!chosen.is_empty(), "no scenario matches {filter:?}");
    for (i, (name, scenario)) in chosen.iter().enumerate() {
        println!("[{}/{}] {name} ...", i + 1, chosen.len());
        let started = Instant::now();
        if let Err(e) = scenario(c) {
            println!(
                "[{}/{}] {name}: FAILED after {:.1} s: {e:#}",
                i + 1,
                chosen.len(),
                started.elapsed().as_secs_f64()
            );
            println!("{}", c.diagnostics());
            return Err(e.context(format!("scenario {name:?}")));
        }
        println!("[{}/{}] {name}: ok ({:.1} s)", i + 1, chosen.len(), started.elapsed().as_secs_f64());
    }
    Ok(chosen.len())
}

fn target(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().expect("an address"), port)
}

/// `n` connections from pod (or host) namespace `from`, with source `src`.
fn connect(c: &NsCluster, from: &str, src: IpAddr, to: SocketAddr, n: usize) -> Vec<Outcome> {
    let run = || (0..n).map(|_| probe::tcp_from(Some(src), to, Duration::from_secs(1))).collect();
    if from == "external" { c.topo.external.run(run) } else { c.topo.pod(from).ns.run(run) }
}

fn pod_ip(c: &NsCluster, pod: &str) -> IpAddr {
    c.topo.pod(pod).ipv4.into()
}

/// Every connection answered, by exactly `pods`, masqueraded or not (clients are pods or
/// external, never a node).
fn answered_by(outcomes: &[Outcome], pods: &[&str], masquerade: bool) -> Result<()> {
    let mut seen = BTreeSet::new();
    for o in outcomes {
        let Some(r) = o.reply() else { bail!("a connection failed: {o:?} (all: {outcomes:?})") };
        ensure!(
            r.agrees_with(masquerade, false),
            "{} saw {}:{} (masquerade expected: {masquerade})",
            r.backend,
            r.peer,
            r.peer_port
        );
        seen.insert(r.backend.as_str());
    }
    let want: BTreeSet<&str> = pods.iter().copied().collect();
    ensure!(seen == want, "answered by {seen:?}, expected {want:?}");
    Ok(())
}

/// Whether the table DNATs Service `svc` (at `svc_ip`) to `pod`: an element of a shared
/// endpoint map (`svc_ip . tcp . 80 . slot ... : addr . port`, one per line), or an endpoint
/// chain of the Service's own (`endpoint-HASH-e2e/svc/tcp/http__addr/port`).
fn programs(table: &str, c: &NsCluster, svc: &str, svc_ip: &str, pod: &str) -> bool {
    let ip = c.topo.pod(pod).ipv4;
    let (element, chain) = (format!("{ip} . {ECHO_PORT}"), format!("/{svc}/tcp/http__{ip}/{ECHO_PORT}"));
    table.lines().any(|l| (l.contains(svc_ip) && l.contains(&element)) || l.contains(&chain))
}

/// Waits until every node programs `pods` (and none of `gone`) for Service `svc`.
fn wait_endpoints(c: &NsCluster, svc: &str, svc_ip: &str, pods: &[&str], gone: &[&str]) -> Result<()> {
    c.wait_programmed(&format!("{svc} ({svc_ip}): {pods:?} in, {gone:?} out"), |t| {
        pods.iter().all(|p| programs(t, c, svc, svc_ip, p)) && !gone.iter().any(|p| programs(t, c, svc, svc_ip, p))
    })
}

fn clusterip_reaches_endpoints_on_both_nodes(c: &mut NsCluster) -> Result<()> {
    c.apply_service(&Svc { name: "web", cluster_ip: "10.96.0.10", ..Svc::default() });
    c.set_endpoints("web", &[c.ep("a1", State::Ready), c.ep("b1", State::Ready)]);
    wait_endpoints(c, "web", "10.96.0.10", &["a1", "b1"], &[])?;
    for client in ["c1", "c2"] {
        let out = connect(c, client, pod_ip(c, client), target("10.96.0.10", 80), 20);
        answered_by(&out, &["a1", "b1"], false)?;
        println!("    from {client}: 20 connections answered by a1 and b1, client address kept");
    }
    Ok(())
}

fn nodeport_crosses_nodes_masqueraded(c: &mut NsCluster) -> Result<()> {
    c.apply_service(&Svc { name: "np", cluster_ip: "10.96.0.11", node_port: Some(30080), ..Svc::default() });
    c.set_endpoints("np", &[c.ep("b1", State::Ready)]);
    wait_endpoints(c, "np", "10.96.0.11", &["b1"], &[])?;
    let out = connect(c, "external", EXTERNAL_V4.into(), target("192.168.50.11", 30080), 10);
    answered_by(&out, &["b1"], true)?;
    let peer = out[0].reply().map(|r| r.peer);
    ensure!(peer == Some("192.168.50.11".parse()?), "b1 should see node1's address, saw {peer:?}");
    println!("    external -> node1:30080 answered by b1 on node2, which saw node1's address");
    Ok(())
}

fn external_local(c: &mut NsCluster) -> Result<()> {
    let svc =
        Svc { name: "local", cluster_ip: "10.96.0.12", node_port: Some(30081), external_local: true, ..Svc::default() };
    c.apply_service(&svc);
    c.set_endpoints("local", &[c.ep("a2", State::Ready)]);
    wait_endpoints(c, "local", "10.96.0.12", &["a2"], &[])?;
    let out = connect(c, "external", EXTERNAL_V4.into(), target("192.168.50.11", 30081), 10);
    answered_by(&out, &["a2"], false)?;
    println!("    external -> node1:30081 (local endpoint a2): answered, client address kept");
    let out = connect(c, "external", EXTERNAL_V4.into(), target("192.168.50.12", 30081), 2);
    ensure!(out.iter().all(|o| *o == Outcome::Timeout), "node2 has no local endpoint: expected drops, got {out:?}");
    println!("    external -> node2:30081 (no local endpoint): dropped");
    Ok(())
}

fn internal_local(c: &mut NsCluster) -> Result<()> {
    c.apply_service(&Svc { name: "itl", cluster_ip: "10.96.0.13", internal_local: true, ..Svc::default() });
    c.set_endpoints("itl", &[c.ep("a1", State::Ready), c.ep("b2", State::Ready)]);
    // Each node programs only its own endpoint: a1 on node1, b2 on node2.
    c.wait_programmed("itl's local chains", |t| {
        t.contains("10.96.0.13 . tcp . 80 comment \"e2e/itl:http\" : goto local-")
            && (programs(t, c, "itl", "10.96.0.13", "a1") || programs(t, c, "itl", "10.96.0.13", "b2"))
    })?;
    answered_by(&connect(c, "c1", pod_ip(c, "c1"), target("10.96.0.13", 80), 10), &["a1"], false)?;
    answered_by(&connect(c, "c2", pod_ip(c, "c2"), target("10.96.0.13", 80), 10), &["b2"], false)?;
    println!("    c1 (node1) reaches only a1, c2 (node2) only b2");
    Ok(())
}

fn scale_to_zero_and_back(c: &mut NsCluster) -> Result<()> {
    c.apply_service(&Svc { name: "scaled", cluster_ip: "10.96.0.14", ..Svc::default() });
    c.set_endpoints("scaled", &[c.ep("a1", State::Ready), c.ep("b1", State::Ready)]);
    wait_endpoints(c, "scaled", "10.96.0.14", &["a1", "b1"], &[])?;
    answered_by(&connect(c, "c1", pod_ip(c, "c1"), target("10.96.0.14", 80), 10), &["a1", "b1"], false)?;
    c.set_endpoints("scaled", &[]);
    c.wait_programmed("scaled rejects", |t| {
        t.contains("10.96.0.14 . tcp . 80 comment \"e2e/scaled:http\" : goto reject-chain")
    })?;
    let out = connect(c, "c1", pod_ip(c, "c1"), target("10.96.0.14", 80), 3);
    ensure!(out.iter().all(|o| *o == Outcome::Refused), "zero endpoints: expected refusals, got {out:?}");
    println!("    scaled to zero: connections refused at once");
    c.set_endpoints("scaled", &[c.ep("a2", State::Ready)]);
    wait_endpoints(c, "scaled", "10.96.0.14", &["a2"], &["a1", "b1"])?;
    answered_by(&connect(c, "c1", pod_ip(c, "c1"), target("10.96.0.14", 80), 10), &["a2"], false)?;
    println!("    scaled back to one endpoint: answered by a2");
    c.delete_service("scaled");
    c.wait_programmed("scaled deleted", |t| !t.contains("10.96.0.14"))?;
    Ok(())
}

fn check_no_failures(what: &str, tally: &Tally) -> Result<()> {
    println!(
        "    {what}: {} connections, {} failed, answered by {:?}",
        tally.attempts,
        tally.failures.len(),
        tally.backends
    );
    ensure!(tally.attempts > 20, "{what}: the prober barely ran ({} connections)", tally.attempts);
    ensure!(tally.failures.is_empty(), "{what}: failed connections: {:?}", tally.failures);
    Ok(())
}

fn rolling_update(c: &mut NsCluster) -> Result<()> {
    c.apply_service(&Svc { name: "stable", cluster_ip: "10.96.0.15", ..Svc::default() });
    c.set_endpoints("stable", &[c.ep("a1", State::Ready), c.ep("b1", State::Ready)]);
    wait_endpoints(c, "stable", "10.96.0.15", &["a1", "b1"], &[])?;
    let prober =
        Prober::start(&c.topo.pod("c2").ns, pod_ip(c, "c2"), target("10.96.0.15", 80), Duration::from_millis(20));
    let mut current = vec!["a1", "b1"];
    for (old, new) in [("a1", "a2"), ("b1", "b2")] {
        // The new pod becomes ready.
        let mut eps: Vec<_> = current.iter().map(|p| c.ep(p, State::Ready)).collect();
        eps.push(c.ep(new, State::Ready));
        c.set_endpoints("stable", &eps);
        let mut with_new = current.clone();
        with_new.push(new);
        wait_endpoints(c, "stable", "10.96.0.15", &with_new, &[])?;
        // The old one starts terminating (still serving), then goes away, then exits.
        let states: Vec<_> =
            with_new.iter().map(|p| c.ep(p, if *p == old { State::Terminating } else { State::Ready })).collect();
        c.set_endpoints("stable", &states);
        current = with_new.into_iter().filter(|p| *p != old).collect();
        wait_endpoints(c, "stable", "10.96.0.15", &current, &[old])?;
        c.set_endpoints("stable", &current.iter().map(|p| c.ep(p, State::Ready)).collect::<Vec<_>>());
        std::thread::sleep(Duration::from_millis(300));
        c.stop_pod(old);
        println!("    replaced {old} by {new}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let tally = prober.stop();
    c.start_pod("a1")?;
    c.start_pod("b1")?;
    check_no_failures("prober c2 -> 10.96.0.15:80 during the rolling update", &tally)
}

fn agent_restart(c: &mut NsCluster) -> Result<()> {
    c.apply_service(&Svc { name: "steady", cluster_ip: "10.96.0.16", node_port: Some(30082), ..Svc::default() });
    c.set_endpoints("steady", &[c.ep("a2", State::Ready), c.ep("b2", State::Ready)]);
    wait_endpoints(c, "steady", "10.96.0.16", &["a2", "b2"], &[])?;
    let every = Duration::from_millis(20);
    let from_pod = Prober::start(&c.topo.pod("c1").ns, pod_ip(c, "c1"), target("10.96.0.16", 80), every);
    let from_outside = Prober::start(&c.topo.external, EXTERNAL_V4.into(), target("192.168.50.11", 30082), every);
    std::thread::sleep(Duration::from_millis(500));
    c.stop_agent(0)?;
    println!("    node1's agent stopped (SIGTERM); its rules stay");
    std::thread::sleep(Duration::from_secs(1));
    c.start_agent(0)?;
    println!("    node1's agent started again and healthy");
    std::thread::sleep(Duration::from_millis(500));
    let (pod, outside) = (from_pod.stop(), from_outside.stop());
    check_no_failures("prober c1 -> 10.96.0.16:80 across the restart", &pod)?;
    check_no_failures("prober external -> node1:30082 across the restart", &outside)?;
    // Healthy comes before the first sync has listed everything (under software emulation,
    // by more than the probers' last half second): wait for its line.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let first_sync = loop {
        let log = c.agent_log(0);
        let after_restart = log.rsplit("verdict starting").next().unwrap_or_default();
        if let Some(line) = after_restart.lines().find(|l| l.contains("synced")) {
            break line.to_string();
        }
        ensure!(std::time::Instant::now() < deadline, "the restarted agent did not sync within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    ensure!(first_sync.contains("objects=0"), "the restarted agent's first sync should write nothing: {first_sync:?}");
    println!("    the restarted agent's first sync wrote 0 objects");
    Ok(())
}
