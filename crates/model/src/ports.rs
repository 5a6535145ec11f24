//! The model's Service ports, ordered by name.
//!
//! Each port already holds its name, so the index holds only the port: as a map from name to
//! port it repeated the 56-byte name in every entry and cost 120 bytes per Service port at
//! 100k Services; as a set of ports ordered by their names it costs about 20.

use crate::types::{ServicePort, ServicePortName};
use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Service ports, one per name, in name order.
#[derive(Clone, Debug, Default)]
pub struct ServicePorts(BTreeSet<ByName>);

/// Two tables are equal when their ports are, not only their names.
impl PartialEq for ServicePorts {
    fn eq(&self, other: &ServicePorts) -> bool {
        self.len() == other.len() && self.values().zip(other.values()).all(|(a, b)| a == b)
    }
}

/// A port, ordered and compared by its name alone (as the set needs).
#[derive(Clone, Debug)]
struct ByName(Arc<ServicePort>);

impl PartialEq for ByName {
    fn eq(&self, other: &ByName) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &ByName) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByName {
    fn cmp(&self, other: &ByName) -> std::cmp::Ordering {
        self.0.name.cmp(&other.0.name)
    }
}

impl Borrow<ServicePortName> for ByName {
    fn borrow(&self) -> &ServicePortName {
        &self.0.name
    }
}

impl ServicePorts {
    /// The port called `name`.
    pub fn get(&self, name: &ServicePortName) -> Option<&Arc<ServicePort>> {
        self.0.get(name).map(|p| &p.0)
    }

    /// Whether a port is called `name`.
    pub fn contains_key(&self, name: &ServicePortName) -> bool {
        self.0.contains(name)
    }

    /// Adds `port`, replacing the one of the same name, which is returned.
    pub fn insert(&mut self, port: Arc<ServicePort>) -> Option<Arc<ServicePort>> {
        self.0.replace(ByName(port)).map(|p| p.0)
    }

    /// Removes the port called `name`.
    pub fn remove(&mut self, name: &ServicePortName) -> Option<Arc<ServicePort>> {
        self.0.take(name).map(|p| p.0)
    }

    /// Keeps the ports `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&ServicePort) -> bool) {
        self.0.retain(|p| keep(&p.0));
    }

    /// How many ports.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The ports, in name order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Arc<ServicePort>> + ExactSizeIterator + Clone {
        self.0.iter().map(|p| &p.0)
    }

    /// The ports' names, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &ServicePortName> + ExactSizeIterator + Clone {
        self.0.iter().map(|p| &p.0.name)
    }

    /// (name, port), in name order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.0.iter())
    }
}

/// (name, port) of [`ServicePorts`], in name order.
#[derive(Clone)]
pub struct Iter<'a>(std::collections::btree_set::Iter<'a, ByName>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a ServicePortName, &'a Arc<ServicePort>);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|p| (&p.0.name, &p.0))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|p| (&p.0.name, &p.0))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ServicePorts {
    type Item = (&'a ServicePortName, &'a Arc<ServicePort>);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<Arc<ServicePort>> for ServicePorts {
    /// Of ports of one name, the last is kept.
    fn from_iter<I: IntoIterator<Item = Arc<ServicePort>>>(ports: I) -> ServicePorts {
        let mut out = ServicePorts::default();
        for p in ports {
            out.insert(p);
        }
        out
    }
}

impl FromIterator<ServicePort> for ServicePorts {
    fn from_iter<I: IntoIterator<Item = ServicePort>>(ports: I) -> ServicePorts {
        ports.into_iter().map(Arc::new).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use verdict_net::Protocol;

    /// A ClusterIP port of Service `ns/name` without endpoints.
    pub(crate) fn port(name: &str, number: u16) -> Arc<ServicePort> {
        Arc::new(ServicePort {
            name: ServicePortName::new("ns", name, "", Protocol::Tcp),
            port: number,
            cluster_ips: ["10.96.0.1".parse().unwrap()].into(),
            node_port: None,
            outside: None,
            external_policy_local: false,
            internal_policy_local: false,
            affinity_timeout: None,
            health_check_node_port: None,
            endpoints: Box::default(),
            hints: None,
            v4: Default::default(),
            v6: Default::default(),
            counted: false,
        })
    }

    #[test]
    fn ports_are_found_replaced_and_removed_by_name_in_name_order() {
        let mut ports: ServicePorts = [port("b", 1), port("a", 2), port("c", 3)].into_iter().collect();
        assert_eq!(ports.keys().map(|n| &*n.name).collect::<Vec<_>>(), ["a", "b", "c"]);
        let b = ServicePortName::new("ns", "b", "", Protocol::Tcp);
        assert_eq!(ports.get(&b).map(|p| p.port), Some(1));

        let old = ports.insert(port("b", 9));
        assert_eq!(old.map(|p| p.port), Some(1), "the replaced port is returned");
        assert_eq!(ports.get(&b).map(|p| p.port), Some(9), "and the new one is held");
        assert_eq!(ports.len(), 3);

        assert_eq!(ports.remove(&b).map(|p| p.port), Some(9));
        assert!(!ports.contains_key(&b));
        assert_eq!(ports.iter().map(|(n, p)| (&*n.name, p.port)).collect::<Vec<_>>(), [("a", 2), ("c", 3)]);
    }

    #[test]
    fn tables_are_equal_when_their_ports_are() {
        let one: ServicePorts = [port("a", 1), port("b", 2)].into_iter().collect();
        let same: ServicePorts = [port("b", 2), port("a", 1)].into_iter().collect();
        let other: ServicePorts = [port("a", 1), port("b", 3)].into_iter().collect();
        assert_eq!(one, same);
        assert_ne!(one, other, "same names, a different port");
    }
}
