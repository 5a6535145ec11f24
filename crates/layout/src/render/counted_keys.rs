//! Which counting-set elements the table holds, by Service port ([`CountedKeys`]): what a
//! reader of the counters asks the kernel for.
//!
//! It is found by rendering each counted port into a sink that keeps only counting-set
//! elements, so it lives apart from [`super::counters`] (the sets and rules themselves), which
//! the port renderer uses: together they were an import circle.

use super::counters::{CountedKey, CountingSet};
use super::{Class, ClassNames, Sink, service};
use std::collections::HashMap;
use std::sync::OnceLock;
use verdict_model::{ProxyModel, ServicePort, ServicePortName};
use verdict_nft::ruleset::{Blob, Chain, Elem, SetDecl};

/// Collects only the elements of counting sets.
struct KeySink {
    keys: Vec<CountedKey>,
}

impl Sink for KeySink {
    fn element(&mut self, set: &str, key: Blob, _elem: Elem) {
        static NAMES: OnceLock<Vec<(String, CountingSet)>> = OnceLock::new();
        let names = NAMES.get_or_init(|| CountingSet::all().map(|s| (s.name(), s)).collect());
        if let Some((_, s)) = names.iter().find(|(name, _)| name == set) {
            self.keys.push(CountedKey { set: *s, key });
        }
    }

    fn class(&mut self, class: Class) -> ClassNames {
        ClassNames::of(class)
    }

    fn chain(&mut self, _chain: Chain) {}

    fn set(&mut self, _decl: SetDecl) {}
}

/// The keys of the counting-set elements the table holds, by Service port, kept up to date
/// one port at a time alongside the table.
///
/// Reading the counters asks the kernel for each of these elements by key, which costs the
/// same for every element; a dump of the sets instead costs the kernel O(n²) (each 32 KiB
/// reply walks the set again from its start: seconds at 100k counted ports).
#[derive(Clone, Debug, Default)]
pub struct CountedKeys {
    ports: HashMap<ServicePortName, Vec<CountedKey>>,
    len: usize,
}

impl CountedKeys {
    /// The keys of every counted port of `model`.
    pub fn of_model(model: &ProxyModel) -> CountedKeys {
        let mut keys = CountedKeys::default();
        for port in model.services.values() {
            keys.update(model, &port.name, Some(port));
        }
        keys
    }

    /// Port `name` is now `port` (`None`: removed); whether its keys changed (an endpoint
    /// change leaves them as they were).
    pub fn update(&mut self, model: &ProxyModel, name: &ServicePortName, port: Option<&ServicePort>) -> bool {
        let old = self.ports.remove(name);
        if let Some(old) = &old {
            self.len -= old.len();
        }
        let mut sink = KeySink { keys: Vec::new() };
        if let Some(port) = port {
            for family in model.families() {
                service::render_counting(model, port, family, &mut sink);
            }
        }
        let changed = old.unwrap_or_default() != sink.keys;
        if !sink.keys.is_empty() {
            self.len += sink.keys.len();
            sink.keys.shrink_to_fit();
            self.ports.insert(name.clone(), sink.keys);
        }
        changed
    }

    /// How many elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &CountedKey> {
        self.ports.values().flatten()
    }
}
