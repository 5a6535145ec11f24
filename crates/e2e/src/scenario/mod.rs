//! Scenario tests: a two-node namespace cluster programmed on node1, real connections from a
//! pod, the node itself or an external host, and `verdict explain` asked the same question.
//!
//! ```text
//!   external 192.168.50.100 (+ 203.0.113.2, 203.0.113.130)   routes the Service, load balancer
//!      │                                                        and external IPs to node1
//!   lan ── node1 192.168.50.11 (+ 192.168.51.11 on lo)  pods a1, a2, c1 (client)  <- programmed
//!      └── node2 192.168.50.12                               pods b1, b2 (remote endpoints)
//! ```
//!
//! The addresses follow upstream kube-proxy's test fixtures where they can (ServiceCIDR
//! 172.30.0.0/16, load balancer IPs 1.2.3.4 and 5.6.7.8, clients 203.0.113.2 inside and
//! 203.0.113.130 outside the source ranges) and the topology where they must (pods in
//! 10.244.0.0/16, nodes on 192.168.50.0/24).

pub mod objects;

use crate::dataplane;
use crate::probe::{self, Outcome};
use crate::topology::{self, Cluster, ECHO_PORT, EXTERNAL_V4, EXTERNAL_V6};
use anyhow::Result;
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use verdict_model::{BuildOutput, Cidr, IpFamily, ProxyConfig, ProxyModel, build_model, source};
use verdict_nft::explain::{Host, Packet, Summary, explain};
use verdict_nft::netlink::Netlink;
use verdict_nft::{Ruleset, text};

pub use objects::{Cond, Eps, Svc};

/// The programmed node's name.
pub const NODE: &str = "node1";
/// The name node1's own echo server answers with: traffic the table leaves alone.
pub const NODE_HOST: &str = "node1-host";
/// The NodePort scenarios use (node1's own echo server listens on it too).
pub const NODE_PORT: i32 = 30001;
/// node1's second address, outside the default NodePort addresses.
pub const ALTERNATE_NODE_IP: &str = "192.168.51.11";

const CONNECT: Duration = Duration::from_secs(2);
const SILENCE: Duration = Duration::from_millis(800);

/// Where a connection comes from.
#[derive(Clone, Copy, Debug)]
pub enum From {
    /// A pod (by name).
    Pod(&'static str),
    /// The external host, from its LAN address.
    External,
    /// The external host, from this address of its own.
    ExternalAt(&'static str),
    /// node1 itself, from its LAN address.
    Node,
    /// node1 itself, from this address of its own.
    NodeAt(&'static str),
}

/// What a connection should meet.
#[derive(Clone, Debug)]
pub enum Expect {
    /// DNAT to these pods on this port, masqueraded or not.
    Pods {
        /// Pod names.
        pods: Vec<&'static str>,
        /// The endpoint port.
        port: u16,
        /// Whether the pods see another source than the client's.
        masquerade: bool,
    },
    /// Dropped: no answer.
    Drop,
    /// Rejected: refused at once.
    Reject,
    /// Untouched: node1's own echo server answers, with the client's source.
    NotHandled,
}

impl Expect {
    /// DNAT to these pods on the echo port.
    pub fn pods(pods: &[&'static str], masquerade: bool) -> Expect {
        Expect::Pods { pods: pods.to_vec(), port: ECHO_PORT, masquerade }
    }
}

/// The lab: the cluster and node1's configuration.
pub struct Lab {
    /// The namespace cluster.
    pub cluster: Cluster,
    /// node1's own addresses.
    pub node_addresses: Vec<IpAddr>,
    /// node1's `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// The families of the InternalIPs node1's Node object lists (both by default; the
    /// namespaces have both either way, as a node whose kernel supports IPv6 does).
    pub listed_families: Vec<IpFamily>,
    /// Whether node1 is programmed with the fast path (every link of node1 in its flowtable);
    /// `VERDICT_FAST_PATH=1` turns it on for every scenario.
    pub fast_path: bool,
}

impl Lab {
    /// Builds the lab (namespaces named after `tag`); `echo` is the echo server binary.
    pub fn new(tag: &str, echo: &Path) -> Result<Lab> {
        let mut cluster = topology::build(tag, &[&["a1", "a2", "c1"], &["b1", "b2"]], echo)?;
        let node1 = &cluster.nodes[0];
        let ext = &cluster.external;
        for client in ["203.0.113.2/32", "203.0.113.130/32"] {
            ext.ip(&["addr", "add", client, "dev", "eth0"])?;
        }
        let via = node1.ipv4.to_string();
        for net in ["172.30.0.0/16", "1.2.3.4/32", "5.6.7.8/32", "192.168.99.0/24", "192.168.51.0/24"] {
            ext.ip(&["route", "add", net, "via", &via])?;
        }
        ext.ip(&["-6", "route", "add", "fd00:172:30::/64", "via", &node1.ipv6.to_string()])?;
        // Extra node addresses live on lo: this kernel may lack the dummy link type.
        node1.ns.ip(&["addr", "add", &format!("{ALTERNATE_NODE_IP}/32"), "dev", "lo"])?;
        let node_addresses = vec![
            node1.ipv4.into(),
            node1.ipv6.into(),
            node1.bridge_v4.into(),
            node1.bridge_v6.into(),
            ALTERNATE_NODE_IP.parse()?,
            "127.0.0.1".parse()?,
            "::1".parse()?,
        ];
        let echo = echo.to_str().expect("UTF-8 path");
        cluster.nodes[0].ns.spawn(&[echo, NODE_HOST, "80", &NODE_PORT.to_string()])?;
        let lab = Lab {
            cluster,
            node_addresses,
            zone: None,
            listed_families: IpFamily::ALL.to_vec(),
            fast_path: dataplane::fast_path_from_env(),
        };
        if lab.fast_path {
            let supported =
                lab.cluster.nodes[0].ns.run(|| Netlink::open().and_then(|mut nl| nl.supports_flowtables()))?;
            anyhow::ensure!(supported, "VERDICT_FAST_PATH=1, but this kernel has no software flowtables");
        }
        lab.wait_for_host_echo()?;
        Ok(lab)
    }

    fn wait_for_host_echo(&self) -> Result<()> {
        let addr = SocketAddr::new(self.cluster.nodes[0].ipv4.into(), NODE_PORT as u16);
        for _ in 0..100 {
            if self.cluster.external.run(|| probe::tcp(addr, SILENCE)).reply().is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("node1's own echo server does not answer on {addr}")
    }

    /// Gives node1 one more address (on lo).
    pub fn add_node_address(&mut self, cidr: &str) -> Result<()> {
        self.cluster.nodes[0].ns.ip(&["addr", "add", cidr, "dev", "lo"])?;
        let ip = cidr.split('/').next().unwrap_or(cidr).parse()?;
        self.node_addresses.push(ip);
        Ok(())
    }

    /// The configuration upstream's fixtures use, with this topology's pod network:
    /// detect-local by cluster CIDR, and the ServiceCIDRs known.
    pub fn config(&self) -> ProxyConfig {
        let cidr = |s: &str| Cidr::parse_tolerant(s).expect("valid CIDR");
        ProxyConfig {
            cluster_cidrs: vec![cidr(topology::CLUSTER_CIDR_V4), cidr(topology::CLUSTER_CIDR_V6)],
            service_cidrs: vec![cidr("172.30.0.0/16"), cidr("fd00:172:30::/112")],
            ..ProxyConfig::default()
        }
    }

    /// The Node object of node1.
    pub fn node_object(&self) -> source::Node {
        let node1 = &self.cluster.nodes[0];
        source::Node {
            name: NODE.into(),
            addresses: [IpAddr::from(node1.ipv4), IpAddr::from(node1.ipv6)]
                .into_iter()
                .filter(|ip| self.listed_families.contains(&IpFamily::of(ip)))
                .map(|ip| ("InternalIP".to_string(), ip.to_string()))
                .collect(),
            pod_cidrs: vec!["10.244.1.0/24".into(), "fd00:10:244:1::/64".into()],
            labels: self.zone.iter().map(|z| ("topology.kubernetes.io/zone".to_string(), z.clone())).collect(),
            ..source::Node::default()
        }
    }

    /// The model of node1 for these objects, which must have no problems.
    pub fn model(&self, config: ProxyConfig, services: &[Svc], slices: &[Eps]) -> ProxyModel {
        let BuildOutput { model, problems } = self.build(config, services, slices);
        assert!(problems.is_empty(), "scenario objects have problems: {problems:?}");
        model
    }

    /// The model of node1 for these objects, and their problems (hostile objects have some).
    pub fn build(&self, config: ProxyConfig, services: &[Svc], slices: &[Eps]) -> BuildOutput {
        let services: Vec<source::Service> = services.iter().map(|s| s.0.clone()).collect();
        let slices: Vec<source::EndpointSlice> = slices.iter().map(|s| s.0.clone()).collect();
        let node = self.node_object();
        build_model(config, NODE, Some(&node), &self.node_addresses, &services, &slices)
    }

    /// Programs node1 (over netlink, as the agent does) and returns the table.
    pub fn program(&self, model: &ProxyModel) -> Ruleset {
        let opts = verdict_layout::RenderOptions { fast_path: self.fast_path, ..Default::default() };
        dataplane::program_with(&self.cluster.nodes[0].ns, model, &opts, None)
    }

    /// Programs the objects with the default configuration.
    pub fn program_objects(&self, services: &[Svc], slices: &[Eps]) -> Ruleset {
        self.program(&self.model(self.config(), services, slices))
    }

    fn source(&self, from: From, v6: bool) -> (IpAddr, Option<String>) {
        let node1 = &self.cluster.nodes[0];
        match from {
            From::Pod(name) => (self.cluster.pod(name).ip(v6), Some("br0".into())),
            From::External if v6 => (EXTERNAL_V6.into(), Some("eth0".into())),
            From::External => (EXTERNAL_V4.into(), Some("eth0".into())),
            From::ExternalAt(ip) => (ip.parse().expect("address"), Some("eth0".into())),
            From::Node if v6 => (node1.ipv6.into(), None),
            From::Node => (node1.ipv4.into(), None),
            From::NodeAt(ip) => (ip.parse().expect("address"), None),
        }
    }

    /// What `verdict explain` says about this connection.
    pub fn explain(&self, rs: &Ruleset, from: From, to: &str) -> verdict_nft::explain::Explanation {
        let (dst, protocol) = parse_target(to);
        let (src, in_interface) = self.source(from, dst.is_ipv6());
        let packet = Packet { src, dst: dst.ip(), protocol, dport: dst.port(), in_interface };
        explain(rs, &packet, &Host { local_addresses: self.node_addresses.clone() })
    }

    /// Checks one connection both ways: `verdict explain` on the programmed table, and real
    /// connections through node1. `to` is `ip:port` or `ip:port/udp` (`[v6]:port` for IPv6).
    pub fn check(&self, rs: &Ruleset, from: From, to: &str, expect: Expect) {
        let (dst, protocol) = parse_target(to);
        let explanation = self.explain(rs, from, to);
        let wanted = self.summary(&expect, dst.is_ipv6());
        let context = || format!("{from:?} -> {to}\n{explanation}\n{}", text::listing(rs));
        assert_eq!(explanation.summary(), wanted, "verdict explain disagrees with the scenario:\n{}", context());

        let (src, _) = self.source(from, dst.is_ipv6());
        let attempts = match &expect {
            Expect::Pods { pods, .. } => (10 * pods.len()).max(10),
            _ => 2,
        };
        let timeout = if matches!(expect, Expect::Drop) { SILENCE } else { CONNECT };
        let connect = || -> Vec<Outcome> {
            (0..attempts)
                .map(|_| match protocol {
                    verdict_model::Protocol::Tcp => probe::tcp_from(Some(src), dst, timeout),
                    verdict_model::Protocol::Udp => probe::udp_from(Some(src), dst, timeout),
                    verdict_model::Protocol::Sctp => probe::sctp_from(Some(src), dst, timeout),
                })
                .collect()
        };
        let outcomes = match from {
            From::Pod(name) => self.cluster.pod(name).ns.run(connect),
            From::External | From::ExternalAt(_) => self.cluster.external.run(connect),
            From::Node | From::NodeAt(_) => self.cluster.nodes[0].ns.run(connect),
        };
        let from_node = matches!(from, From::Node | From::NodeAt(_));
        if let Err(why) = self.judge(&expect, &outcomes, from_node) {
            panic!("packets disagree with the scenario: {why}\noutcomes: {outcomes:#?}\n{}", context());
        }
    }

    /// `from_node`: the client is a node (see [`crate::probe::Reply::agrees_with`]).
    fn judge(&self, expect: &Expect, outcomes: &[Outcome], from_node: bool) -> Result<(), String> {
        match expect {
            Expect::Pods { pods, masquerade, .. } => {
                let mut seen = BTreeSet::new();
                for o in outcomes {
                    let r = o.reply().ok_or_else(|| format!("a connection failed: {o:?}"))?;
                    if !r.agrees_with(*masquerade, from_node) {
                        return Err(format!(
                            "{} saw source {}:{} (masquerade expected: {masquerade})",
                            r.backend, r.peer, r.peer_port
                        ));
                    }
                    seen.insert(r.backend.as_str());
                }
                let want: BTreeSet<&str> = pods.iter().copied().collect();
                if seen != want {
                    return Err(format!("answered by {seen:?}, expected {want:?}"));
                }
                Ok(())
            }
            Expect::Drop => match outcomes.iter().all(|o| *o == Outcome::Timeout) {
                true => Ok(()),
                false => Err("expected no answer (dropped)".into()),
            },
            Expect::Reject => match outcomes.iter().all(|o| *o == Outcome::Refused) {
                true => Ok(()),
                false => Err("expected a refusal (rejected)".into()),
            },
            Expect::NotHandled => {
                for o in outcomes {
                    match o.reply() {
                        Some(r) if r.backend == NODE_HOST && !r.masqueraded() => {}
                        _ => return Err(format!("expected node1's own server to answer, unmasqueraded: {o:?}")),
                    }
                }
                Ok(())
            }
        }
    }

    fn summary(&self, expect: &Expect, v6: bool) -> Summary {
        match expect {
            Expect::Pods { pods, port, masquerade } => Summary::Endpoints {
                endpoints: pods.iter().map(|p| SocketAddr::new(self.cluster.pod(p).ip(v6), *port)).collect(),
                masquerade: [*masquerade].into_iter().collect(),
            },
            Expect::Drop => Summary::Drop,
            Expect::Reject => Summary::Reject,
            Expect::NotHandled => Summary::NotHandled { masquerade: false },
        }
    }
}

/// `ip:port[/proto]` (`[v6]:port[/proto]`).
fn parse_target(to: &str) -> (SocketAddr, verdict_model::Protocol) {
    let (addr, proto) = match to.split_once('/') {
        Some((a, p)) => (a, p),
        None => (to, "tcp"),
    };
    let protocol = match proto {
        "tcp" => verdict_model::Protocol::Tcp,
        "udp" => verdict_model::Protocol::Udp,
        "sctp" => verdict_model::Protocol::Sctp,
        other => panic!("unknown protocol {other}"),
    };
    (addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")), protocol)
}
