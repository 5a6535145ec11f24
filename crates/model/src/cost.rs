//! What one Service port costs this node's table: the objects the renderer (`verdict_nft`'s
//! `render`) writes for it, counted from the model alone, before anything is rendered. The
//! cap on what one Service may cost ([`ProxyConfig::max_elements_per_service`]) is decided on
//! this count, so that one object bounds the agent's memory and sync time whatever it asks
//! for.
//!
//! It follows the renderer's layout exactly (a test in `verdict_nft` renders many generated
//! Services and compares, port by port, so a change of layout without this count fails it):
//!
//! - every port, per family it has a ClusterIP of: its `cluster-ips` element, one hairpin
//!   element per endpoint address;
//! - the shared layout: per address (ClusterIP, external and load balancer IPs) a dispatch
//!   element and one endpoint-map element per endpoint, or one no-endpoint element; the
//!   NodePort likewise;
//! - chains of its own (affinity, Local policies): per endpoint a chain, its rules and (with
//!   affinity) its set; the policy chains with their rules and their anonymous map's entries;
//!   the external entry chain and its rules; the dispatch and no-endpoint elements;
//! - the source-range firewall: its chain, rules and `firewall-ips` elements;
//! - with `--service-counters`: its counting-set elements.
//!
//! The shared class chains and maps (one per endpoint count, whoever uses them) are not a
//! port's own and are not counted. Elements several ports share (a ClusterIP, a pod's hairpin
//! element) are counted for each port that adds them.
//!
//! [`ProxyConfig::max_elements_per_service`]: crate::ProxyConfig::max_elements_per_service

use crate::proxy_model::ProxyModel;
use crate::types::{EndpointTarget, ServicePort, Targets};
use verdict_net::IpFamily;

impl ProxyModel {
    /// The table objects `port` adds on this node, in every family it is programmed in (see
    /// the module docs for what is counted).
    pub fn table_objects(&self, port: &ServicePort) -> usize {
        self.families().into_iter().map(|f| self.table_objects_in(port, f)).fold(0, usize::saturating_add)
    }

    /// [`ProxyModel::table_objects`] for one family.
    pub fn table_objects_in(&self, port: &ServicePort, f: IpFamily) -> usize {
        if port.cluster_ip(f).is_none() {
            return 0;
        }
        let targets = port.targets(f);
        let mut pods: Vec<&EndpointTarget> = targets.cluster.iter().chain(&targets.local).collect();
        pods.sort();
        pods.dedup_by_key(|e| e.addr);
        let outside = port.outside_addresses(f).len();
        let mut n = 1 + pods.len();
        n += match port.needs_own_chains() {
            true => self.own_chains(port, f, &targets, outside),
            false => shared(port, &targets, outside),
        };
        n += self.firewall(port, f);
        if self.counts(port) {
            n += 2 * (1 + outside) + 2 * usize::from(port.node_port.is_some()) + port.firewalled_ips(f).len();
        }
        n
    }

    fn counts(&self, port: &ServicePort) -> bool {
        port.counted && self.config.service_counters.enabled()
    }

    /// Upstream's layout for one port ([`ServicePort::needs_own_chains`]).
    fn own_chains(&self, port: &ServicePort, f: IpFamily, targets: &Targets, outside: usize) -> usize {
        let node_port = usize::from(port.node_port.is_some());
        let external = node_port == 1 || outside > 0;
        let uses_cluster = !targets.cluster.is_empty() && (!port.internal_policy_local || external);
        let uses_local =
            !targets.local.is_empty() && (port.internal_policy_local || (port.external_policy_local && external));
        let affinity = usize::from(port.affinity_timeout.is_some());

        let mut endpoints: Vec<&EndpointTarget> = Vec::new();
        if uses_cluster {
            endpoints.extend(&targets.cluster);
        }
        if uses_local {
            endpoints.extend(&targets.local);
        }
        endpoints.sort();
        endpoints.dedup();
        // Its chain, the lookups that count what it DNATs, the affinity update and its set,
        // the DNAT.
        let counting = match self.counts(port) {
            true => 1 + node_port * self.nodeport_destinations(f),
            false => 0,
        };
        let per_endpoint = 1 + counting + 2 * affinity + 1;
        let mut n = endpoints.len() * per_endpoint;
        // A policy chain: per endpoint an affinity rule (with affinity) and an entry of the
        // random choice's anonymous map, and the rule that holds that map.
        let policy = |picked: &[EndpointTarget]| 1 + picked.len() * affinity + 1 + picked.len();
        if uses_cluster {
            n += policy(&targets.cluster);
        }
        if uses_local {
            n += policy(&targets.local);
        }
        n += 1; // the ClusterIP's dispatch or no-endpoint element
        if !external {
            return n;
        }
        let entries = outside + node_port;
        if !targets.has_any || targets.cluster.is_empty() {
            return n + entries;
        }
        let entry_rules = match port.external_policy_local {
            false => 2,
            true => usize::from(self.pod_match(f).is_some()) + 2 + usize::from(uses_local),
        };
        n += 1 + entry_rules + entries;
        if port.external_policy_local && targets.local.is_empty() {
            n += entries;
        }
        n
    }

    /// The rules that match NodePort destinations in family `f`: the NodePort addresses, and
    /// with localhost NodePorts 127.0.0.0/8 as well.
    fn nodeport_destinations(&self, f: IpFamily) -> usize {
        1 + usize::from(f == IpFamily::V4 && self.config.localhost_nodeports)
    }

    /// The source-range firewall of the port's load balancer IPs of family `f`.
    fn firewall(&self, port: &ServicePort, f: IpFamily) -> usize {
        let lb_ips = port.firewalled_ips(f).len();
        let ranges: Vec<_> = port.source_ranges().iter().filter(|c| c.family() == f).collect();
        if lb_ips == 0 || (ranges.is_empty() && !port.firewall_closed()) {
            return 0;
        }
        let node = self.node.addresses.iter().chain(&self.node.primary_ips);
        let node_in_range = node.into_iter().any(|a| ranges.iter().any(|r| r.contains(a)));
        let rules = ranges.len() + if node_in_range { lb_ips } else { 0 } + usize::from(self.counts(port)) + 1;
        1 + rules + lb_ips
    }
}

/// The shared layout: per address a dispatch element and one endpoint-map element per
/// endpoint, or one no-endpoint element; the NodePort likewise.
fn shared(port: &ServicePort, targets: &Targets, outside: usize) -> usize {
    let entries = 1 + outside + usize::from(port.node_port.is_some());
    match !targets.has_any || targets.cluster.is_empty() {
        true => entries,
        false => entries.saturating_mul(1 + targets.cluster.len()),
    }
}

/// What a Service's ports cost the table so far ([`ProxyModel::table_objects`]), against the
/// cap ([`crate::ProxyConfig::max_elements_per_service`]).
pub(crate) struct Budget {
    pub spent: usize,
    pub cap: usize,
}

impl Budget {
    /// Whether `more` objects still fit.
    pub fn affords(&self, more: usize) -> bool {
        self.spent.saturating_add(more) <= self.cap
    }

    /// Why the Service is left out: it would add `count` objects (`at_least`: its ports so
    /// far and the least the next one adds, the rest not built).
    pub fn refusal(&self, count: usize, at_least: &str) -> String {
        format!(
            "it would add {at_least}{count} objects to this node's table (set elements, and the chains, rules and sets \
             of ports with chains of their own), more than the {} one Service may add (--max-elements-per-service); \
             the Service is left out",
            self.cap
        )
    }
}
