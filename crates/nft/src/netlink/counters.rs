//! Reading the per-Service connection counters (`--service-counters`) back from the kernel:
//! one element dump of each counting set, summed per Service port and outcome. Done by the
//! agent when `/metrics` is scraped, never per packet.

use super::{Netlink, NetlinkError, glue, wire};
use crate::render::counters::{Outcome, sets};
use std::collections::BTreeMap;
use verdict_model::IpFamily;

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

impl Netlink {
    /// The counters of every counted Service port in table `table`, sorted by port and
    /// outcome. Empty when the table has no counting sets (counters off).
    pub fn service_counts(&mut self, table: &str) -> Result<Vec<ServiceCount>, NetlinkError> {
        let mut sums: BTreeMap<(String, Outcome), u64> = BTreeMap::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            for (outcome, _, set) in sets(family) {
                let mut elems = Vec::new();
                // A missing set (counters off, or a single-stack kernel) answers ENOENT: no
                // replies.
                for msg in self.request(glue::NFT_MSG_GETSETELEM, table, Some(&set))? {
                    if !glue::parse_elems(&mut self.scratch, &msg, &mut elems) {
                        return Err(NetlinkError::Protocol(format!("unparsable elements of set {set}")));
                    }
                }
                for e in elems {
                    // Elements without a comment or a counter are not ours to report.
                    let (Some(port), Some(packets)) = (e.udata.as_deref().and_then(wire::parse_comment), e.packets)
                    else {
                        continue;
                    };
                    *sums.entry((port, outcome)).or_default() += packets;
                }
            }
        }
        Ok(sums.into_iter().map(|((port, outcome), connections)| ServiceCount { port, outcome, connections }).collect())
    }
}
