//! What the health-check listeners serve, from the model.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use verdict_model::ProxyModel;

/// One Service that gets a health-check listener.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HealthTarget {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// `spec.healthCheckNodePort`.
    pub port: u16,
    /// The Service's ready endpoints on this node, counted by unique IP across its ports.
    pub local_endpoints: usize,
}

#[derive(Default)]
struct Acc {
    port: Option<u16>,
    ips: BTreeSet<IpAddr>,
}

/// The health-check targets of a model: one per Service with `externalTrafficPolicy: Local` and
/// a health-check port, sorted by namespace and name.
///
/// An endpoint counts when it runs on this node, is ready and is not terminating (a terminating
/// endpoint that still serves does not count, as upstream).
pub fn health_targets(model: &ProxyModel) -> Vec<HealthTarget> {
    let mut services: BTreeMap<(&str, &str), Acc> = BTreeMap::new();
    for sp in model.services.values() {
        let acc = services.entry((&*sp.name.namespace, &*sp.name.name)).or_default();
        if sp.external_policy_local
            && let Some(port) = sp.health_check_node_port.filter(|p| *p != 0)
        {
            acc.port.get_or_insert(port);
        }
        for ep in &sp.endpoints {
            if ep.is_local && ep.ready && !ep.terminating {
                acc.ips.insert(ep.target.addr);
            }
        }
    }
    services
        .into_iter()
        .filter_map(|((namespace, name), acc)| {
            acc.port.map(|port| HealthTarget {
                namespace: namespace.to_string(),
                name: name.to_string(),
                port,
                local_endpoints: acc.ips.len(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_model::{Endpoint, EndpointTarget, OutsideAccess, Protocol, ServicePort, ServicePortName};

    fn port(ns: &str, name: &str, port_name: &str, local: bool, hc: Option<u16>, eps: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            name: ServicePortName::new(ns, name, port_name, Protocol::Tcp),
            port: 80,
            cluster_ips: ["10.96.0.10".parse().unwrap()].into(),
            node_port: Some(30080),
            outside: OutsideAccess {
                load_balancer_ips: vec!["192.0.2.10".parse().unwrap()],
                ..OutsideAccess::default()
            }
            .boxed(),
            external_policy_local: local,
            internal_policy_local: false,
            affinity_timeout: None,
            health_check_node_port: hc,
            endpoints: eps.into(),
            hints: None,
            v4: Default::default(),
            v6: Default::default(),
            counted: false,
        }
    }

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

    impl State {
        /// The same, on this node.
        fn local(self) -> State {
            State { local: true, ..self }
        }
    }

    fn ep(addr: &str, port: u16, state: State) -> Endpoint {
        let State { ready, serving, terminating, local: is_local } = state;
        Endpoint { target: EndpointTarget { addr: addr.parse().unwrap(), port }, ready, serving, terminating, is_local }
    }

    fn model(ports: Vec<ServicePort>) -> ProxyModel {
        let mut m = ProxyModel::default();
        for p in ports {
            m.services.insert(std::sync::Arc::new(p));
        }
        m
    }

    fn target(ns: &str, name: &str, port: u16, local_endpoints: usize) -> HealthTarget {
        HealthTarget { namespace: ns.into(), name: name.into(), port, local_endpoints }
    }

    #[test]
    fn one_local_ready_endpoint_counts_one() {
        let m = model(vec![port(
            "default",
            "web",
            "",
            true,
            Some(32000),
            vec![ep("10.244.1.5", 8080, READY.local()), ep("10.244.2.5", 8080, READY)],
        )]);
        assert_eq!(health_targets(&m), vec![target("default", "web", 32000, 1)]);
    }

    #[test]
    fn two_ports_with_the_same_local_pod_ip_count_once() {
        let m = model(vec![
            port("default", "web", "http", true, Some(32000), vec![ep("10.244.1.5", 8080, READY.local())]),
            port("default", "web", "https", true, Some(32000), vec![ep("10.244.1.5", 8443, READY.local())]),
        ]);
        assert_eq!(health_targets(&m), vec![target("default", "web", 32000, 1)]);
    }

    #[test]
    fn distinct_local_pod_ips_across_ports_are_all_counted() {
        let m = model(vec![
            port("default", "web", "http", true, Some(32000), vec![ep("10.244.1.5", 8080, READY.local())]),
            port(
                "default",
                "web",
                "https",
                true,
                Some(32000),
                vec![ep("10.244.1.5", 8443, READY.local()), ep("fd00::5", 8443, READY.local())],
            ),
        ]);
        assert_eq!(health_targets(&m), vec![target("default", "web", 32000, 2)]);
    }

    #[test]
    fn a_terminating_local_endpoint_counts_zero_even_if_serving() {
        let m = model(vec![port(
            "default",
            "web",
            "",
            true,
            Some(32000),
            vec![
                ep("10.244.1.5", 8080, SERVING_TERMINATING.local()),
                ep("10.244.1.6", 8080, State { ready: true, serving: true, terminating: true, local: true }),
            ],
        )]);
        assert_eq!(health_targets(&m), vec![target("default", "web", 32000, 0)]);
    }

    #[test]
    fn remote_ready_endpoints_count_zero() {
        let m = model(vec![port(
            "default",
            "web",
            "",
            true,
            Some(32000),
            vec![ep("10.244.2.5", 8080, READY), ep("10.244.3.5", 8080, READY)],
        )]);
        assert_eq!(health_targets(&m), vec![target("default", "web", 32000, 0)]);
    }

    #[test]
    fn not_ready_local_endpoints_count_zero() {
        let m = model(vec![port(
            "default",
            "web",
            "",
            true,
            Some(32000),
            vec![ep("10.244.1.5", 8080, State { local: true, ..State::default() })],
        )]);
        assert_eq!(health_targets(&m), vec![target("default", "web", 32000, 0)]);
    }

    #[test]
    fn cluster_policy_or_no_health_check_port_has_no_target() {
        let local_ep = || vec![ep("10.244.1.5", 8080, READY.local())];
        let m = model(vec![
            port("default", "cluster", "", false, Some(32000), local_ep()),
            port("default", "no-port", "", true, None, local_ep()),
            port("default", "zero-port", "", true, Some(0), local_ep()),
        ]);
        assert_eq!(health_targets(&m), Vec::<HealthTarget>::new());
    }

    #[test]
    fn targets_are_one_per_service_and_sorted() {
        let m = model(vec![
            port("b", "web", "", true, Some(32002), vec![ep("10.244.1.7", 80, READY.local())]),
            port("a", "web", "udp", true, Some(32001), vec![]),
            port("a", "web", "tcp", true, Some(32001), vec![ep("10.244.1.6", 80, READY.local())]),
            port("a", "api", "", true, Some(32000), vec![]),
        ]);
        assert_eq!(
            health_targets(&m),
            vec![target("a", "api", 32000, 0), target("a", "web", 32001, 1), target("b", "web", 32002, 1)]
        );
    }
}
