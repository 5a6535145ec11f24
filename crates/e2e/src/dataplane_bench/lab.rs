//! The benchmark's namespace cluster and its Services.
//!
//! ```text
//!   external 192.168.50.100 ── lan ── node1 192.168.50.11  pods c1 (client), s1..sE (servers)
//!                                 └── node2 192.168.50.12  pods r1..rE (servers)
//! ```
//!
//! Every server pod runs `verdict-load serve` on [`SERVER_PORT`] (TCP and UDP). Two measured
//! Services, each a NodePort with a TCP and a UDP port 80: `local` backed by node1's servers,
//! `remote` by node2's. The other Services of a size are synthetic (`verdict_model::synth`),
//! with the same number of endpoints, which no traffic reaches.

use super::Path;
use crate::netns::Netns;
use crate::synth;
use crate::topology::{self, Cluster};
use anyhow::{Context, Result, bail};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{Cidr, ProxyConfig, ProxyModel, build_model};

/// The port the load servers listen on (TCP and UDP).
pub const SERVER_PORT: u16 = 5201;
/// The measured Services' port.
pub const SERVICE_PORT: u16 = 80;
/// The NodePort of the `local` Service (the one measured from the external host).
pub const NODE_PORT_LOCAL: u16 = 30080;
/// The NodePort of the `remote` Service.
pub const NODE_PORT_REMOTE: u16 = 30081;
/// The node the client runs on and the proxy is programmed on.
pub const NODE: &str = "node1";

/// A cluster for one size's contenders.
pub struct Lab {
    /// The namespaces.
    pub cluster: Cluster,
    /// Server pods per node (the measured Services' endpoints).
    pub servers: usize,
}

/// The binaries the lab runs.
#[derive(Clone, Debug)]
pub struct Bins {
    /// `verdict-echo` (the topology's pods run it).
    pub echo: PathBuf,
    /// `verdict-load`.
    pub load: PathBuf,
}

impl Bins {
    /// `verdict-load` as an argument.
    pub fn load(&self) -> &str {
        self.load.to_str().unwrap_or("verdict-load")
    }
}

/// The ClusterIP of a measured Service among `services` in all: after every synthetic one.
pub fn measured_vip(services: usize, remote: bool) -> String {
    synth::cluster_ip(services.saturating_sub(2) + usize::from(remote))
}

impl Lab {
    /// Builds the cluster and starts the load servers.
    pub fn new(tag: &str, servers: usize, bins: &Bins) -> Result<Lab> {
        let local: Vec<String> =
            std::iter::once("c1".to_string()).chain((1..=servers).map(|i| format!("s{i}"))).collect();
        let remote: Vec<String> = (1..=servers).map(|i| format!("r{i}")).collect();
        let local: Vec<&str> = local.iter().map(String::as_str).collect();
        let remote: Vec<&str> = remote.iter().map(String::as_str).collect();
        let mut cluster = topology::build(tag, &[&local, &remote], &bins.echo)?;
        // The external host reaches pods directly too (the no-proxy floor of NodePort).
        for node in &cluster.nodes {
            let net = format!("10.244.{}.0/24", node.index);
            cluster.external.ip(&["route", "add", &net, "via", &node.ipv4.to_string()])?;
        }
        for ns in [&cluster.external, &cluster.pod("c1").ns] {
            ns.sysctl("net.ipv4.ip_local_port_range", "1024 65535")?;
        }
        let port = SERVER_PORT.to_string();
        for pod in cluster.nodes.iter_mut().flat_map(|n| n.pods.iter_mut()).filter(|p| p.name != "c1") {
            pod.ns.spawn(&[bins.load(), "serve", &port, "64"])?;
        }
        let lab = Lab { cluster, servers };
        lab.wait_for_servers()?;
        Ok(lab)
    }

    fn wait_for_servers(&self) -> Result<()> {
        let client = &self.cluster.pod("c1").ns;
        let deadline = Instant::now() + Duration::from_secs(10);
        for pod in self.cluster.nodes.iter().flat_map(|n| &n.pods).filter(|p| p.name != "c1") {
            let addr = SocketAddr::new(pod.ip(false), SERVER_PORT);
            while client.run(|| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300))).is_err() {
                if Instant::now() > deadline {
                    bail!("the load server of {} does not answer on {addr}", pod.name);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// The node the proxy is programmed on.
    pub fn node1(&self) -> &Netns {
        &self.cluster.nodes[0].ns
    }

    /// Every node namespace.
    pub fn node_namespaces(&self) -> impl Iterator<Item = &Netns> {
        self.cluster.nodes.iter().map(|n| &n.ns)
    }

    /// Where a path's load comes from.
    pub fn client(&self, path: Path) -> &Netns {
        match path {
            Path::NodePort => &self.cluster.external,
            _ => &self.cluster.pod("c1").ns,
        }
    }

    /// A server pod's address on a node (the floor's target, and the static DNAT's).
    pub fn first_server(&self, remote: bool) -> SocketAddr {
        let name = if remote { "r1" } else { "s1" };
        SocketAddr::new(self.cluster.pod(name).ip(false), SERVER_PORT)
    }

    /// Where a path's load goes through a proxy: the ClusterIP, or node1's NodePort.
    pub fn proxied_target(&self, path: Path, services: usize) -> SocketAddr {
        let ip = match path {
            Path::Local => measured_vip(services, false),
            Path::Remote => measured_vip(services, true),
            Path::NodePort => return SocketAddr::new(self.cluster.nodes[0].ipv4.into(), NODE_PORT_LOCAL),
        };
        SocketAddr::new(ip.parse().expect("an address"), SERVICE_PORT)
    }

    fn server_ips(&self, node: usize) -> Vec<String> {
        self.cluster.nodes[node].pods.iter().filter(|p| p.name != "c1").map(|p| p.ipv4.to_string()).collect()
    }

    /// `services` Services with `endpoints` endpoints each: the synthetic ones, then the two
    /// measured ones.
    pub fn sources(&self, services: usize, endpoints: usize) -> (Vec<Service>, Vec<EndpointSlice>) {
        let synthetic = services.saturating_sub(2);
        let (mut svcs, mut slices) = synth::cluster(synthetic, endpoints, synth::POD_POOL);
        for (k, remote) in [false, true].into_iter().enumerate() {
            let name = if remote { "remote" } else { "local" };
            let node_port = i32::from(if remote { NODE_PORT_REMOTE } else { NODE_PORT_LOCAL });
            let ports = ["TCP", "UDP"].map(|proto| ServicePortSpec {
                name: proto.to_lowercase(),
                protocol: proto.into(),
                port: i32::from(SERVICE_PORT),
                node_port: Some(node_port),
            });
            svcs.push(Service {
                namespace: "bench".into(),
                name: name.into(),
                service_type: "NodePort".into(),
                cluster_ips: vec![measured_vip(services, remote)],
                ports: ports.to_vec(),
                ..Service::default()
            });
            slices.push(EndpointSlice {
                namespace: "bench".into(),
                name: format!("{name}-1"),
                service_name: name.into(),
                address_type: "IPv4".into(),
                ports: ["TCP", "UDP"]
                    .map(|proto| EndpointPort {
                        name: proto.to_lowercase(),
                        protocol: proto.into(),
                        port: Some(i32::from(SERVER_PORT)),
                    })
                    .to_vec(),
                endpoints: self
                    .server_ips(k)
                    .into_iter()
                    .map(|ip| Endpoint {
                        addresses: vec![ip],
                        node_name: Some(format!("node{}", k + 1)),
                        ..Endpoint::default()
                    })
                    .collect(),
                trigger_time: None,
            });
        }
        (svcs, slices)
    }

    /// verdict's model of node1 for these objects: detect-local by the pod network, node1's
    /// addresses for NodePorts.
    pub fn model(&self, services: &[Service], slices: &[EndpointSlice]) -> Result<ProxyModel> {
        let node1 = &self.cluster.nodes[0];
        let config = ProxyConfig {
            cluster_cidrs: vec![Cidr::parse_tolerant(topology::CLUSTER_CIDR_V4).context("the pod network")?],
            ..ProxyConfig::default()
        };
        let node = Node {
            name: NODE.into(),
            addresses: vec![("InternalIP".into(), node1.ipv4.to_string())],
            pod_cidrs: vec!["10.244.1.0/24".into()],
            ..Node::default()
        };
        let addresses = [node1.ipv4.into(), node1.bridge_v4.into(), "127.0.0.1".parse()?];
        let built = build_model(config, NODE, Some(&node), &addresses, services, slices);
        if !built.problems.is_empty() {
            bail!("the benchmark's objects have problems: {:?}", &built.problems[..built.problems.len().min(3)]);
        }
        Ok(built.model)
    }
}
