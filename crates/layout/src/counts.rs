//! The per-Service connection counters (`--service-counters`) read back from the kernel, summed
//! per Service port and outcome. verdict-nft reads the counting sets' elements and their
//! comments ([`Netlink::element_counters_of`], [`Netlink::element_counters`]); which sets those
//! are, and that a comment names a Service port, is this crate's ([`crate::render::counters`]).

use crate::render::counters::{CountedKey, CountingSet, Outcome, sets};
use std::collections::BTreeMap;
use verdict_model::IpFamily;
use verdict_nft::netlink::counters::ElementCounter;
use verdict_nft::netlink::{Netlink, NetlinkError};
use verdict_nft::ruleset::Blob;

/// New connections of one Service port with one outcome, summed over its addresses and
/// families.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceCount {
    /// The element comment: `namespace/name:port` (`namespace/name` for an unnamed port).
    pub port: String,
    /// What happened to the connections.
    pub outcome: Outcome,
    /// How many.
    pub connections: u64,
}

/// Counts summed per Service port (the element comment) and outcome.
#[derive(Default)]
struct Sums(BTreeMap<(String, Outcome), u64>);

impl Sums {
    fn add(&mut self, outcome: Outcome, counters: Vec<ElementCounter>) {
        for c in counters {
            *self.0.entry((c.comment, outcome)).or_default() += c.packets;
        }
    }

    fn into_counts(self) -> Vec<ServiceCount> {
        self.0.into_iter().map(|((port, outcome), connections)| ServiceCount { port, outcome, connections }).collect()
    }
}

/// Reading the per-Service connection counters over a [`Netlink`] socket.
pub trait ServiceCounts {
    /// The counters of the counting-set elements `keys` in table `table` (see
    /// [`crate::render::counted_keys::CountedKeys`]), sorted by port and outcome. An element
    /// the table does not hold (its port went away since `keys` were taken, or counting is
    /// off) is left out.
    fn service_counts_of<'k>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = &'k CountedKey>,
    ) -> Result<Vec<ServiceCount>, NetlinkError>;

    /// The counters of every counted Service port in table `table`, by dumping the counting
    /// sets (no keys needed, but superlinear: see [`verdict_nft::netlink::counters`]), sorted
    /// by port and outcome. Empty when the table has no counting sets (counters off).
    fn service_counts(&mut self, table: &str) -> Result<Vec<ServiceCount>, NetlinkError>;
}

impl ServiceCounts for Netlink {
    fn service_counts_of<'k>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = &'k CountedKey>,
    ) -> Result<Vec<ServiceCount>, NetlinkError> {
        let mut by_set: BTreeMap<CountingSet, Vec<Blob>> = BTreeMap::new();
        for k in keys {
            by_set.entry(k.set).or_default().push(k.key);
        }
        let (outcomes, sets): (Vec<Outcome>, Vec<(String, Vec<Blob>)>) =
            by_set.into_iter().map(|(set, keys)| (set.outcome, (set.name(), keys))).unzip();
        let mut sums = Sums::default();
        for (outcome, counters) in outcomes.into_iter().zip(self.element_counters_of(table, &sets)?) {
            sums.add(outcome, counters);
        }
        Ok(sums.into_counts())
    }

    fn service_counts(&mut self, table: &str) -> Result<Vec<ServiceCount>, NetlinkError> {
        let mut sums = Sums::default();
        for family in [IpFamily::V4, IpFamily::V6] {
            for (outcome, _, set) in sets(family) {
                sums.add(outcome, self.element_counters(table, &set)?);
            }
        }
        Ok(sums.into_counts())
    }
}
