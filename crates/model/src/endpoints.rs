//! Which endpoints each kind of traffic may reach: upstream kube-proxy's `CategorizeEndpoints`
//! semantics (readiness, the serving-and-terminating fallback, topology hints, Local policies).

use crate::types::{Endpoint, EndpointHints, EndpointSelection, Picks};
use verdict_net::IpFamily;

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

/// Chooses the endpoints of `family` among a port's endpoints (sorted, one per target, with
/// their topology hints by index): the selection holds their indexes in `all`.
pub(crate) fn select(
    all: &[Endpoint],
    hints: Option<&EndpointHints>,
    family: IpFamily,
    input: &SelectionInput<'_>,
) -> EndpointSelection {
    let endpoints: Vec<(usize, &Endpoint)> =
        all.iter().enumerate().filter(|(_, ep)| IpFamily::of(&ep.target.addr) == family).collect();
    let picks = |keep: &dyn Fn(usize, &Endpoint) -> bool| {
        let mut picks = Picks::for_endpoints(all.len());
        for (i, ep) in &endpoints {
            if keep(*i, ep) {
                picks.insert(*i);
            }
        }
        picks
    };
    // Cluster endpoints are needed whenever internal traffic uses them, and for any externally
    // reachable port (even with externalTrafficPolicy Local, pods and the node short-circuit to
    // the cluster-wide set).
    let uses_cluster = !input.internal_policy_local || input.externally_accessible;
    let uses_local = input.internal_policy_local || (input.external_policy_local && input.externally_accessible);

    let mut selection = EndpointSelection::default();
    if uses_cluster {
        let topology = topology_from_hints(&endpoints, hints, input);
        selection.cluster = picks(&|i, ep| ep.ready && available(i, hints, &topology, input));
        if selection.cluster.is_empty() {
            // No ready endpoint anywhere (topology was already ignored if it left none), so fall
            // back to endpoints that still serve while terminating.
            selection.cluster = picks(&|_, ep| ep.serving && ep.terminating);
        }
        selection.has_any = !selection.cluster.is_empty();
    }
    if uses_local {
        selection.has_any |= endpoints.iter().any(|(_, ep)| ep.ready || (ep.serving && ep.terminating));
        selection.local = picks(&|_, ep| ep.is_local && ep.ready);
        if selection.local.is_empty() {
            selection.local = picks(&|_, ep| ep.is_local && ep.serving && ep.terminating);
        }
    }
    selection
}

/// Hints apply only when every ready endpoint carries them and at least one is meant for this
/// node (node hints, `trafficDistribution: PreferSameNode`) or its zone (zone hints).
fn topology_from_hints(
    endpoints: &[(usize, &Endpoint)],
    hints: Option<&EndpointHints>,
    input: &SelectionInput<'_>,
) -> Topology {
    let ready: Vec<usize> = endpoints.iter().filter(|(_, ep)| ep.ready).map(|(i, _)| *i).collect();
    if ready.is_empty() || hints.is_none() {
        return Topology::All;
    }
    let nodes = |i: &usize| EndpointHints::nodes(hints, *i);
    let zones = |i: &usize| EndpointHints::zones(hints, *i);
    let all_node_hints = ready.iter().all(|i| !nodes(i).is_empty());
    if all_node_hints && ready.iter().any(|i| nodes(i).iter().any(|n| n == input.node_name)) {
        return Topology::SameNode;
    }
    let all_zone_hints = ready.iter().all(|i| !zones(i).is_empty());
    if let Some(zone) = input.node_zone
        && all_zone_hints
        && ready.iter().any(|i| zones(i).iter().any(|z| z == zone))
    {
        return Topology::SameZone;
    }
    Topology::All
}

fn available(i: usize, hints: Option<&EndpointHints>, topology: &Topology, input: &SelectionInput<'_>) -> bool {
    match topology {
        Topology::All => true,
        Topology::SameNode => EndpointHints::nodes(hints, i).iter().any(|n| n == input.node_name),
        Topology::SameZone => EndpointHints::zones(hints, i).iter().any(|z| Some(z.as_str()) == input.node_zone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EndpointTarget, TopologyHints};
    use std::net::IpAddr;

    /// An endpoint's conditions and where it runs, by name: [`ep`] took them as four
    /// positional booleans, which a reader could not tell apart.
    #[derive(Clone, Copy, Default)]
    struct State {
        ready: bool,
        serving: bool,
        terminating: bool,
        local: bool,
    }

    /// Ready (and so serving), not terminating, on another node.
    const READY: State = State { ready: true, serving: true, terminating: false, local: false };
    /// Terminating but still serving: used when no endpoint is ready.
    const SERVING_TERMINATING: State = State { ready: false, serving: true, terminating: true, local: false };
    /// Terminating and no longer serving: never used.
    const TERMINATING: State = State { ready: false, serving: false, terminating: true, local: false };

    impl State {
        /// The same, on this node.
        fn local(self) -> State {
            State { local: true, ..self }
        }
    }

    fn ep(addr: &str, state: State) -> Endpoint {
        let State { ready, serving, terminating, local } = state;
        Endpoint {
            target: EndpointTarget { addr: addr.parse::<IpAddr>().unwrap(), port: 80 },
            ready,
            serving,
            terminating,
            is_local: local,
        }
    }

    fn hinted(zones: &[&str], nodes: &[&str]) -> TopologyHints {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        TopologyHints { zones: owned(zones), nodes: owned(nodes) }
    }

    /// The addresses chosen for IPv4 traffic.
    struct Chosen {
        cluster: Vec<String>,
        local: Vec<String>,
        has_any: bool,
    }

    fn run(eps: &[Endpoint], input: &SelectionInput<'_>) -> Chosen {
        run_hinted(eps, Vec::new(), input)
    }

    fn run_hinted(eps: &[Endpoint], hints: Vec<TopologyHints>, input: &SelectionInput<'_>) -> Chosen {
        let hints = EndpointHints::boxed(hints);
        let s = select(eps, hints.as_deref(), IpFamily::V4, input);
        let addrs = |picks: &Picks| picks.iter().map(|i| eps[i].target.addr.to_string()).collect();
        Chosen { cluster: addrs(&s.cluster), local: addrs(&s.local), has_any: s.has_any }
    }

    /// The Service's traffic policies, by name rather than by position.
    #[derive(Default)]
    struct Policies {
        internal_local: bool,
        external_local: bool,
        externally_accessible: bool,
    }

    fn input(p: Policies) -> SelectionInput<'static> {
        SelectionInput {
            node_name: "test-node",
            node_zone: Some("zone-a"),
            internal_policy_local: p.internal_local,
            external_policy_local: p.external_local,
            externally_accessible: p.externally_accessible,
        }
    }

    #[test]
    fn cluster_policy_uses_ready_endpoints_and_ignores_terminating() {
        // Upstream scenario 30: ready .1 .2 (local) and .5 (remote), plus terminating ones.
        let eps = [
            ep("10.0.1.1", READY.local()),
            ep("10.0.1.2", READY.local()),
            ep("10.0.1.3", SERVING_TERMINATING.local()),
            ep("10.0.1.4", TERMINATING.local()),
            ep("10.0.1.5", READY),
        ];
        let s = run(&eps, &input(Policies::default()));
        assert_eq!(s.cluster, ["10.0.1.1", "10.0.1.2", "10.0.1.5"]);
        assert!(s.local.is_empty());
        assert!(s.has_any);
    }

    #[test]
    fn cluster_policy_falls_back_to_serving_terminating() {
        // Upstream scenario 31: no ready endpoints, serving-terminating ones are used, never the
        // not-serving one.
        let eps = [
            ep("10.0.1.2", SERVING_TERMINATING.local()),
            ep("10.0.1.3", SERVING_TERMINATING.local()),
            ep("10.0.1.4", TERMINATING.local()),
            ep("10.0.1.5", SERVING_TERMINATING),
        ];
        let s = run(&eps, &input(Policies::default()));
        assert_eq!(s.cluster, ["10.0.1.2", "10.0.1.3", "10.0.1.5"]);
    }

    #[test]
    fn local_policy_prefers_local_ready_then_local_terminating() {
        // Upstream scenario 32: local endpoints all serving-terminating, remote ready .5.
        let eps = [
            ep("10.0.1.1", SERVING_TERMINATING.local()),
            ep("10.0.1.2", SERVING_TERMINATING.local()),
            ep("10.0.1.5", READY),
        ];
        let s =
            run(&eps, &input(Policies { external_local: true, externally_accessible: true, ..Policies::default() }));
        assert_eq!(s.local, ["10.0.1.1", "10.0.1.2"]);
        assert_eq!(s.cluster, ["10.0.1.5"]);
    }

    #[test]
    fn large_ports_pick_beyond_64_endpoints() {
        let eps: Vec<Endpoint> = (0..150)
            .map(|i| {
                ep(
                    &format!("10.0.{}.{}", i / 100, i % 100 + 1),
                    State { ready: i % 2 == 1, serving: true, local: i >= 140, ..State::default() },
                )
            })
            .collect();
        let s =
            run(&eps, &input(Policies { external_local: true, externally_accessible: true, ..Policies::default() }));
        assert_eq!(s.cluster.len(), 75);
        assert_eq!(s.cluster.last().map(String::as_str), Some("10.0.1.50"));
        assert_eq!(s.local, ["10.0.1.42", "10.0.1.44", "10.0.1.46", "10.0.1.48", "10.0.1.50"]);
    }

    #[test]
    fn nothing_usable_means_no_endpoints() {
        let eps = [ep("10.0.1.4", TERMINATING.local())];
        let s =
            run(&eps, &input(Policies { external_local: true, externally_accessible: true, ..Policies::default() }));
        assert!(s.cluster.is_empty() && s.local.is_empty() && !s.has_any);
    }

    #[test]
    fn internal_local_without_external_access_skips_cluster_set() {
        let eps = [ep("10.0.1.1", READY.local()), ep("10.0.2.1", READY)];
        let s = run(&eps, &input(Policies { internal_local: true, ..Policies::default() }));
        assert!(s.cluster.is_empty());
        assert_eq!(s.local, ["10.0.1.1"]);
        assert!(s.has_any);
    }

    #[test]
    fn zone_hints_apply_only_when_complete_and_matching() {
        let a = ep("10.0.1.1", READY);
        let b = ep("10.0.1.2", READY);
        let (in_a, in_b) = (hinted(&["zone-a"], &[]), hinted(&["zone-b"], &[]));
        let s = run_hinted(&[a.clone(), b.clone()], vec![in_a.clone(), in_b.clone()], &input(Policies::default()));
        assert_eq!(s.cluster, ["10.0.1.1"]);

        // One ready endpoint without hints turns filtering off.
        let c = ep("10.0.1.3", READY);
        let hints = vec![in_a.clone(), in_b.clone(), TopologyHints::default()];
        let s = run_hinted(&[a.clone(), b.clone(), c], hints, &input(Policies::default()));
        assert_eq!(s.cluster.len(), 3);

        // Hints for other zones only: fall back to all.
        let s = run_hinted(&[a.clone(), b.clone()], vec![hinted(&["zone-c"], &[]), in_b], &input(Policies::default()));
        assert_eq!(s.cluster.len(), 2);
    }

    #[test]
    fn node_hints_take_precedence() {
        let a = ep("10.0.1.1", READY.local());
        let b = ep("10.0.1.2", READY);
        let hints = vec![hinted(&["zone-a"], &["test-node"]), hinted(&["zone-a"], &["other-node"])];
        let s = run_hinted(&[a.clone(), b.clone()], hints, &input(Policies::default()));
        assert_eq!(s.cluster, ["10.0.1.1"]);
    }

    #[test]
    fn hints_follow_their_endpoint_by_index() {
        // The hinted endpoint for this zone is the second: reading hints by a wrong index picks
        // the first.
        let eps = [ep("10.0.1.1", READY), ep("10.0.1.2", READY)];
        let s = run_hinted(&eps, vec![hinted(&["zone-b"], &[]), hinted(&["zone-a"], &[])], &input(Policies::default()));
        assert_eq!(s.cluster, ["10.0.1.2"]);
    }
}
