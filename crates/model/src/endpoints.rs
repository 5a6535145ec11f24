//! Which endpoints each kind of traffic may reach: upstream kube-proxy's `CategorizeEndpoints`
//! semantics (readiness, the serving-and-terminating fallback, topology hints, Local policies).

use crate::types::{Endpoint, EndpointSelection, EndpointTarget};

/// What the selection needs to know about the Service port and the node.
pub(crate) struct SelectionInput<'a> {
    pub node_name: &'a str,
    pub node_zone: Option<&'a str>,
    pub internal_policy_local: bool,
    pub external_policy_local: bool,
    pub externally_accessible: bool,
}

enum Topology {
    All,
    SameNode,
    SameZone,
}

/// Chooses the endpoints of one family (`endpoints` must all be of that family).
pub(crate) fn select(endpoints: &[&Endpoint], input: &SelectionInput<'_>) -> EndpointSelection {
    // Cluster endpoints are needed whenever internal traffic uses them, and for any externally
    // reachable port (even with externalTrafficPolicy Local, pods and the node short-circuit to
    // the cluster-wide set).
    let uses_cluster = !input.internal_policy_local || input.externally_accessible;
    let uses_local = input.internal_policy_local || (input.external_policy_local && input.externally_accessible);

    let mut selection = EndpointSelection::default();
    if uses_cluster {
        let topology = topology_from_hints(endpoints, input);
        selection.cluster = targets(endpoints, |ep| ep.ready && available(ep, &topology, input));
        if selection.cluster.is_empty() {
            // No ready endpoint anywhere (topology was already ignored if it left none), so fall
            // back to endpoints that still serve while terminating.
            selection.cluster = targets(endpoints, |ep| ep.serving && ep.terminating);
        }
        selection.has_any = !selection.cluster.is_empty();
    }
    if uses_local {
        selection.has_any |= endpoints.iter().any(|ep| ep.ready || (ep.serving && ep.terminating));
        selection.local = targets(endpoints, |ep| ep.is_local && ep.ready);
        if selection.local.is_empty() {
            selection.local = targets(endpoints, |ep| ep.is_local && ep.serving && ep.terminating);
        }
    }
    selection
}

fn targets(endpoints: &[&Endpoint], keep: impl Fn(&Endpoint) -> bool) -> Vec<EndpointTarget> {
    let mut out: Vec<EndpointTarget> = endpoints.iter().filter(|ep| keep(ep)).map(|ep| ep.target).collect();
    out.sort();
    out.dedup();
    out
}

/// Hints apply only when every ready endpoint carries them and at least one is meant for this
/// node (node hints, `trafficDistribution: PreferSameNode`) or its zone (zone hints).
fn topology_from_hints(endpoints: &[&Endpoint], input: &SelectionInput<'_>) -> Topology {
    let ready: Vec<&Endpoint> = endpoints.iter().copied().filter(|ep| ep.ready).collect();
    if ready.is_empty() {
        return Topology::All;
    }
    let all_node_hints = ready.iter().all(|ep| !ep.node_hints().is_empty());
    if all_node_hints && ready.iter().any(|ep| ep.node_hints().iter().any(|n| n == input.node_name)) {
        return Topology::SameNode;
    }
    let all_zone_hints = ready.iter().all(|ep| !ep.zone_hints().is_empty());
    if let Some(zone) = input.node_zone
        && all_zone_hints
        && ready.iter().any(|ep| ep.zone_hints().iter().any(|z| z == zone))
    {
        return Topology::SameZone;
    }
    Topology::All
}

fn available(ep: &Endpoint, topology: &Topology, input: &SelectionInput<'_>) -> bool {
    match topology {
        Topology::All => true,
        Topology::SameNode => ep.node_hints().iter().any(|n| n == input.node_name),
        Topology::SameZone => ep.zone_hints().iter().any(|z| Some(z.as_str()) == input.node_zone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TopologyHints;
    use std::net::IpAddr;

    fn ep(addr: &str, ready: bool, serving: bool, terminating: bool, local: bool) -> Endpoint {
        Endpoint {
            target: EndpointTarget { addr: addr.parse::<IpAddr>().unwrap(), port: 80 },
            ready,
            serving,
            terminating,
            is_local: local,
            hints: None,
        }
    }

    fn addrs(targets: &[EndpointTarget]) -> Vec<String> {
        targets.iter().map(|t| t.addr.to_string()).collect()
    }

    fn input(itp_local: bool, etp_local: bool, external: bool) -> SelectionInput<'static> {
        SelectionInput {
            node_name: "test-node",
            node_zone: Some("zone-a"),
            internal_policy_local: itp_local,
            external_policy_local: etp_local,
            externally_accessible: external,
        }
    }

    #[test]
    fn cluster_policy_uses_ready_endpoints_and_ignores_terminating() {
        // Upstream scenario 30: ready .1 .2 (local) and .5 (remote), plus terminating ones.
        let eps = [
            ep("10.0.1.1", true, true, false, true),
            ep("10.0.1.2", true, true, false, true),
            ep("10.0.1.3", false, true, true, true),
            ep("10.0.1.4", false, false, true, true),
            ep("10.0.1.5", true, true, false, false),
        ];
        let s = select(&eps.iter().collect::<Vec<_>>(), &input(false, false, false));
        assert_eq!(addrs(&s.cluster), ["10.0.1.1", "10.0.1.2", "10.0.1.5"]);
        assert!(s.local.is_empty());
        assert!(s.has_any);
    }

    #[test]
    fn cluster_policy_falls_back_to_serving_terminating() {
        // Upstream scenario 31: no ready endpoints, serving-terminating ones are used, never the
        // not-serving one.
        let eps = [
            ep("10.0.1.2", false, true, true, true),
            ep("10.0.1.3", false, true, true, true),
            ep("10.0.1.4", false, false, true, true),
            ep("10.0.1.5", false, true, true, false),
        ];
        let s = select(&eps.iter().collect::<Vec<_>>(), &input(false, false, false));
        assert_eq!(addrs(&s.cluster), ["10.0.1.2", "10.0.1.3", "10.0.1.5"]);
    }

    #[test]
    fn local_policy_prefers_local_ready_then_local_terminating() {
        // Upstream scenario 32: local endpoints all serving-terminating, remote ready .5.
        let eps = [
            ep("10.0.1.1", false, true, true, true),
            ep("10.0.1.2", false, true, true, true),
            ep("10.0.1.5", true, true, false, false),
        ];
        let s = select(&eps.iter().collect::<Vec<_>>(), &input(false, true, true));
        assert_eq!(addrs(&s.local), ["10.0.1.1", "10.0.1.2"]);
        assert_eq!(addrs(&s.cluster), ["10.0.1.5"]);
    }

    #[test]
    fn nothing_usable_means_no_endpoints() {
        let eps = [ep("10.0.1.4", false, false, true, true)];
        let s = select(&eps.iter().collect::<Vec<_>>(), &input(false, true, true));
        assert!(s.cluster.is_empty() && s.local.is_empty() && !s.has_any);
    }

    #[test]
    fn internal_local_without_external_access_skips_cluster_set() {
        let eps = [ep("10.0.1.1", true, true, false, true), ep("10.0.2.1", true, true, false, false)];
        let s = select(&eps.iter().collect::<Vec<_>>(), &input(true, false, false));
        assert!(s.cluster.is_empty());
        assert_eq!(addrs(&s.local), ["10.0.1.1"]);
        assert!(s.has_any);
    }

    #[test]
    fn zone_hints_apply_only_when_complete_and_matching() {
        let mut a = ep("10.0.1.1", true, true, false, false);
        let mut b = ep("10.0.1.2", true, true, false, false);
        a.hints = TopologyHints::boxed(vec!["zone-a".into()], vec![]);
        b.hints = TopologyHints::boxed(vec!["zone-b".into()], vec![]);
        let s = select(&[&a, &b], &input(false, false, false));
        assert_eq!(addrs(&s.cluster), ["10.0.1.1"]);

        // One ready endpoint without hints turns filtering off.
        let c = ep("10.0.1.3", true, true, false, false);
        let s = select(&[&a, &b, &c], &input(false, false, false));
        assert_eq!(s.cluster.len(), 3);

        // Hints for other zones only: fall back to all.
        a.hints = TopologyHints::boxed(vec!["zone-c".into()], vec![]);
        let s = select(&[&a, &b], &input(false, false, false));
        assert_eq!(s.cluster.len(), 2);
    }

    #[test]
    fn node_hints_take_precedence() {
        let mut a = ep("10.0.1.1", true, true, false, true);
        let mut b = ep("10.0.1.2", true, true, false, false);
        a.hints = TopologyHints::boxed(vec!["zone-a".into()], vec!["test-node".into()]);
        b.hints = TopologyHints::boxed(vec!["zone-a".into()], vec!["other-node".into()]);
        let s = select(&[&a, &b], &input(false, false, false));
        assert_eq!(addrs(&s.cluster), ["10.0.1.1"]);
    }
}
