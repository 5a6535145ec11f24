//! A cluster of network namespaces: nodes on a shared LAN, each with a bridge of pods running
//! the echo server, and an external host on the LAN.
//!
//! ```text
//!   external 192.168.50.100 ──┐
//!   node1    192.168.50.11  ──┼── lan0 (namespace "lan")
//!   node2    192.168.50.12  ──┘
//!   node i: br0 10.244.i.1/24 (fd00:10:244:i::1/64), pods 10.244.i.10, .11, ... on it
//! ```
//!
//! Nodes route each other's pod networks over the LAN and send everything else to the
//! external host, so a ClusterIP with no rule reaches the forward hook (and gets rejected there)
//! instead of failing in routing. The settings come from `shared/reference/netns-harness.md`:
//! forwarding on, bridge netfilter on, hairpin on bridge ports, fixed bridge MACs, no DAD.

use crate::netns::Netns;
use crate::probe::{self, Outcome};
use anyhow::{Context, Result, bail};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

/// The port every echo server listens on (TCP, UDP and SCTP).
pub const ECHO_PORT: u16 = 8080;
/// A second echo port, for Services with a second port.
pub const ECHO_PORT_2: u16 = 9090;
/// The port where the echo servers keep TCP connections open and answer every line (and answer
/// UDP as on the others): the steady-traffic harness's port ([`crate::steady`]).
pub const SESSION_PORT: u16 = 7070;

/// One pod: a namespace on a node's bridge running the echo server.
#[derive(Debug)]
pub struct Pod {
    /// The name the echo server answers with.
    pub name: String,
    /// The pod's namespace.
    pub ns: Netns,
    /// IPv4 address.
    pub ipv4: Ipv4Addr,
    /// IPv6 address.
    pub ipv6: Ipv6Addr,
}

impl Pod {
    /// The address of a family.
    pub fn ip(&self, v6: bool) -> IpAddr {
        if v6 { IpAddr::V6(self.ipv6) } else { IpAddr::V4(self.ipv4) }
    }
}

/// One node.
#[derive(Debug)]
pub struct Node {
    /// 1-based index.
    pub index: u8,
    /// Node name (`node1`, ...).
    pub name: String,
    /// The node's namespace, where verdict programs its table.
    pub ns: Netns,
    /// LAN address.
    pub ipv4: Ipv4Addr,
    /// LAN address.
    pub ipv6: Ipv6Addr,
    /// The bridge's address (the pods' gateway, and the address hairpin traffic is
    /// masqueraded to).
    pub bridge_v4: Ipv4Addr,
    /// The bridge's IPv6 address.
    pub bridge_v6: Ipv6Addr,
    /// Pods on this node.
    pub pods: Vec<Pod>,
}

/// A namespace cluster.
#[derive(Debug)]
pub struct Cluster {
    /// Nodes, in index order. Declared first so they are removed before the LAN.
    pub nodes: Vec<Node>,
    /// The external host.
    pub external: Netns,
    /// The LAN namespace.
    pub lan: Netns,
}

/// The external host's LAN addresses.
pub const EXTERNAL_V4: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 100);
/// The external host's IPv6 LAN address.
pub const EXTERNAL_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 0x100);
/// The IPv4 pod network of the whole cluster.
pub const CLUSTER_CIDR_V4: &str = "10.244.0.0/16";
/// The IPv6 pod network of the whole cluster.
pub const CLUSTER_CIDR_V6: &str = "fd00:10:244::/48";

fn node_v4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, 50, 10 + i)
}

fn node_v6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x50, 0, 0, 0, 0, 0x10 + u16::from(i))
}

/// Builds a cluster: `pods[i]` names the pods of node i+1. `echo` is the echo server binary.
pub fn build(tag: &str, pods: &[&[&str]], echo: &Path) -> Result<Cluster> {
    build_with(tag, pods, echo, &|tag| Netns::new(tag))
}

/// [`build`], with each node's namespace made by `node_ns` (from a tag): e.g. a container's,
/// named with [`Netns::attach`], so that containers can join it.
pub fn build_with(
    tag: &str,
    pods: &[&[&str]],
    echo: &Path,
    node_ns: &dyn Fn(&str) -> Result<Netns>,
) -> Result<Cluster> {
    let lan = namespace(&format!("{tag}-lan"))?;
    lan.ip(&["link", "add", "lan0", "type", "bridge", "stp_state", "0"])?;
    lan.ip(&["link", "set", "lan0", "up"])?;

    let external = namespace(&format!("{tag}-ext"))?;
    attach_to_lan(&lan, &external, "x-ext")?;
    external.ip(&["addr", "add", &format!("{EXTERNAL_V4}/24"), "dev", "eth0"])?;
    external.ip(&["-6", "addr", "add", &format!("{EXTERNAL_V6}/64"), "dev", "eth0", "nodad"])?;

    let mut nodes = Vec::new();
    for (i, pod_names) in pods.iter().enumerate() {
        let index = u8::try_from(i + 1).context("too many nodes")?;
        let ns = skip_dad(node_ns(&format!("{tag}-n{index}"))?)?;
        nodes.push(build_node(tag, ns, &lan, index, pods.len() as u8, pod_names, echo)?);
    }
    let cluster = Cluster { nodes, external, lan };
    cluster.wait_for_echo()?;
    Ok(cluster)
}

/// A namespace whose new links skip IPv6 duplicate address detection: link-local addresses
/// are usable at once, so the first connection does not wait for neighbour discovery.
fn namespace(tag: &str) -> Result<Netns> {
    skip_dad(Netns::new(tag)?)
}

fn skip_dad(ns: Netns) -> Result<Netns> {
    ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
    ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
    Ok(ns)
}

fn attach_to_lan(lan: &Netns, host: &Netns, port: &str) -> Result<()> {
    lan.ip(&["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host.name()])?;
    lan.ip(&["link", "set", port, "master", "lan0", "up"])?;
    host.ip(&["link", "set", "eth0", "up"])
}

fn build_node(tag: &str, ns: Netns, lan: &Netns, i: u8, count: u8, pod_names: &[&str], echo: &Path) -> Result<Node> {
    ns.sysctl("net.ipv4.ip_forward", "1")?;
    ns.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    // Pods on one bridge talk at L2; bridge netfilter makes those packets pass the nat hooks,
    // so replies from a same-node backend are un-DNATed (see the harness reference).
    ns.sysctl("net.bridge.bridge-nf-call-iptables", "1")?;
    ns.sysctl("net.bridge.bridge-nf-call-ip6tables", "1")?;
    // A client on the LAN reaching a Service address through the node is routed back out of
    // the LAN port: the ICMP redirect the node would send first uses up the peer's ICMP rate
    // budget, and the REJECT that follows is never sent. Nodes in real clusters sit behind
    // routers, not beside their clients; here redirects are simply off.
    ns.sysctl("net.ipv4.conf.all.send_redirects", "0")?;
    ns.sysctl("net.ipv4.conf.default.send_redirects", "0")?;
    attach_to_lan(lan, &ns, &format!("x-n{i}"))?;
    let (ipv4, ipv6) = (node_v4(i), node_v6(i));
    ns.ip(&["addr", "add", &format!("{ipv4}/24"), "dev", "eth0"])?;
    ns.ip(&["-6", "addr", "add", &format!("{ipv6}/64"), "dev", "eth0", "nodad"])?;
    let (bridge_v4, bridge_v6) =
        (Ipv4Addr::new(10, 244, i, 1), Ipv6Addr::new(0xfd00, 0x10, 0x244, u16::from(i), 0, 0, 0, 1));
    ns.ip(&["link", "add", "br0", "address", &format!("02:00:00:00:{i:02x}:01"), "type", "bridge", "stp_state", "0"])?;
    ns.ip(&["addr", "add", &format!("{bridge_v4}/24"), "dev", "br0"])?;
    ns.ip(&["-6", "addr", "add", &format!("{bridge_v6}/64"), "dev", "br0", "nodad"])?;
    ns.ip(&["link", "set", "br0", "up"])?;
    for j in 1..=count {
        if j != i {
            ns.ip(&["route", "add", &format!("10.244.{j}.0/24"), "via", &node_v4(j).to_string()])?;
            ns.ip(&["-6", "route", "add", &format!("fd00:10:244:{j:x}::/64"), "via", &node_v6(j).to_string()])?;
        }
    }
    ns.ip(&["route", "add", "default", "via", &EXTERNAL_V4.to_string()])?;
    ns.ip(&["-6", "route", "add", "default", "via", &EXTERNAL_V6.to_string()])?;

    let mut pods = Vec::new();
    for (k, name) in pod_names.iter().enumerate() {
        let host = 10 + k as u8;
        let mut pod_ns = namespace(&format!("{tag}-{name}"))?;
        let port = format!("v{i}-{host}");
        ns.ip(&["link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", pod_ns.name()])?;
        ns.ip(&["link", "set", &port, "master", "br0", "up"])?;
        ns.ip(&["link", "set", &port, "type", "bridge_slave", "hairpin", "on"])?;
        let (pv4, pv6) = (
            Ipv4Addr::new(10, 244, i, host),
            Ipv6Addr::new(0xfd00, 0x10, 0x244, u16::from(i), 0, 0, 0, u16::from(host)),
        );
        pod_ns.ip(&["addr", "add", &format!("{pv4}/24"), "dev", "eth0"])?;
        pod_ns.ip(&["-6", "addr", "add", &format!("{pv6}/64"), "dev", "eth0", "nodad"])?;
        pod_ns.ip(&["link", "set", "eth0", "up"])?;
        pod_ns.ip(&["route", "add", "default", "via", &bridge_v4.to_string()])?;
        pod_ns.ip(&["-6", "route", "add", "default", "via", &bridge_v6.to_string()])?;
        let echo = echo.to_str().context("echo path is not UTF-8")?;
        let cmd = echo_command(echo, name);
        pod_ns.spawn(&cmd.iter().map(String::as_str).collect::<Vec<_>>())?;
        pods.push(Pod { name: name.to_string(), ns: pod_ns, ipv4: pv4, ipv6: pv6 });
    }
    Ok(Node { index: i, name: format!("node{i}"), ns, ipv4, ipv6, bridge_v4, bridge_v6, pods })
}

/// The echo server's command line for pod `name`.
fn echo_command(echo: &str, name: &str) -> Vec<String> {
    [echo, name]
        .into_iter()
        .map(String::from)
        .chain([ECHO_PORT, ECHO_PORT_2].map(|p| p.to_string()))
        .chain(["--sessions".into(), SESSION_PORT.to_string()])
        .collect()
}

impl Cluster {
    /// Waits until every echo server answers from its own node.
    fn wait_for_echo(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in &self.nodes {
            for pod in &node.pods {
                for addr in [pod.ip(false), pod.ip(true)] {
                    let addr = SocketAddr::new(addr, ECHO_PORT);
                    loop {
                        let got = node.ns.run(|| probe::tcp(addr, Duration::from_millis(300)));
                        if matches!(&got, Outcome::Reply(r) if r.backend == pod.name) {
                            break;
                        }
                        if Instant::now() > deadline {
                            bail!("echo server of {} did not answer on {addr}: {got:?}", pod.name);
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
        Ok(())
    }

    /// Attaches one more host to the LAN (for example the API server's), with this IPv4
    /// address; it is removed with the cluster's other namespaces when the caller drops it.
    pub fn add_host(&self, tag: &str, name: &str, ipv4: Ipv4Addr) -> Result<Netns> {
        let host = namespace(&format!("{tag}-{name}"))?;
        attach_to_lan(&self.lan, &host, &format!("x-{name}"))?;
        host.ip(&["addr", "add", &format!("{ipv4}/24"), "dev", "eth0"])?;
        Ok(host)
    }

    /// Kills pod `name`'s echo server (the pod "exits").
    pub fn stop_pod(&mut self, name: &str) {
        if let Some(pod) = self.nodes.iter_mut().flat_map(|n| &mut n.pods).find(|p| p.name == name) {
            pod.ns.stop_all();
        }
    }

    /// Starts pod `name`'s echo server again.
    pub fn start_pod(&mut self, name: &str, echo: &Path) -> Result<()> {
        let pod = self.nodes.iter_mut().flat_map(|n| &mut n.pods).find(|p| p.name == name).context("no such pod")?;
        let echo = echo.to_str().context("echo path is not UTF-8")?;
        let cmd = echo_command(echo, name);
        pod.ns.spawn(&cmd.iter().map(String::as_str).collect::<Vec<_>>())?;
        Ok(())
    }

    /// The pod with this name.
    pub fn pod(&self, name: &str) -> &Pod {
        self.nodes.iter().flat_map(|n| &n.pods).find(|p| p.name == name).unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// The node a pod runs on.
    pub fn node_of(&self, pod: &str) -> &Node {
        self.nodes.iter().find(|n| n.pods.iter().any(|p| p.name == pod)).unwrap_or_else(|| panic!("no pod {pod}"))
    }
}
