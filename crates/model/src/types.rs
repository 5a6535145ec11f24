//! The model itself: what every Service port answers on, and where its traffic may go.

use crate::nodeport::NodePortAddresses;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use verdict_net::{Cidr, IpFamily, Protocol};

/// How traffic from pods is recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodMatch {
    /// Its source address is in this network.
    Cidr(Cidr),
    /// It arrives on this interface (the pods' bridge).
    Interface(String),
    /// It arrives on an interface whose name starts with this.
    InterfacePrefix(String),
}

/// Facts about the node being programmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The Node's name (`--hostname-override` or the host name).
    pub name: String,
    /// The first InternalIP of each family, from the Node's `status.addresses`.
    pub primary_ips: Vec<IpAddr>,
    /// Every address known to belong to the node: its Node `status.addresses` and, when the
    /// agent runs on the node, the addresses of its interfaces.
    pub addresses: Vec<IpAddr>,
    /// The `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<Cidr>,
}

/// How traffic from pods is told apart from other traffic (`--detect-local-mode`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DetectLocal {
    /// Pods are the sources inside `--cluster-cidr` (upstream's default).
    #[default]
    ClusterCidr,
    /// Pods are the sources inside the Node's `spec.podCIDRs`.
    NodeCidr,
    /// Pod traffic arrives on this bridge.
    BridgeInterface(String),
    /// Pod traffic arrives on interfaces whose names start with this.
    InterfaceNamePrefix(String),
    /// Pod traffic is not recognised.
    None,
}

/// Configuration that shapes the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `--cluster-cidr`: at most one network per family.
    pub cluster_cidrs: Vec<Cidr>,
    /// `--nodeport-addresses`, with the replaced mode's default when unset.
    pub nodeport_addresses: NodePortAddresses,
    /// IPv4 NodePorts also answer on 127.0.0.0/8 to connections the node opens itself
    /// (iptables mode's `localhostNodePorts`, nftables mode's `localhost` keyword): DNAT in the
    /// nat output hook only, and a drop before DNAT of anything to 127.0.0.0/8 that did not
    /// come over loopback (CVE-2020-8558). The agent decides it from the mode.
    pub localhost_nodeports: bool,
    /// The CVE-2020-8558 guard of [`ProxyConfig::localhost_nodeports`] without the NodePorts:
    /// the node's `route_localnet` is on anyway (kube-proxy's iptables mode leaves it on), so
    /// packets to 127.0.0.0/8 from the network would reach the node's loopback sockets.
    pub loopback_guard: bool,
    /// `ct state invalid drop` in the forward hook: iptables mode's KUBE-FORWARD rule, kept
    /// when verdict replaces that mode and `conntrack.tcpBeLiberal` is off.
    pub drop_ct_invalid: bool,
    /// `--masquerade-all`: masquerade every packet sent to a ClusterIP.
    pub masquerade_all: bool,
    /// The packet-mark bit that asks for masquerading (upstream default 14, i.e. `0x4000`).
    pub masquerade_bit: u8,
    /// How pod traffic is recognised.
    pub detect_local: DetectLocal,
    /// `--service-cluster-ip-range`.
    pub service_cidrs: Vec<Cidr>,
    /// The IP families the node's kernel supports (upstream's platform check: IPv6 when
    /// `/proc/net/if_inet6` exists). Offline renders assume both.
    pub families: Vec<IpFamily>,
    /// `--service-counters`: which Service ports get per-Service connection counters.
    pub service_counters: ServiceCounters,
    /// The most table objects one Service may add on this node, all its ports and families
    /// together, as [`crate::ProxyModel::table_objects`] counts them: its set and map elements
    /// (one endpoint-map element per address and endpoint), and the chains, rules and sets of
    /// ports with chains of their own. A Service beyond it is left out whole with a problem,
    /// decided before it is rendered, so that one object bounds every node's table, the
    /// agent's memory and its sync time.
    pub max_elements_per_service: usize,
    /// Addresses no externalIP or load balancer IP may take, whatever the port: the API
    /// server's, which the agent itself connects to (resolved by the agent at start). A
    /// Service address equal to one would DNAT the node's own connections to the API server
    /// (CVE-2020-8554); ClusterIPs are not checked (the `kubernetes` Service's ClusterIP is
    /// the API server's in-cluster address, and the API server allocates ClusterIPs).
    pub reserved_addresses: Vec<IpAddr>,
}

/// The default [`ProxyConfig::max_elements_per_service`]. A large real Service costs 32,600: a
/// dual-stack LoadBalancer with an externalIP and a load balancer IP per family, 100 ports,
/// 30 endpoints per family, NodePorts and counters (tested); the default leaves it half as
/// much again. A Service at the cap renders in about 30 ms and a few MB (docs/operations.md),
/// while one object of a thousand addresses and a slice of a thousand endpoints asks for a
/// million.
pub const DEFAULT_MAX_ELEMENTS_PER_SERVICE: usize = 50_000;

/// Which Service ports are counted (`--service-counters`, `--service-counters-selector`).
/// Counting adds sets and lookups to the table, so it is off unless asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ServiceCounters {
    /// No counters: the table is exactly what it is without the feature.
    #[default]
    Off,
    /// Every Service port.
    All,
    /// Ports of Services whose labels match every requirement: `key` (present) or
    /// `key=value`.
    Labelled(Vec<(String, Option<String>)>),
}

impl ServiceCounters {
    /// Whether the table has the counting sets and lookups at all.
    pub fn enabled(&self) -> bool {
        *self != ServiceCounters::Off
    }

    /// Whether a Service with these labels is counted.
    pub fn counts(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        match self {
            ServiceCounters::Off => false,
            ServiceCounters::All => true,
            ServiceCounters::Labelled(reqs) => reqs.iter().all(|(k, v)| match (labels.get(k), v) {
                (Some(_), None) => true,
                (Some(have), Some(want)) => have == want,
                (None, _) => false,
            }),
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            cluster_cidrs: Vec::new(),
            nodeport_addresses: NodePortAddresses::primary(),
            localhost_nodeports: false,
            loopback_guard: false,
            drop_ct_invalid: false,
            masquerade_all: false,
            masquerade_bit: 14,
            detect_local: DetectLocal::ClusterCidr,
            service_cidrs: Vec::new(),
            families: IpFamily::ALL.to_vec(),
            service_counters: ServiceCounters::Off,
            max_elements_per_service: DEFAULT_MAX_ELEMENTS_PER_SERVICE,
            reserved_addresses: Vec::new(),
        }
    }
}

impl ProxyConfig {
    /// The masquerade mark as a bit mask.
    pub fn masquerade_mark(&self) -> u32 {
        1u32 << self.masquerade_bit
    }
}

/// Identifies one port of one Service, as kube-proxy does.
///
/// The names are shared, not copied: a port's name is held by the model's index and the port,
/// by the claims and by every change reported; as `String`s the copies cost 400 bytes per
/// Service.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    /// The Service's namespace.
    pub namespace: Arc<str>,
    /// The Service's name.
    pub name: Arc<str>,
    /// The port's name ("" for a single unnamed port).
    pub port: Arc<str>,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl ServicePortName {
    /// A service port name.
    pub fn new(namespace: &str, name: &str, port: &str, protocol: Protocol) -> Self {
        ServicePortName { namespace: Arc::from(namespace), name: Arc::from(name), port: Arc::from(port), protocol }
    }
}

impl fmt::Display for ServicePortName {
    /// `namespace/name:port`, or `namespace/name` for an unnamed port: upstream's spelling,
    /// used in nft comments.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// An endpoint address and port traffic can be DNATed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointTarget {
    /// The endpoint's address.
    pub addr: IpAddr,
    /// The endpoint's port for this Service port.
    pub port: u16,
}

/// One endpoint of a Service port, as its EndpointSlice describes it. 24 bytes: a port's
/// endpoints are a third of the model (its topology hints, which few endpoints carry, live
/// beside them in [`ServicePort::hints`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// Address and port.
    pub target: EndpointTarget,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
    /// Whether the endpoint runs on this node.
    pub is_local: bool,
}

/// `hints.forZones` and `hints.forNodes` of an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TopologyHints {
    /// Zone names.
    pub zones: Vec<String>,
    /// Node names.
    pub nodes: Vec<String>,
}

impl TopologyHints {
    /// Whether there are no hints at all.
    pub fn is_empty(&self) -> bool {
        self.zones.is_empty() && self.nodes.is_empty()
    }
}

/// The topology hints of a port's endpoints, by the endpoint's index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointHints(Vec<TopologyHints>);

impl EndpointHints {
    /// `None` when no endpoint carries hints, as [`ServicePort::hints`] holds them.
    pub fn boxed(by_endpoint: Vec<TopologyHints>) -> Option<Box<EndpointHints>> {
        by_endpoint.iter().any(|h| !h.is_empty()).then(|| Box::new(EndpointHints(by_endpoint)))
    }

    /// Zones endpoint `i` is hinted for (empty: no hints).
    pub fn zones(hints: Option<&EndpointHints>, i: usize) -> &[String] {
        hints.and_then(|h| h.0.get(i)).map_or(&[], |h| &h.zones)
    }

    /// Nodes endpoint `i` is hinted for (empty: no hints).
    pub fn nodes(hints: Option<&EndpointHints>, i: usize) -> &[String] {
        hints.and_then(|h| h.0.get(i)).map_or(&[], |h| &h.nodes)
    }
}

/// What only a port reachable from outside the cluster has: boxed, as most ports have none of
/// it and three empty vectors inline cost every port 64 bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutsideAccess {
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// Load balancer ingress IPs that kube-proxy must capture (not `ipMode: Proxy`).
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`.
    pub source_ranges: Vec<Cidr>,
    /// A source range could not be applied (not a CIDR, or an IPv4-mapped one): the load
    /// balancer IPs allow no source at all, whatever `source_ranges` says. Failing closed,
    /// because the user asked for a firewall and dropping a range they meant would open it.
    pub closed: bool,
}

impl OutsideAccess {
    /// `None` when all are empty, as [`ServicePort::outside`] holds them.
    pub fn boxed(self) -> Option<Box<OutsideAccess>> {
        (!self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
            || !self.source_ranges.is_empty()
            || self.closed)
            .then(|| Box::new(self))
    }
}

/// The endpoints each kind of traffic may reach, for one address family, as indexes into the
/// port's [`ServicePort::endpoints`] (see [`ServicePort::targets`] for the addresses).
/// Kubernetes semantics (readiness, terminating fallback, topology hints, Local policies) are
/// already applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointSelection {
    /// The endpoints used by traffic under the Cluster policy.
    pub cluster: Picks,
    /// The endpoints used by traffic under a Local policy.
    pub local: Picks,
    /// Whether any endpoint anywhere can serve: if not, every address of the Service rejects.
    pub has_any: bool,
}

/// Some of a port's endpoints, by index. Up to 64 endpoints (nearly every Service port) fit
/// inline: the picked addresses as a list cost 200 bytes per port of 10 endpoints, a fifth of
/// the model. 16 bytes (a port holds four).
#[derive(Clone, Debug)]
pub struct Picks(Bits);

#[derive(Clone, Debug)]
enum Bits {
    Few(u64),
    Many(Box<Words>),
}

/// The words of more than 64 endpoints, behind one thin pointer.
#[derive(Clone, Debug)]
struct Words(Box<[u64]>);

impl Default for Picks {
    fn default() -> Picks {
        Picks(Bits::Few(0))
    }
}

impl Picks {
    /// None of `n` endpoints.
    pub(crate) fn for_endpoints(n: usize) -> Picks {
        if n <= 64 { Picks::default() } else { Picks(Bits::Many(Box::new(Words(vec![0; n.div_ceil(64)].into())))) }
    }

    fn words(&self) -> &[u64] {
        match &self.0 {
            Bits::Few(w) => std::slice::from_ref(w),
            Bits::Many(ws) => &ws.0,
        }
    }

    /// Picks endpoint `i` (within the count it was made for).
    pub(crate) fn insert(&mut self, i: usize) {
        let words = match &mut self.0 {
            Bits::Few(w) => std::slice::from_mut(w),
            Bits::Many(ws) => &mut ws.0,
        };
        words[i / 64] |= 1 << (i % 64);
    }

    /// Whether endpoint `i` is picked.
    pub fn contains(&self, i: usize) -> bool {
        self.words().get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Whether none is picked.
    pub fn is_empty(&self) -> bool {
        self.words().iter().all(|w| *w == 0)
    }

    /// How many are picked.
    pub fn len(&self) -> usize {
        self.words().iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The picked indexes, in order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words().iter().enumerate().flat_map(|(n, &w)| {
            let mut rest = w;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    n * 64 + bit
                })
            })
        })
    }
}

/// Equal when they pick the same endpoints, however many they were made for.
impl PartialEq for Picks {
    fn eq(&self, other: &Picks) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Picks {}

/// The addresses an [`EndpointSelection`] picks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    /// The endpoints used by traffic under the Cluster policy (sorted).
    pub cluster: Vec<EndpointTarget>,
    /// The endpoints used by traffic under a Local policy (sorted).
    pub local: Vec<EndpointTarget>,
    /// Whether any endpoint anywhere can serve.
    pub has_any: bool,
}

/// One port of one Service, with everything decided.
#[derive(Clone, Debug, PartialEq)]
pub struct ServicePort {
    /// Which Service port this is.
    pub name: ServicePortName,
    /// The Service port number.
    pub port: u16,
    /// The ClusterIPs (one per family at most).
    pub cluster_ips: Box<[IpAddr]>,
    /// The allocated NodePort.
    pub node_port: Option<u16>,
    /// External and load balancer IPs, source ranges (`None`: none of them).
    pub outside: Option<Box<OutsideAccess>>,
    /// `externalTrafficPolicy: Local`.
    pub external_policy_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `sessionAffinity: ClientIP` timeout in seconds.
    pub affinity_timeout: Option<u32>,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: Option<u16>,
    /// Every endpoint from the Service's EndpointSlices, both families, sorted.
    pub endpoints: Box<[Endpoint]>,
    /// The endpoints' topology hints (`None`: no endpoint has any).
    pub hints: Option<Box<EndpointHints>>,
    /// The endpoint choice for IPv4 traffic.
    pub v4: EndpointSelection,
    /// The endpoint choice for IPv6 traffic.
    pub v6: EndpointSelection,
    /// Whether its connections are counted (`--service-counters`).
    pub counted: bool,
}

impl ServicePort {
    /// The endpoint choice for a family.
    pub fn selection(&self, family: IpFamily) -> &EndpointSelection {
        match family {
            IpFamily::V4 => &self.v4,
            IpFamily::V6 => &self.v6,
        }
    }

    /// The addresses the endpoint choice for a family picks.
    pub fn targets(&self, family: IpFamily) -> Targets {
        let s = self.selection(family);
        Targets { cluster: self.picked(&s.cluster), local: self.picked(&s.local), has_any: s.has_any }
    }

    /// The addresses of the picked endpoints, sorted.
    pub fn picked(&self, picks: &Picks) -> Vec<EndpointTarget> {
        picks.iter().filter_map(|i| self.endpoints.get(i)).map(|ep| ep.target).collect()
    }

    /// The protocol of this port.
    pub fn protocol(&self) -> Protocol {
        self.name.protocol
    }

    /// The ClusterIP of a family, if the Service has one.
    pub fn cluster_ip(&self, family: IpFamily) -> Option<IpAddr> {
        self.cluster_ips.iter().find(|ip| IpFamily::of(ip) == family).copied()
    }

    /// `spec.externalIPs`.
    pub fn external_ips(&self) -> &[IpAddr] {
        self.outside.as_ref().map_or(&[], |o| &o.external_ips)
    }

    /// Load balancer ingress IPs that kube-proxy must capture.
    pub fn load_balancer_ips(&self) -> &[IpAddr] {
        self.outside.as_ref().map_or(&[], |o| &o.load_balancer_ips)
    }

    /// `spec.loadBalancerSourceRanges`.
    pub fn source_ranges(&self) -> &[Cidr] {
        self.outside.as_ref().map_or(&[], |o| &o.source_ranges)
    }

    /// Whether its load balancer IPs allow no source at all (see [`OutsideAccess::closed`]).
    pub fn firewall_closed(&self) -> bool {
        self.outside.as_ref().is_some_and(|o| o.closed)
    }

    /// Whether traffic can reach this port from outside the cluster network
    /// (a NodePort, an external IP or a load balancer IP).
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some() || !self.external_ips().is_empty() || !self.load_balancer_ips().is_empty()
    }

    /// Whether the port needs chains of its own in the table: its endpoint choice depends on
    /// the client (session affinity) or on where the traffic comes from (a Local policy).
    pub fn needs_own_chains(&self) -> bool {
        self.affinity_timeout.is_some()
            || self.internal_policy_local
            || (self.external_policy_local && self.externally_accessible())
    }

    /// Its external and load balancer IPs of family `f`, sorted, each once.
    pub fn outside_addresses(&self, f: IpFamily) -> Vec<IpAddr> {
        let mut addrs: Vec<IpAddr> = self
            .external_ips()
            .iter()
            .chain(self.load_balancer_ips())
            .filter(|a| IpFamily::of(a) == f)
            .copied()
            .collect();
        addrs.sort();
        addrs.dedup();
        addrs
    }

    /// Its load balancer IPs of family `f` that `loadBalancerSourceRanges` filters, sorted,
    /// each once: none when it has no range of this family, unless a range could not be
    /// applied (then every family's are filtered, and no source is allowed).
    pub fn firewalled_ips(&self, f: IpFamily) -> Vec<IpAddr> {
        if !self.firewall_closed() && !self.source_ranges().iter().any(|c| c.family() == f) {
            return Vec::new();
        }
        let mut ips: Vec<IpAddr> = self.load_balancer_ips().iter().filter(|a| IpFamily::of(a) == f).copied().collect();
        ips.sort();
        ips.dedup();
        ips
    }
}

#[cfg(test)]
mod tests {
    use super::{Endpoint, EndpointSelection, Picks, ServiceCounters, ServicePort};
    use std::collections::{BTreeMap, BTreeSet};
    use std::mem::size_of;

    /// A port's endpoints and the port itself are most of the model of a large cluster; a field
    /// added inline moves them into the allocator's next size class (the port's `Arc` adds
    /// 16 bytes to its 208; jemalloc's classes there are 224 and 256, and ten endpoints of 24
    /// bytes fill 240 of 256).
    #[test]
    fn the_parts_a_large_cluster_holds_many_of_stay_small() {
        assert_eq!(size_of::<Endpoint>(), 24);
        assert_eq!(size_of::<Picks>(), 16);
        assert_eq!(size_of::<EndpointSelection>(), 40);
        assert!(size_of::<ServicePort>() + 16 <= 224, "{}", size_of::<ServicePort>());
    }

    #[test]
    fn picks_read_back_as_the_indexes_inserted() {
        for n in [0, 1, 10, 64, 65, 200] {
            let wanted: BTreeSet<usize> = (0..n).filter(|i| i % 3 == 0 || i % 7 == 1).collect();
            let mut picks = Picks::for_endpoints(n);
            for i in wanted.iter().rev() {
                picks.insert(*i);
            }
            assert_eq!(picks.iter().collect::<Vec<_>>(), wanted.iter().copied().collect::<Vec<_>>(), "{n}");
            assert_eq!(picks.len(), wanted.len());
            assert_eq!(picks.is_empty(), wanted.is_empty());
            assert!((0..n + 70).all(|i| picks.contains(i) == wanted.contains(&i)));
        }
        assert_eq!(Picks::for_endpoints(200), Picks::default(), "nothing picked, whatever the count");
        let mut last = Picks::for_endpoints(200);
        last.insert(199);
        assert_ne!(last, Picks::default());
    }

    #[test]
    fn labelled_counters_need_every_requirement() {
        let labels = BTreeMap::from([("team".to_string(), "a".to_string()), ("tier".to_string(), "web".to_string())]);
        let sel = |reqs: &[(&str, Option<&str>)]| {
            ServiceCounters::Labelled(reqs.iter().map(|(k, v)| (k.to_string(), v.map(str::to_string))).collect())
        };
        assert!(sel(&[("team", Some("a"))]).counts(&labels));
        assert!(sel(&[("team", None), ("tier", Some("web"))]).counts(&labels));
        assert!(!sel(&[("team", Some("b"))]).counts(&labels));
        assert!(!sel(&[("team", Some("a")), ("owner", None)]).counts(&labels));
        assert!(ServiceCounters::All.counts(&BTreeMap::new()));
        assert!(!ServiceCounters::Off.counts(&labels));
    }
}
