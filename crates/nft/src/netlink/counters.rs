//! Reading the per-Service connection counters (`--service-counters`) back from the kernel,
//! summed per Service port and outcome. Done by the agent when `/metrics` is scraped, never
//! per packet.
//!
//! Two ways, measured in docs/benchmarks.md: [`Netlink::service_counts_of`] asks for each
//! element by its key (one GETSETELEM request per element, thousands per send): the kernel
//! does the same small work for every element, so a read grows linearly (0.x s at 100k
//! counted ports). [`Netlink::service_counts`] dumps the sets and needs no keys, but a set
//! element dump costs the kernel O(n²) (each 32 KiB reply walks the set again from its
//! start: 5.8 s at 100k counted ports).

use super::elements::{ElemRef, put_elements};
use super::glue::Hdr;
use super::{Netlink, NetlinkError, glue, wire};
use crate::render::counters::{CountedKey, Outcome, sets};
use std::collections::BTreeMap;
use verdict_model::IpFamily;

/// Element requests per send. Each draws one reply (an skb of about 1 KiB once the kernel
/// trims it) that must wait in the receive buffer until the send returns: a round must fit.
const ROUND: usize = 2048;
/// The receive buffer for a round (the kernel doubles it for its bookkeeping).
const ROUND_RECV_BUFFER: usize = 16 << 20;
const ENOENT: i32 = 2;

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
    fn add(&mut self, outcome: Outcome, elems: Vec<glue::ElemWire>) {
        for e in elems {
            // Elements without a comment or a counter are not ours to report.
            let (Some(port), Some(packets)) = (e.udata.as_deref().and_then(wire::parse_comment), e.packets) else {
                continue;
            };
            *self.0.entry((port, outcome)).or_default() += packets;
        }
    }

    fn into_counts(self) -> Vec<ServiceCount> {
        self.0.into_iter().map(|((port, outcome), connections)| ServiceCount { port, outcome, connections }).collect()
    }
}

impl Netlink {
    /// The counters of the counting-set elements `keys` in table `table` (see
    /// [`crate::render::counters::CountedKeys`]), sorted by port and outcome. An element the
    /// table does not hold (its port went away since `keys` were taken, or counting is off)
    /// is left out.
    pub fn service_counts_of<'k>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = &'k CountedKey>,
    ) -> Result<Vec<ServiceCount>, NetlinkError> {
        let mut sums = Sums::default();
        let mut keys = keys.into_iter().peekable();
        let mut names = BTreeMap::new();
        let mut buf = Vec::new();
        let mut outcomes = Vec::with_capacity(ROUND);
        self.sock.size_buffers(ROUND * 128 + 64 * 1024, ROUND_RECV_BUFFER).map_err(NetlinkError::Io)?;
        while keys.peek().is_some() {
            // One element per request, without NLM_F_ACK: each draws exactly one message back,
            // the element or an error, so a missing element costs nothing but its own answer.
            buf.clear();
            outcomes.clear();
            let first = self.next_seq(ROUND as u32);
            for k in keys.by_ref().take(ROUND) {
                let set: &String = names.entry(k.set).or_insert_with(|| k.set.name());
                let h = Hdr {
                    msg_type: glue::NFT_MSG_GETSETELEM,
                    flags: 0,
                    seq: first.wrapping_add(outcomes.len() as u32),
                };
                let elem = ElemRef { key: k.key.as_slice(), verdict: None, data: None, comment: None };
                put_elements(&mut buf, h, table, set, None, &[elem]);
                outcomes.push(k.set.outcome);
            }
            self.sock.send(&buf).map_err(NetlinkError::Io)?;
            let mut pending = outcomes.len();
            while pending > 0 {
                let n = self.sock.recv_whole(&mut self.recv_buf, true).map_err(NetlinkError::Io)?.unwrap_or(0);
                if n > self.recv_buf.len() {
                    return Err(NetlinkError::Protocol(format!("a reply of {n} bytes was cut short")));
                }
                for msg in wire::messages(&self.recv_buf[..n]) {
                    let seq = if msg.error().is_some() { msg.error_seq().unwrap_or(msg.seq) } else { msg.seq };
                    let Some(i) = seq.checked_sub(first).map(|i| i as usize).filter(|i| *i < outcomes.len()) else {
                        continue; // a stale reply to an earlier request
                    };
                    pending -= 1;
                    match msg.error() {
                        None => {
                            let mut elems = Vec::with_capacity(1);
                            if !glue::parse_elems(&mut self.scratch, msg.bytes, &mut elems) {
                                return Err(NetlinkError::Protocol("unparsable counting-set element".into()));
                            }
                            sums.add(outcomes[i], elems);
                        }
                        Some(0 | ENOENT) => {}
                        Some(errno) => return Err(NetlinkError::Io(std::io::Error::from_raw_os_error(errno))),
                    }
                }
            }
        }
        Ok(sums.into_counts())
    }

    /// The counters of every counted Service port in table `table`, by dumping the counting
    /// sets (no keys needed, but quadratic: see the module's comment), sorted by port and
    /// outcome. Empty when the table has no counting sets (counters off).
    pub fn service_counts(&mut self, table: &str) -> Result<Vec<ServiceCount>, NetlinkError> {
        let mut sums = Sums::default();
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
                sums.add(outcome, elems);
            }
        }
        Ok(sums.into_counts())
    }
}
