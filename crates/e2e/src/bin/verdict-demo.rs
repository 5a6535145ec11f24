//! `verdict-demo` (run through `cargo xtask demo`): a two-node cluster of network namespaces
//! with a real `verdict run` daemon on each node watching the test API server. A Service is
//! created, scaled up, scaled to zero and deleted through the API; after each step the demo
//! connects to its ClusterIP from a pod on each node and shows who answered. Everything is
//! torn down at the end.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use verdict_e2e::cluster::objects::{State, Svc};
use verdict_e2e::cluster::{Binaries, NsCluster};
use verdict_e2e::probe::{self, Outcome};

const CLUSTER_IP: &str = "10.96.0.10";

fn args() -> Result<Binaries> {
    let mut bins = Binaries { verdict: "verdict".into(), echo: "verdict-echo".into() };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).cloned().context("a flag without a value")?;
        match pair[0].as_str() {
            "--verdict" => bins.verdict = PathBuf::from(v),
            "--echo" => bins.echo = PathBuf::from(v),
            other => bail!("unknown flag {other}; usage: verdict-demo --verdict PATH --echo PATH"),
        }
    }
    Ok(bins)
}

/// `n` connections from each client pod; returns "who answered" per client.
fn connect(c: &NsCluster, n: usize) -> BTreeMap<&'static str, BTreeMap<String, usize>> {
    let target = format!("{CLUSTER_IP}:80").parse().expect("an address");
    let mut out = BTreeMap::new();
    for client in ["c1", "c2"] {
        let outcomes: Vec<Outcome> =
            c.topo.pod(client).ns.run(|| (0..n).map(|_| probe::tcp(target, Duration::from_millis(800))).collect());
        let mut tally = BTreeMap::new();
        for o in outcomes {
            let key = match o {
                Outcome::Reply(r) => r.backend,
                Outcome::Refused => "refused".into(),
                Outcome::Timeout => "no answer".into(),
                other => format!("{other:?}"),
            };
            *tally.entry(key).or_default() += 1;
        }
        out.insert(client, tally);
    }
    out
}

fn show(step: &str, answers: &BTreeMap<&'static str, BTreeMap<String, usize>>, summary: &mut Vec<String>) {
    for (client, tally) in answers {
        let line: Vec<String> = tally.iter().map(|(who, n)| format!("{who} x{n}")).collect();
        println!("   from {client} ({}): {}", if *client == "c1" { "node1" } else { "node2" }, line.join(", "));
    }
    let everyone: std::collections::BTreeSet<&String> = answers.values().flat_map(|t| t.keys()).collect();
    summary.push(format!("{step:<42} {}", everyone.into_iter().cloned().collect::<Vec<_>>().join(", ")));
}

fn main() -> Result<()> {
    let bins = args()?;
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the demo needs root: it creates network namespaces and programs nftables");
    }
    println!("== a two-node cluster of network namespaces, the test API server, and `verdict run` on each node");
    println!(
        "   node1: pods a1, a2 and client c1; node2: pods b1, b2 and client c2 (echo servers answer with their name)"
    );
    let c = NsCluster::start("demo", &bins)?;
    let mut summary = Vec::new();
    let web = Svc { name: "web", cluster_ip: CLUSTER_IP, ..Svc::default() };

    println!("\n== 1. create Service e2e/web ({CLUSTER_IP}:80) with endpoints a1 (node1) and b1 (node2)");
    c.apply_service(&web);
    c.set_endpoints("web", &[c.ep("a1", State::Ready), c.ep("b1", State::Ready)]);
    c.wait_programmed("web", |t| t.contains("10.244.1.10 . 8080") && t.contains("10.244.2.10 . 8080"))?;
    show("created: a1, b1", &connect(&c, 12), &mut summary);

    println!("\n== 2. scale to four endpoints: a1, a2, b1, b2");
    let four = ["a1", "a2", "b1", "b2"].map(|p| c.ep(p, State::Ready));
    c.set_endpoints("web", &four);
    c.wait_programmed("four endpoints", |t| t.contains("map endpoints-4 "))?;
    show("scaled to 4: a1, a2, b1, b2", &connect(&c, 16), &mut summary);
    println!("\n   node1's table now (nft list table inet kube-proxy), abridged:");
    for line in c
        .table(0)
        .lines()
        .filter(|l| l.contains(CLUSTER_IP) || l.contains("chain endpoints-4") || l.contains("@endpoints-4"))
    {
        println!("   {}", line.trim());
    }

    println!("\n== 3. scale to zero: every connection is refused at once (no endpoints: REJECT)");
    println!("   (a few connections per client: the kernel rate-limits the ICMP errors it sends to one host)");
    c.set_endpoints("web", &[]);
    c.wait_programmed("no endpoints", |t| t.contains("goto reject-chain"))?;
    show("scaled to 0", &connect(&c, 4), &mut summary);

    println!("\n== 4. delete the Service: the ClusterIP is no longer handled by verdict");
    c.delete_service("web");
    c.wait_programmed("deleted", |t| !t.contains(CLUSTER_IP))?;
    show("deleted", &connect(&c, 2), &mut summary);

    println!("\n== summary: who answered {CLUSTER_IP}:80 from pods on both nodes");
    for line in &summary {
        println!("   {line}");
    }
    println!("\n== tearing down (agents stopped, namespaces removed)");
    drop(c);
    Ok(())
}
