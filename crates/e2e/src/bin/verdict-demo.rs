//! `verdict-demo` (run through `cargo xtask demo`): a node made of network namespaces, three
//! echo pods and a client, programmed by the real `verdict run --once` from a manifests
//! directory, then real connections to the ClusterIP, the NodePort and an empty Service.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use verdict_e2e::probe::{self, Outcome};
use verdict_e2e::topology;

struct Args {
    verdict: PathBuf,
    echo: PathBuf,
    manifests: PathBuf,
    connections: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        verdict: "verdict".into(),
        echo: "verdict-echo".into(),
        manifests: "examples/demo".into(),
        connections: 30,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).cloned().context("flag without a value")?;
        match pair[0].as_str() {
            "--verdict" => a.verdict = v.into(),
            "--echo" => a.echo = v.into(),
            "--manifests" => a.manifests = v.into(),
            "--connections" => a.connections = v.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

fn describe(o: &Outcome, client: std::net::IpAddr) -> String {
    match o {
        Outcome::Reply(r) if r.peer == client => format!("{} (saw the client's own address {})", r.backend, r.peer),
        Outcome::Reply(r) => format!("{} (saw {}: masqueraded)", r.backend, r.peer),
        other => format!("{other:?}"),
    }
}

fn main() -> Result<()> {
    let a = args()?;
    println!("== building a namespace node: pods pod-a, pod-b, pod-c (echo servers) and a client");
    let c = topology::build("demo", &[&["pod-a", "pod-b", "pod-c", "client"]], &a.echo)?;
    let node = &c.nodes[0];
    let client = c.pod("client");

    println!("== verdict run --once --manifests {} (in the node's namespace)", a.manifests.display());
    let verdict = a.verdict.to_str().context("verdict path")?;
    let manifests = a.manifests.to_str().context("manifests path")?;
    let out = node.ns.exec(&[
        verdict,
        "run",
        "--once",
        "--manifests",
        manifests,
        "--hostname-override",
        "node1",
        "--cluster-cidr",
        &format!("{},{}", topology::CLUSTER_CIDR_V4, topology::CLUSTER_CIDR_V6),
    ])?;
    print!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("verdict run failed ({})", out.status);
    }

    let t = Duration::from_secs(1);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    println!("\n== {} TCP connections from the client pod to ClusterIP 172.30.0.10:80 (demo/web)", a.connections);
    for i in 1..=a.connections {
        let o = client.ns.run(|| probe::tcp("172.30.0.10:80".parse().unwrap(), t));
        println!("  {i:2}: {}", describe(&o, client.ip(false)));
        *tally.entry(o.reply().map(|r| r.backend.clone()).unwrap_or_else(|| format!("{o:?}"))).or_default() += 1;
    }
    println!("  answered by: {tally:?}");

    tally.clear();
    let np = SocketAddr::new(std::net::IpAddr::V4(node.ipv4), 30080);
    println!("\n== {} TCP connections from an external host to the NodePort {np}", a.connections);
    for i in 1..=a.connections {
        let o = c.external.run(|| probe::tcp(np, t));
        println!("  {i:2}: {}", describe(&o, std::net::IpAddr::V4(topology::EXTERNAL_V4)));
        *tally.entry(o.reply().map(|r| r.backend.clone()).unwrap_or_else(|| format!("{o:?}"))).or_default() += 1;
    }
    println!("  answered by: {tally:?}");

    println!("\n== UDP to the dual-stack Service demo/dns");
    for addr in ["172.30.0.53:53", "[fd00:10:96::53]:53"] {
        let o = client.ns.run(|| probe::udp(addr.parse().unwrap(), t));
        println!("  {addr}: {}", describe(&o, if addr.starts_with('[') { client.ip(true) } else { client.ip(false) }));
    }
    println!("\n== the Service demo/empty has no endpoints: refused at once, not a timeout");
    let o = client.ns.run(|| probe::tcp("172.30.0.20:80".parse().unwrap(), t));
    println!("  172.30.0.20:80: {o:?}");

    println!("\n== nft list table inet kube-proxy (in the node's namespace)\n");
    print!("{}", node.ns.check(&["nft", "list", "table", "inet", "kube-proxy"])?);
    println!("\n== tearing down");
    drop(c);
    println!("done: every namespace removed");
    Ok(())
}
