//! Building the model from source records: validation, then Kubernetes semantics.

use crate::claims::{ClaimIndex, PortClaims};
use crate::cost::Budget;
use crate::endpoints::{SelectionInput, select};
use crate::names::{ServiceNames, Spellings};
use crate::problem::{ObjectKind, ObjectRef, Problem};
use crate::proxy_model::ProxyModel;
use crate::slices::{Address, EndpointView, SliceView};
use crate::source;
use crate::types::{
    Endpoint, EndpointHints, EndpointTarget, NodeFacts, OutsideAccess, ProxyConfig, ServicePort, ServicePortName,
    TopologyHints,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use verdict_net::{Cidr, IpFamily, Protocol, check_ip, parse_ip_checked, refused_endpoint_address, special_address};

/// The label that hands a Service to another proxy; kube-proxy (and verdict) skip such Services.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The label that marks headless Services created without a ClusterIP.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The labels that take a Service (and its EndpointSlices, which carry its labels) away from
/// the default proxy, whatever their value: kube-proxy's informers select
/// `!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`
/// (cmd/kube-proxy/app/server.go).
pub const UNPROXIED_LABELS: [&str; 2] = [SERVICE_PROXY_NAME_LABEL, HEADLESS_LABEL];

/// Whether the default proxy handles an object with these labels: the one rule every source
/// applies (the API's watch as [`proxied_services_selector`], manifests as this), and the
/// model again for every Service.
pub fn proxied_by_labels(labels: &BTreeMap<String, String>) -> bool {
    !UNPROXIED_LABELS.iter().any(|label| labels.contains_key(*label))
}

/// [`proxied_by_labels`] as a label selector, for the API server to apply at the watch.
pub fn proxied_services_selector() -> String {
    UNPROXIED_LABELS.map(|label| format!("!{label}")).join(",")
}
/// The zone label of Nodes.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;

/// A built model and the problems found on the way.
#[derive(Clone, Debug, Default)]
pub struct BuildOutput {
    /// The model, with every bad part left out.
    pub model: ProxyModel,
    /// What was left out, and why.
    pub problems: Vec<Problem>,
}

/// Builds the model for node `node_name`.
///
/// `node` is that Node's object when it is known; `local_addresses` are addresses the agent found
/// on the node's interfaces (empty when rendering offline).
pub fn build_model(
    config: ProxyConfig,
    node_name: &str,
    node: Option<&source::Node>,
    local_addresses: &[IpAddr],
    services: &[source::Service],
    slices: &[source::EndpointSlice],
) -> BuildOutput {
    let mut problems = Vec::new();
    let node = node_facts(node_name, node, local_addresses, &mut problems);
    let service_cidrs = config.service_cidrs.clone();
    let mut model = ProxyModel { node, config, services: Default::default(), service_cidrs };
    let families = model.families();

    let mut slices_by_service: BTreeMap<(&str, &str), Vec<&source::EndpointSlice>> = BTreeMap::new();
    for slice in slices {
        if slice.service_name.is_empty() {
            continue; // not managed for a Service (no kubernetes.io/service-name label)
        }
        slices_by_service.entry((slice.namespace.as_str(), slice.service_name.as_str())).or_default().push(slice);
    }

    let mut sorted: Vec<&source::Service> = services.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut claims = ClaimIndex::default();
    let mut raw = Vec::new();
    let mut previous: Option<(&str, &str)> = None;
    let mut spellings = Spellings::default();
    for svc in sorted {
        let key = (svc.namespace.as_str(), svc.name.as_str());
        if previous.replace(key) == Some(key) {
            // Two objects of one name (a manifests directory can hold both): the first is kept.
            let object = ObjectRef::new(ObjectKind::Service, &svc.namespace, &svc.name);
            problems.push(Problem::new(object, "DuplicateObject", "a second Service of this name is left out"));
            continue;
        }
        let svc_slices =
            slices_by_service.get(&(svc.namespace.as_str(), svc.name.as_str())).map(Vec::as_slice).unwrap_or_default();
        let (namespace, name) = (spellings.get(&svc.namespace), Arc::from(svc.name.as_str()));
        let names = ServiceNames { namespace: &namespace, name: &name, ports: &mut spellings };
        for port in build_service(&model, &families, svc, names, svc_slices, &mut problems) {
            claims.register(&PortClaims::of(&port));
            raw.push(port);
        }
    }
    for port in raw {
        let (mut settled, mut lost) = claims.settle(port);
        if !lost.is_empty() {
            // Losing an address can change what the port reaches externally.
            select_endpoints(&model.node, &mut settled);
            problems.append(&mut lost);
        }
        model.services.insert(Arc::new(settled));
    }
    problems.sort();
    problems.dedup();
    BuildOutput { model, problems }
}

pub(crate) fn node_facts(
    name: &str,
    node: Option<&source::Node>,
    local_addresses: &[IpAddr],
    problems: &mut Vec<Problem>,
) -> NodeFacts {
    let mut facts = NodeFacts { name: name.to_string(), ..NodeFacts::default() };
    facts.addresses.extend(local_addresses);
    let Some(node) = node else {
        return facts;
    };
    let object = ObjectRef::new(ObjectKind::Node, "", &node.name);
    let mut parsed: Vec<(&str, IpAddr)> = Vec::new();
    for (kind, addr) in &node.addresses {
        if kind != "InternalIP" && kind != "ExternalIP" {
            continue;
        }
        match parse_ip_checked(addr) {
            Ok(ip) => parsed.push((kind, ip)),
            Err(e) => problems.push(Problem::new(object.clone(), "InvalidNodeAddress", format!("{kind} {addr:?} {e}"))),
        }
    }
    // The primary IP of a family is its first InternalIP, or failing that its first ExternalIP.
    for family in IpFamily::ALL {
        let of_kind = |kind: &str| parsed.iter().find(|(k, ip)| *k == kind && IpFamily::of(ip) == family).map(|p| p.1);
        if let Some(ip) = of_kind("InternalIP").or_else(|| of_kind("ExternalIP")) {
            facts.primary_ips.push(ip);
        }
    }
    facts.addresses.extend(parsed.iter().map(|p| p.1));
    facts.addresses.sort();
    facts.addresses.dedup();
    facts.zone = node.labels.get(ZONE_LABEL).cloned();
    for cidr in &node.pod_cidrs {
        match Cidr::parse_checked(cidr) {
            Ok(c) => facts.pod_cidrs.push(c),
            Err(e) => problems.push(Problem::new(object.clone(), "InvalidPodCIDR", format!("podCIDR {cidr:?} {e}"))),
        }
    }
    facts
}

/// Records problems about one object (named only when there is one: nearly every object has
/// none, and naming each cost two strings per Service and slice of every rebuild).
struct Reporter<'a> {
    kind: ObjectKind,
    namespace: &'a str,
    name: &'a str,
    problems: &'a mut Vec<Problem>,
}

impl Reporter<'_> {
    fn report(&mut self, reason: &'static str, message: String) {
        self.problems.push(Problem::new(ObjectRef::new(self.kind, self.namespace, self.name), reason, message));
    }
}

fn traffic_policy(raw: &str, field: &str, r: &mut Reporter<'_>) -> bool {
    match raw {
        "" | "Cluster" => false,
        "Local" => true,
        other => {
            r.report("InvalidTrafficPolicy", format!("{field} {other:?} is neither Cluster nor Local"));
            false
        }
    }
}

/// Which addresses a field may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claimable<'a> {
    /// Any address (ClusterIPs: allocated by the API server from its ranges).
    Any,
    /// No special address (see [`special_address`]) and none of `reserved` (the API server's,
    /// [`ProxyConfig::reserved_addresses`]): externalIPs and load balancer IPs, which would
    /// otherwise capture traffic no Service may own.
    Ordinary { reserved: &'a [IpAddr] },
}

fn parse_addresses<'s>(
    raws: impl IntoIterator<Item = &'s str>,
    families: &[IpFamily],
    (what, reason, claimable): (&str, &'static str, Claimable<'_>),
    r: &mut Reporter<'_>,
) -> Vec<IpAddr> {
    let mut out = Vec::new();
    // A set beside the vector (which keeps the order written): checking the vector for each
    // address was quadratic, 20,000 externalIPs took seconds.
    let mut seen = HashSet::new();
    let reserved = match claimable {
        Claimable::Any => &[][..],
        Claimable::Ordinary { reserved } => reserved,
    };
    for raw in raws {
        match parse_ip_checked(raw) {
            Ok(ip) if claimable != Claimable::Any && special_address(&ip).is_some() => {
                let kind = special_address(&ip).unwrap_or_default();
                r.report(reason, format!("{what} {raw:?} is {kind}: no Service may claim it"));
            }
            Ok(ip) if reserved.contains(&ip) => {
                let message = format!(
                    "{what} {raw:?} is the API server's address, which this node's proxy connects to: no Service may \
                     claim it, on any port"
                );
                r.report("ApiServerAddress", message);
            }
            // An address of a family this node does not program is the other half of a
            // dual-stack Service: not an error.
            Ok(ip) if families.contains(&IpFamily::of(&ip)) => {
                if seen.insert(ip) {
                    out.push(ip);
                }
            }
            Ok(_) => {}
            Err(e) => r.report(reason, format!("{what} {raw:?} {e}")),
        }
    }
    out
}

/// Builds the ports of one Service; problems are recorded and the bad parts dropped.
pub(crate) fn build_service<S: SliceView>(
    model: &ProxyModel,
    families: &[IpFamily],
    svc: &source::Service,
    names: ServiceNames<'_>,
    slices: &[S],
    problems: &mut Vec<Problem>,
) -> Vec<ServicePort> {
    let (node, config) = (&model.node, &model.config);
    let mut r = Reporter { kind: ObjectKind::Service, namespace: &svc.namespace, name: &svc.name, problems };
    let service_type = if svc.service_type.is_empty() { "ClusterIP" } else { &svc.service_type };
    if service_type == "ExternalName" || !proxied_by_labels(&svc.labels) {
        return Vec::new();
    }
    if !matches!(service_type, "ClusterIP" | "NodePort" | "LoadBalancer") {
        r.report("InvalidServiceType", format!("unknown type {service_type:?}"));
        return Vec::new();
    }
    if svc.cluster_ips.iter().all(|ip| ip.is_empty() || ip == "None") {
        return Vec::new(); // headless: DNS only, nothing to proxy
    }
    // The API server only admits DNS labels; anything else would end up in chain names and
    // comments that `nft -f` cannot read back.
    if !is_dns_label(&svc.namespace) || !is_dns_label(&svc.name) {
        r.report("InvalidName", format!("namespace {:?} or name {:?} is not a DNS label", svc.namespace, svc.name));
        return Vec::new();
    }
    let reported = r.problems.len();
    let cluster_field = ("clusterIP", "InvalidClusterIP", Claimable::Any);
    let cluster_ips = parse_addresses(svc.cluster_ips.iter().map(String::as_str), families, cluster_field, &mut r);
    if cluster_ips.is_empty() {
        // An unparsable address was reported already; otherwise say why nothing is usable.
        if r.problems.len() == reported {
            let families: Vec<String> = families.iter().map(|f| f.to_string()).collect();
            r.report(
                "NoUsableClusterIP",
                format!(
                    "no clusterIP of {:?} belongs to a family this node's kernel supports ({})",
                    svc.cluster_ips,
                    families.join(", ")
                ),
            );
        }
        return Vec::new();
    }
    // A Service is programmed only in the families it has a ClusterIP of (as upstream's
    // per-family proxiers, which ignore the other family's externalIPs and load balancer
    // IPs): an address of another family is dropped before ownership is decided, or it could
    // win an address from a Service that programs it and program it nowhere.
    let programmed: Vec<IpFamily> =
        families.iter().copied().filter(|f| cluster_ips.iter().any(|ip| IpFamily::of(ip) == *f)).collect();
    let ordinary = Claimable::Ordinary { reserved: &config.reserved_addresses };
    let external_field = ("externalIP", "InvalidExternalIP", ordinary);
    let external_ips =
        parse_addresses(svc.external_ips.iter().map(String::as_str), &programmed, external_field, &mut r);
    let load_balancer_ips = if service_type == "LoadBalancer" {
        let captured = svc
            .load_balancer_ingress
            .iter()
            // ipMode Proxy: the load balancer proxies the traffic itself, so the address must
            // reach the node unchanged.
            .filter(|ing| !ing.ip.is_empty() && ing.ip_mode.as_deref() != Some("Proxy"))
            .map(|ing| ing.ip.as_str());
        let field = ("load balancer ingress IP", "InvalidLoadBalancerIP", ordinary);
        parse_addresses(captured, &programmed, field, &mut r)
    } else {
        Vec::new()
    };
    let mut source_ranges = Vec::new();
    let mut closed = false;
    for raw in &svc.load_balancer_source_ranges {
        match Cidr::parse_checked(raw) {
            Ok(c) => source_ranges.push(c),
            Err(e) => {
                // Leaving the range out would let in sources the user meant to keep out (all
                // of them, when it was the only one): no source is allowed instead.
                closed = true;
                let message = format!("loadBalancerSourceRange {raw:?} {e}; the load balancer IPs allow no source");
                r.report("InvalidSourceRange", message);
            }
        }
    }
    if closed {
        source_ranges.clear();
    }
    // What a port costs at least, before its endpoints are looked at: per family, its
    // `cluster-ips` element and one element per address (its dispatch or no-endpoint
    // element). A Service that cannot fit is refused before the ports that cannot fit are
    // built.
    let port_floor: usize = cluster_ips
        .iter()
        .map(|ip| {
            let family = IpFamily::of(ip);
            let outside: HashSet<&IpAddr> =
                external_ips.iter().chain(&load_balancer_ips).filter(|a| IpFamily::of(a) == family).collect();
            2 + outside.len()
        })
        .sum();
    let mut cost = Budget { spent: 0, cap: config.max_elements_per_service };
    let external_policy_local = traffic_policy(&svc.external_traffic_policy, "externalTrafficPolicy", &mut r)
        && (service_type != "ClusterIP" || !external_ips.is_empty());
    let internal_policy_local = traffic_policy(&svc.internal_traffic_policy, "internalTrafficPolicy", &mut r);
    let affinity_timeout = match svc.session_affinity.as_str() {
        "" | "None" => None,
        "ClientIP" => match svc.session_affinity_timeout_seconds {
            None => Some(DEFAULT_AFFINITY_TIMEOUT),
            Some(t) if (1..=86400).contains(&t) => Some(t as u32),
            Some(t) => {
                r.report(
                    "InvalidAffinityTimeout",
                    format!("session affinity timeout {t}s is outside 1..86400; using {DEFAULT_AFFINITY_TIMEOUT}s"),
                );
                Some(DEFAULT_AFFINITY_TIMEOUT)
            }
        },
        other => {
            r.report("InvalidSessionAffinity", format!("sessionAffinity {other:?} is neither None nor ClientIP"));
            None
        }
    };
    let health_check_node_port = match svc.health_check_node_port {
        Some(p) if service_type == "LoadBalancer" && external_policy_local => {
            match u16::try_from(p).ok().filter(|p| *p > 0) {
                Some(p) => Some(p),
                None => {
                    r.report("InvalidPort", format!("healthCheckNodePort {p} is not a port number"));
                    None
                }
            }
        }
        _ => None,
    };

    // Exact capacities throughout: the model of a large cluster is mostly these vectors, and
    // growth by doubling left a Service port's vector (4 slots for 1 port) 75% empty.
    let mut ports = Vec::with_capacity(svc.ports.len());
    let mut seen: BTreeSet<(&str, Protocol)> = BTreeSet::new();
    for spec in &svc.ports {
        if !spec.name.is_empty() && !is_dns_label(&spec.name) {
            r.report("InvalidPort", format!("port name {:?} is not a DNS label", spec.name));
            continue;
        }
        let Some(protocol) = Protocol::parse_k8s(&spec.protocol) else {
            r.report("InvalidProtocol", format!("port {:?} has unsupported protocol {:?}", spec.name, spec.protocol));
            continue;
        };
        let Some(port) = u16::try_from(spec.port).ok().filter(|p| *p > 0) else {
            r.report("InvalidPort", format!("port {:?} has impossible number {}", spec.name, spec.port));
            continue;
        };
        let node_port = match spec.node_port {
            Some(np) if service_type != "ClusterIP" => match u16::try_from(np).ok().filter(|p| *p > 0) {
                Some(np) => Some(np),
                None => {
                    r.report("InvalidPort", format!("port {:?} has impossible nodePort {np}", spec.name));
                    continue;
                }
            },
            _ => None,
        };
        if !seen.insert((spec.name.as_str(), protocol)) {
            r.report("DuplicatePort", format!("port {:?}/{protocol} is listed twice", spec.name));
            continue;
        }
        let name = ServicePortName {
            namespace: names.namespace.clone(),
            name: names.name.clone(),
            port: names.ports.get(&spec.name),
            protocol,
        };
        if !cost.affords(port_floor) {
            r.report("TooManyElements", cost.refusal(cost.spent.saturating_add(port_floor), "at least "));
            return Vec::new();
        }
        let (endpoints, hints) = collect_endpoints(node, families, &name, slices, r.problems);
        let outside = OutsideAccess {
            external_ips: external_ips.clone(),
            load_balancer_ips: load_balancer_ips.clone(),
            source_ranges: source_ranges.clone(),
            closed,
        };
        let mut port = ServicePort {
            name,
            port,
            cluster_ips: cluster_ips.as_slice().into(),
            node_port,
            outside: outside.boxed(),
            external_policy_local,
            internal_policy_local,
            affinity_timeout,
            health_check_node_port,
            endpoints: endpoints.into(),
            hints,
            v4: Default::default(),
            v6: Default::default(),
            counted: config.service_counters.counts(&svc.labels),
        };
        select_endpoints(node, &mut port);
        cost.spent = cost.spent.saturating_add(model.table_objects(&port));
        if cost.spent > cost.cap {
            r.report("TooManyElements", cost.refusal(cost.spent, ""));
            return Vec::new();
        }
        ports.push(port);
    }
    ports
}

/// A DNS-1123 label: what the API server admits as a namespace, a Service name or a port name.
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.is_empty()
}

pub(crate) fn select_endpoints(node: &NodeFacts, port: &mut ServicePort) {
    let input = SelectionInput {
        node_name: &node.name,
        node_zone: node.zone.as_deref(),
        internal_policy_local: port.internal_policy_local,
        external_policy_local: port.external_policy_local,
        externally_accessible: port.externally_accessible(),
    };
    for family in IpFamily::ALL {
        let selection = select(&port.endpoints, port.hints.as_deref(), family, &input);
        match family {
            IpFamily::V4 => port.v4 = selection,
            IpFamily::V6 => port.v6 = selection,
        }
    }
}

/// The endpoints of one Service port from its EndpointSlices, and their topology hints.
fn collect_endpoints<S: SliceView>(
    node: &NodeFacts,
    families: &[IpFamily],
    name: &ServicePortName,
    slices: &[S],
    problems: &mut Vec<Problem>,
) -> (Vec<Endpoint>, Option<Box<EndpointHints>>) {
    let mut endpoints: Vec<(Endpoint, TopologyHints)> = Vec::new();
    for slice in slices {
        let mut r = Reporter {
            kind: ObjectKind::EndpointSlice,
            namespace: slice.namespace(),
            name: slice.name(),
            problems: &mut *problems,
        };
        let family = match slice.address_type() {
            "IPv4" => IpFamily::V4,
            "IPv6" => IpFamily::V6,
            "FQDN" => continue,
            other => {
                r.report("InvalidAddressType", format!("addressType {other:?} is not IPv4, IPv6 or FQDN"));
                continue;
            }
        };
        if !families.contains(&family) {
            r.report(
                "UnsupportedAddressFamily",
                format!("{family} endpoints cannot be programmed: this node's kernel has no {family} support"),
            );
            continue;
        }
        for slice_port in slice.ports() {
            let protocol = Protocol::parse_k8s(&slice_port.protocol);
            if *slice_port.name != *name.port || protocol != Some(name.protocol) {
                continue;
            }
            let Some(port) = slice_port.port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0) else {
                r.report(
                    "InvalidPort",
                    format!("port {:?} has impossible number {:?}", slice_port.name, slice_port.port),
                );
                continue;
            };
            for ep in slice.endpoints() {
                let (parsed, raw, ip) = match ep.address() {
                    Some(Address::Ip(ip)) => (check_ip(ip), None, Some(ip)),
                    Some(Address::Text(raw)) => (parse_ip_checked(raw), Some(raw), None),
                    None => {
                        r.report("InvalidEndpointAddress", "an endpoint has no address".to_string());
                        continue;
                    }
                };
                // A parsed address came from its canonical spelling, which is what it prints.
                let raw = || raw.map_or_else(|| ip.map(|ip| ip.to_string()).unwrap_or_default(), str::to_string);
                let addr = match parsed {
                    Ok(addr) if let Some(kind) = refused_endpoint_address(&addr) => {
                        let message = format!(
                            "address {:?} is {kind}: the API server refuses it in an EndpointSlice, and so does verdict",
                            raw()
                        );
                        r.report("InvalidEndpointAddress", message);
                        continue;
                    }
                    Ok(addr) if IpFamily::of(&addr) == family => addr,
                    Ok(_) => {
                        r.report(
                            "InvalidEndpointAddress",
                            format!("address {:?} is not {family} as the slice's addressType says", raw()),
                        );
                        continue;
                    }
                    Err(e) => {
                        r.report("InvalidEndpointAddress", format!("address {:?} {e}", raw()));
                        continue;
                    }
                };
                let conditions = ep.conditions();
                let ready = conditions.ready.unwrap_or(true);
                let endpoint = Endpoint {
                    target: EndpointTarget { addr, port },
                    ready,
                    serving: conditions.serving.unwrap_or(ready),
                    terminating: conditions.terminating.unwrap_or(false),
                    is_local: ep.node_name() == Some(node.name.as_str()),
                };
                let hints = TopologyHints {
                    zones: ep.zone_hints().map(<[String]>::to_vec).unwrap_or_default(),
                    nodes: ep.node_hints().map(<[String]>::to_vec).unwrap_or_default(),
                };
                endpoints.push((endpoint, hints));
            }
        }
    }
    // The same address and port listed twice (two slices during a rollout): the first wins.
    endpoints.sort_by_key(|(ep, _)| ep.target);
    endpoints.dedup_by(|(later, _), (first, _)| later.target == first.target);
    let (endpoints, hints): (Vec<Endpoint>, Vec<TopologyHints>) = endpoints.into_iter().unzip();
    (endpoints, EndpointHints::boxed(hints))
}
