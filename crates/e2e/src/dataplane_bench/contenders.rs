//! What stands between the client and the server pods: nothing, one static DNAT rule,
//! verdict's table, kube-proxy's iptables ruleset (over nf_tables and legacy x_tables), and a
//! slot for verdict with a flowtable fast path.

use super::lab::{Lab, NODE_PORT_LOCAL, SERVICE_PORT};
use crate::{dataplane, upstream_proxy};
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// The server pod's own address: no NAT at all (the floor).
    NoProxy,
    /// One static DNAT rule per measured target: conntrack and NAT, no lookup.
    StaticDnat,
    /// verdict's table, programmed over netlink as the agent does.
    Verdict,
    /// verdict with the flowtable fast path (where the kernel has software flowtables).
    VerdictFastPath,
    /// kube-proxy's iptables mode through `iptables-nft-restore`.
    IptablesNft,
    /// kube-proxy's iptables mode through `iptables-legacy-restore`.
    IptablesLegacy,
}

impl Contender {
    /// Every contender, in the order they run at a size (legacy last: its x_tables hooks stay
    /// registered in the namespace until it is deleted).
    pub const ALL: [Contender; 6] = [
        Contender::NoProxy,
        Contender::StaticDnat,
        Contender::Verdict,
        Contender::VerdictFastPath,
        Contender::IptablesNft,
        Contender::IptablesLegacy,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Contender::NoProxy => "no proxy",
            Contender::StaticDnat => "static DNAT",
            Contender::Verdict => "verdict",
            Contender::VerdictFastPath => "verdict + flowtable",
            Contender::IptablesNft => "kube-proxy iptables (nft)",
            Contender::IptablesLegacy => "kube-proxy iptables (legacy)",
        }
    }

    /// A short name, for file names.
    pub fn slug(self) -> &'static str {
        match self {
            Contender::NoProxy => "no-proxy",
            Contender::StaticDnat => "static-dnat",
            Contender::Verdict => "verdict",
            Contender::VerdictFastPath => "verdict-flowtable",
            Contender::IptablesNft => "iptables-nft",
            Contender::IptablesLegacy => "iptables-legacy",
        }
    }

    /// A floor: its cost does not depend on the number of Services, so it runs once.
    pub fn is_floor(self) -> bool {
        matches!(self, Contender::NoProxy | Contender::StaticDnat)
    }
}

/// How a contender's setup went.
#[derive(Clone, Debug)]
pub enum Setup {
    /// Programmed, in this many seconds.
    Ready(f64),
    /// Could not run here, and why.
    Unavailable(String),
}

/// Programs `c` on node1 for `services` Services of `endpoints` endpoints each; `budget` bounds
/// an iptables restore.
pub fn setup(c: Contender, lab: &Lab, services: usize, endpoints: usize, budget: Duration) -> Result<Setup> {
    let started = Instant::now();
    match c {
        Contender::NoProxy => {}
        Contender::StaticDnat => {
            lab.node1().nft_stdin(&["-f", "-"], &static_table(lab, services))?;
        }
        Contender::Verdict | Contender::VerdictFastPath => {
            let fast_path = c == Contender::VerdictFastPath;
            let node = lab.node1();
            if fast_path {
                let supported =
                    node.run(|| verdict_nft::netlink::Netlink::open().and_then(|mut nl| nl.supports_flowtables()));
                if !supported? {
                    return Ok(Setup::Unavailable(
                        "this kernel has no software flowtables (CONFIG_NF_FLOW_TABLE_INET); run the benchmark in a Debian kernel (`cargo xtask kernels --command`)".into(),
                    ));
                }
            }
            let (svcs, slices) = lab.sources(services, endpoints);
            let model = lab.model(&svcs, &slices)?;
            // With the fast path, every link of node1 (its bridge, the pods' veths, the LAN
            // port) joins the flowtable, as `--flowtable-interfaces=br0,eth0,v*` would have it.
            let opts = verdict_layout::RenderOptions { fast_path, ..Default::default() };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                dataplane::program_with(node, &model, &opts, None)
            }))
            .map_err(|_| anyhow::anyhow!("programming verdict's table failed (see the panic above)"))?;
        }
        Contender::IptablesNft | Contender::IptablesLegacy => {
            let (svcs, slices) = lab.sources(services, endpoints);
            let ports = upstream_proxy::ports(&svcs, &slices, upstream_proxy::Family::V4);
            let input = upstream_proxy::iptables::standalone_restore_input(&ports, crate::topology::CLUSTER_CIDR_V4);
            let tool = if c == Contender::IptablesNft { "iptables-nft-restore" } else { "iptables-legacy-restore" };
            if let Some(why) = restore(lab, tool, &input, budget)? {
                return Ok(Setup::Unavailable(why));
            }
        }
    }
    Ok(Setup::Ready(started.elapsed().as_secs_f64()))
}

/// The static table: for each measured target, one DNAT rule per protocol to the first server
/// pod, and masquerade for what came from outside the pod network (the NodePort).
fn static_table(lab: &Lab, services: usize) -> String {
    let local = lab.first_server(false);
    let remote = lab.first_server(true);
    let node_ip = lab.cluster.nodes[0].ipv4;
    let vip = |remote| super::lab::measured_vip(services, remote);
    let mut rules = String::new();
    for proto in ["tcp", "udp"] {
        rules += &format!("    ip daddr {} {proto} dport {SERVICE_PORT} dnat to {local}\n", vip(false));
        rules += &format!("    ip daddr {} {proto} dport {SERVICE_PORT} dnat to {remote}\n", vip(true));
        rules += &format!("    ip daddr {node_ip} {proto} dport {NODE_PORT_LOCAL} dnat to {local}\n");
    }
    format!(
        "table ip vd_static {{\n  chain prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n{rules}  }}\n  \
         chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    \
         ct status dnat ip saddr != {} masquerade\n  }}\n}}\n",
        crate::topology::CLUSTER_CIDR_V4
    )
}

/// Feeds `input` to `tool` in node1; `Some(reason)` when the tool cannot load it (or not within
/// `budget`: the process is then killed, and nothing was committed).
fn restore(lab: &Lab, tool: &str, input: &str, budget: Duration) -> Result<Option<String>> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", lab.node1().name(), tool])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {tool}"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let started = Instant::now();
    let status = std::thread::scope(|s| -> Result<Option<std::process::ExitStatus>> {
        // A broken pipe means the tool gave up early; its exit status says why.
        s.spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if started.elapsed() > budget {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })?;
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    Ok(match status {
        None => Some(format!("did not load within {:.0} s", budget.as_secs_f64())),
        Some(s) if !s.success() => {
            Some(format!("{tool} failed ({s}): {}", stderr.lines().take(3).collect::<Vec<_>>().join(" / ")))
        }
        Some(_) => None,
    })
}

/// Removes whatever any contender left in the node namespaces and flushes their conntrack
/// tables, then checks that nothing is left.
pub fn teardown(lab: &Lab) -> Result<()> {
    for ns in lab.node_namespaces() {
        ns.check(&["nft", "flush", "ruleset"])?;
        for table in ["nat", "filter"] {
            // Fails harmlessly where the legacy back end never loaded a table.
            let _ = ns.exec(&["iptables-legacy", "-t", table, "-F"]);
            let _ = ns.exec(&["iptables-legacy", "-t", table, "-X"]);
        }
        let out = ns.exec(&["conntrack", "-F"])?;
        if !out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("0 flow entries") {
            bail!("conntrack -F in {} failed: {}", ns.name(), String::from_utf8_lossy(&out.stderr));
        }
        let left = ns.check(&["nft", "list", "ruleset"])?;
        if !left.trim().is_empty() {
            bail!("{} still has rules after the teardown:\n{left}", ns.name());
        }
    }
    Ok(())
}
