//! What upstream kube-proxy (and kubelet beside it) programs on a node in each of its modes,
//! for a set of Services and EndpointSlices: the state a node switched to verdict starts from,
//! and the state a node switched back returns to.
//!
//! Each mode writes what upstream's proxier writes, shaped as upstream shapes it (chain, set and
//! map names hashed the same way, the same rule layout, comments, the 0x4000 masquerade mark,
//! the filter chains), read from upstream's `pkg/proxy/{iptables,nftables,ipvs}` (v1.36):
//! - [`iptables`]: `iptables-restore --noflush` input for the nat and filter tables, the jumps
//!   from the built-in chains kube-proxy ensures one by one, its canary chains, and kubelet's
//!   chains; through `iptables-nft` or `iptables-legacy`;
//! - [`nftables`]: the `ip kube-proxy` table (and `ip6 kube-proxy`), loaded with `nft -f`, and
//!   kubelet's iptables chains (through `iptables-nft`), which every node has;
//! - [`ipvs`]: the `kube-ipvs0` dummy link holding every ClusterIP, the virtual and real
//!   servers, the ipsets, the iptables rules the ipvs proxier writes, and its sysctls.
//!
//! Scope: ClusterIP and NodePort Services, `externalTrafficPolicy: Cluster`, TCP and UDP, no
//! session affinity; IPv4, and IPv6 in the iptables and nftables modes. A test applies a
//! mode with [`KubeProxy::apply`] and says "kube-proxy resyncs" (it was restarted, on the way
//! back from verdict) with [`KubeProxy::resync`]; both are idempotent.
//!
//! ```no_run
//! # use verdict_e2e::upstream_proxy::{KubeProxy, Mode, NodeInfo};
//! # fn demo(c: &verdict_e2e::topology::Cluster, svcs: &[verdict_model::source::Service],
//! #         slices: &[verdict_model::source::EndpointSlice]) -> anyhow::Result<()> {
//! let node = &c.nodes[0];
//! let kube_proxy = KubeProxy::new(Mode::IptablesNft, NodeInfo::of(node), svcs, slices);
//! kube_proxy.apply(&node.ns)?;
//! // ... verdict takes over, then hands back ...
//! kube_proxy.resync(&node.ns)?;
//! # Ok(()) }
//! ```

pub mod iptables;
pub mod ipvs;
pub mod nftables;
mod ports;

use crate::netns::Netns;
use anyhow::{Context, Result, bail};
pub use ports::{Ep, Family, SvcPort, ports};
use sha2::{Digest, Sha256};
use std::net::{Ipv4Addr, Ipv6Addr};
use verdict_model::source::{EndpointSlice, Service};

/// The masquerade mark as upstream writes it (`fmt.Sprintf("%#08x", 1<<14)`).
pub const MASQ_MARK: &str = "0x004000";

/// Which of kube-proxy's modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// iptables mode through `iptables-nft` (nf_tables underneath).
    IptablesNft,
    /// iptables mode through `iptables-legacy` (x_tables).
    IptablesLegacy,
    /// nftables mode.
    Nftables,
    /// IPVS mode (its iptables rules through `iptables-nft`).
    Ipvs,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 4] = [Mode::IptablesNft, Mode::IptablesLegacy, Mode::Nftables, Mode::Ipvs];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::IptablesNft => "iptables-nft",
            Mode::IptablesLegacy => "iptables-legacy",
            Mode::Nftables => "nftables",
            Mode::Ipvs => "ipvs",
        }
    }
}

/// The iptables back end a mode's rules go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `iptables-nft`: rules in nf_tables tables named like the x_tables ones.
    Nft,
    /// `iptables-legacy`: x_tables.
    Legacy,
}

impl Backend {
    /// The program for `tool` (`iptables`, `iptables-restore`, `iptables-save`) of `family`.
    pub fn program(self, family: Family, tool: &str) -> String {
        let base = match family {
            Family::V4 => tool.to_string(),
            Family::V6 => tool.replacen("iptables", "ip6tables", 1),
        };
        let suffix = match self {
            Backend::Nft => "nft",
            Backend::Legacy => "legacy",
        };
        match base.split_once('-') {
            Some((cmd, rest)) => format!("{cmd}-{suffix}-{rest}"),
            None => format!("{base}-{suffix}"),
        }
    }
}

/// What kube-proxy knows about its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's name (endpoints on it are local).
    pub name: String,
    /// Its primary IPv4 address (nftables mode's NodePort address).
    pub ipv4: Ipv4Addr,
    /// Its primary IPv6 address, if any.
    pub ipv6: Option<Ipv6Addr>,
    /// `clusterCIDR`, IPv4: the local-traffic detector.
    pub cluster_cidr_v4: String,
    /// `clusterCIDR`, IPv6.
    pub cluster_cidr_v6: Option<String>,
    /// The IPv4 Service CIDR, if known (nftables mode drops traffic to unallocated ClusterIPs
    /// in it).
    pub service_cidr_v4: Option<String>,
    /// The IPv6 Service CIDR, if known.
    pub service_cidr_v6: Option<String>,
}

impl NodeInfo {
    /// A node of the namespace topology, with the topology's cluster CIDRs and no Service
    /// CIDR.
    pub fn of(node: &crate::topology::Node) -> NodeInfo {
        NodeInfo {
            name: node.name.clone(),
            ipv4: node.ipv4,
            ipv6: Some(node.ipv6),
            cluster_cidr_v4: crate::topology::CLUSTER_CIDR_V4.into(),
            cluster_cidr_v6: Some(crate::topology::CLUSTER_CIDR_V6.into()),
            service_cidr_v4: None,
            service_cidr_v6: None,
        }
    }

    /// The cluster CIDR of `family`.
    pub fn cluster_cidr(&self, family: Family) -> Option<&str> {
        match family {
            Family::V4 => Some(&self.cluster_cidr_v4),
            Family::V6 => self.cluster_cidr_v6.as_deref(),
        }
    }
}

/// kube-proxy in one mode on one node, with the Service ports it proxies.
#[derive(Clone, Debug)]
pub struct KubeProxy {
    /// The mode.
    pub mode: Mode,
    /// The node.
    pub node: NodeInfo,
    /// The IPv4 Service ports.
    pub ports_v4: Vec<SvcPort>,
    /// The IPv6 Service ports (programmed in the iptables and nftables modes).
    pub ports_v6: Vec<SvcPort>,
}

impl KubeProxy {
    /// kube-proxy in `mode` on `node` for these objects.
    pub fn new(mode: Mode, node: NodeInfo, services: &[Service], slices: &[EndpointSlice]) -> KubeProxy {
        KubeProxy {
            mode,
            ports_v4: ports(services, slices, Family::V4),
            ports_v6: ports(services, slices, Family::V6),
            node,
        }
    }

    /// Programs what kube-proxy (and kubelet) program in this mode when they start: sysctls,
    /// then the rules (and for IPVS the link, sets and virtual servers).
    pub fn apply(&self, ns: &Netns) -> Result<()> {
        match self.mode {
            Mode::IptablesNft => iptables::apply(ns, Backend::Nft, self),
            Mode::IptablesLegacy => iptables::apply(ns, Backend::Legacy, self),
            Mode::Nftables => nftables::apply(ns, self),
            Mode::Ipvs => ipvs::apply(ns, self),
        }
        .with_context(|| format!("programming kube-proxy's {} mode in {}", self.mode.name(), ns.name()))
    }

    /// "kube-proxy resyncs": what a restarted kube-proxy writes, over whatever is there (its
    /// own earlier state, or nothing after verdict removed it). The same as [`KubeProxy::apply`],
    /// which is idempotent; a second name for what a test means.
    pub fn resync(&self, ns: &Netns) -> Result<()> {
        self.apply(ns)
    }

    /// What this mode's state in `ns` looks like, for a failure message or a comparison
    /// (counters left out): the tables' listings, and for IPVS the servers, sets and addresses.
    pub fn state(&self, ns: &Netns) -> Result<String> {
        match self.mode {
            Mode::IptablesNft => iptables::saved(ns, Backend::Nft),
            Mode::IptablesLegacy => iptables::saved(ns, Backend::Legacy),
            Mode::Nftables => nftables::listed(ns),
            Mode::Ipvs => ipvs::state(ns),
        }
    }
}

/// kube-proxy's conntrack settings (`conntrack.tcpEstablishedTimeout` 24 h and
/// `tcpCloseWaitTimeout` 1 h, its defaults), which it sets in every mode. (`nf_conntrack_max`
/// it raises too, but that one is the host's, not the namespace's.)
pub(crate) fn conntrack_sysctls(ns: &Netns) -> Result<()> {
    ns.sysctl("net.netfilter.nf_conntrack_tcp_timeout_established", "86400")?;
    ns.sysctl("net.netfilter.nf_conntrack_tcp_timeout_close_wait", "3600")
}

/// Upstream's hash for chain names: base32 (standard alphabet) of SHA-256, the first `len`
/// characters (16 in the iptables mode, 8 in the nftables mode).
pub fn hash(input: &str, len: usize) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(input.as_bytes());
    let (mut out, mut acc, mut bits) = (String::with_capacity(len), 0u32, 0u32);
    for byte in digest.iter() {
        acc = (acc << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 && out.len() < len {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
        acc &= (1 << bits) - 1;
        if out.len() == len {
            break;
        }
    }
    out
}

/// Feeds `input` to `cmd` in `ns` on its standard input; fails with its stderr.
pub(crate) fn feed(ns: &Netns, cmd: &[&str], input: &str) -> Result<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .args(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let input = input.to_string();
    // A tool that gives up early closes its input: its exit status says why.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output()?;
    let _ = writer.join();
    if !out.status.success() {
        bail!("{cmd:?} in {} failed ({}): {}", ns.name(), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_upstreams() {
        // From upstream's iptables and nftables proxier tests.
        assert_eq!(hash("ns1/svc1:p80tcp", 16), "XPGD46QRK7WJZT7O");
        assert_eq!(hash("ns1/svc1/tcp/p80", 8), "ULMVA6XW");
        assert_eq!(hash("ns1/svc1/tcp/p80__10.180.0.1/80", 8), "5OJB2KTY");
    }

    #[test]
    fn backend_programs() {
        assert_eq!(Backend::Nft.program(Family::V4, "iptables-restore"), "iptables-nft-restore");
        assert_eq!(Backend::Legacy.program(Family::V6, "iptables-save"), "ip6tables-legacy-save");
        assert_eq!(Backend::Legacy.program(Family::V4, "iptables"), "iptables-legacy");
        assert_eq!(Backend::Nft.program(Family::V6, "iptables"), "ip6tables-nft");
    }
}
