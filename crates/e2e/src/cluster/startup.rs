//! What a node's start proves before the scenarios run: the init container wrote kube-proxy's
//! conntrack sysctls into the node's namespace, and the agents programmed the API server's own
//! Service, which the nodes cannot reach before them (a cluster bootstrapped without
//! kube-proxy: the agents reach the API server at its real address, from the kubeconfig).

use crate::agent_process::http_get;
use crate::netns::Netns;
use anyhow::{Result, bail, ensure};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The `default/kubernetes` Service's ClusterIP: the first address of kubeadm's default
/// Service range (10.96.0.0/12), where the scenarios' Services also are.
pub const KUBERNETES_CLUSTER_IP: &str = "10.96.0.1";

/// The conntrack sysctls `--init-only` writes with kubeadm's configuration: (name, value
/// the kernel starts with, value kube-proxy's defaults ask for).
const SYSCTLS: [(&str, u64, u64); 2] =
    [("nf_conntrack_tcp_timeout_established", 432_000, 86_400), ("nf_conntrack_tcp_timeout_close_wait", 60, 3_600)];

fn sysctl_path(name: &str) -> String {
    format!("/proc/sys/net/netfilter/{name}")
}

fn read_sysctl(ns: &Netns, name: &str) -> Result<u64> {
    let text = ns.check(&["cat", &sysctl_path(name)])?;
    Ok(text.trim().parse()?)
}

/// Loads conntrack (its sysctls exist only then) and sets the sysctls to the kernel's own
/// defaults, so that reading kube-proxy's values afterwards proves someone wrote them.
pub fn reset_conntrack_sysctls(ns: &Netns) -> Result<()> {
    // A ct expression makes the kernel load nf_conntrack, which registers its sysctls in
    // every namespace; the table is deleted at once (the module stays loaded).
    let table = "table inet verdict-e2e-conntrack { chain c { ct state established accept; }; }\n";
    ns.nft_stdin(&["-f", "-"], table)?;
    ns.check(&["nft", "delete", "table", "inet", "verdict-e2e-conntrack"])?;
    for (name, kernel, _) in SYSCTLS {
        ns.sysctl(&format!("net.netfilter.{name}"), &kernel.to_string())?;
        ensure!(read_sysctl(ns, name)? == kernel, "{}: could not set it to {kernel}", sysctl_path(name));
    }
    Ok(())
}

/// Fails unless the sysctls have kube-proxy's values in `ns` (after the init container).
pub fn expect_conntrack_sysctls(ns: &Netns, node: &str) -> Result<()> {
    for (name, kernel, want) in SYSCTLS {
        let got = read_sysctl(ns, name)?;
        ensure!(
            got == want,
            "{node}: {} is {got} after the init container, not {want} (set to {kernel} before it)",
            sysctl_path(name)
        );
        println!("e2e: {node}: {} = {got} (set to {kernel} before the init container)", sysctl_path(name));
    }
    Ok(())
}

/// The API server's own Service, asked for itself through its ClusterIP from `ns`: the
/// status code of a GET of `default/kubernetes` (None: no HTTP answer within a second).
fn api_via_cluster_ip(ns: &Netns) -> Option<u16> {
    let addr = SocketAddr::new(KUBERNETES_CLUSTER_IP.parse().expect("an address"), 443);
    ns.run(|| http_get(addr, "/api/v1/namespaces/default/services/kubernetes"))
}

/// Before any agent runs: nothing answers at the ClusterIP (the node routes it to its default
/// gateway, the external host, which drops it).
pub fn expect_api_unreachable(ns: &Netns, node: &str) -> Result<()> {
    if let Some(code) = api_via_cluster_ip(ns) {
        bail!("{node}: {KUBERNETES_CLUSTER_IP}:443 answered {code} before any agent ran");
    }
    println!("e2e: {node}: {KUBERNETES_CLUSTER_IP}:443 (default/kubernetes) unreachable before the agents start");
    Ok(())
}

/// Once the agents are healthy: the API server answers 200 through the ClusterIP (DNATed to
/// its real address). Asked for a few seconds, in case a sync is still being committed.
pub fn expect_api_reachable(ns: &Netns, node: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let code = api_via_cluster_ip(ns);
        if code == Some(200) {
            println!("e2e: {node}: the API server answers at {KUBERNETES_CLUSTER_IP}:443 through verdict's DNAT");
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{node}: {KUBERNETES_CLUSTER_IP}:443 answered {code:?} (not 200) within 5 s of the agents being healthy"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
