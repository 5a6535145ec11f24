//! Reading the per-Service connection counters (`--service-counters`) back from the kernel,
//! summed per Service port and outcome. Done by the agent's reader thread, never per packet.
//!
//! Two ways, measured side by side in docs/benchmarks.md. [`Netlink::service_counts_of`]
//! asks for each element by its key (GETSETELEM without NLM_F_DUMP, many keys a request,
//! many requests a send): every element costs the same (1.2 s at 100k counted ports), and
//! each is read whole. [`Netlink::service_counts`] dumps the sets and needs no keys, but a set
//! element dump walks the set again from its start for every 32 KiB reply (superlinear: 2.6 ms
//! at 1k counted ports, 0.98 s at 100k), and a commit during it shifts it: it skips or
//! repeats elements (measured: 4 to 12% of the ports missed at 100k under Service churn).

use super::elements::{ElemRef, put_elements};
use super::sys::{self, Hdr};
use super::{Netlink, NetlinkError, udata};
use crate::render::counters::{CountedKey, CountingSet, Outcome, sets};
use crate::ruleset::Blob;
use std::collections::{BTreeMap, VecDeque};
use verdict_model::IpFamily;
use verdict_netlink::Messages;
use verdict_netlink::consts::{NFT_MSG_GETSET, NFT_MSG_GETSETELEM};

/// Elements asked for per send. Each draws one reply (an skb of about 1 KiB once the kernel
/// trims it) that must wait in the receive buffer until the send returns: a round must fit.
const ROUND: usize = 2048;
/// Elements per request: one request costs the kernel a parse and a table and set lookup.
const PER_REQUEST: usize = 128;
/// The receive buffer for a round (the kernel doubles it for its bookkeeping).
const ROUND_RECV_BUFFER: usize = 16 << 20;
const ENOENT: i32 = libc::ENOENT;

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
    fn add(&mut self, outcome: Outcome, elems: Vec<sys::ElemWire>) {
        for e in elems {
            // Elements without a comment or a counter are not ours to report.
            let (Some(port), Some(packets)) = (e.udata.as_deref().and_then(udata::parse_comment), e.packets) else {
                continue;
            };
            *self.0.entry((port, outcome)).or_default() += packets;
        }
    }

    fn into_counts(self) -> Vec<ServiceCount> {
        self.0.into_iter().map(|((port, outcome), connections)| ServiceCount { port, outcome, connections }).collect()
    }
}

/// A run of keys of one set, asked for in one request.
#[derive(Clone, Copy)]
struct Run {
    set: usize,
    start: usize,
    end: usize,
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
        // A request for a set the table lacks fails at its first element; only the table's
        // own sets are asked (and none when the table is gone).
        let mut present = Vec::new();
        for msg in self.request(NFT_MSG_GETSET, table, None)? {
            if let Some(set) = sys::parse_set(&mut self.scratch, &msg) {
                present.push(set.name);
            }
        }
        let mut by_set: BTreeMap<CountingSet, Vec<Blob>> = BTreeMap::new();
        for k in keys {
            by_set.entry(k.set).or_default().push(k.key);
        }
        by_set.retain(|set, _| present.contains(&set.name()));
        let sets: Vec<(CountingSet, String, Vec<Blob>)> =
            by_set.into_iter().map(|(set, keys)| (set, set.name(), keys)).collect();
        let mut todo: VecDeque<Run> = VecDeque::new();
        for (i, (_, _, keys)) in sets.iter().enumerate() {
            for start in (0..keys.len()).step_by(PER_REQUEST) {
                todo.push_back(Run { set: i, start, end: (start + PER_REQUEST).min(keys.len()) });
            }
        }
        self.sock.size_buffers(ROUND * 64 + 64 * 1024, ROUND_RECV_BUFFER).map_err(NetlinkError::Io)?;
        let mut sums = Sums::default();
        let mut buf = Vec::new();
        let mut round: Vec<(Run, usize, bool)> = Vec::new();
        while !todo.is_empty() {
            // Requests for up to ROUND elements, in one send. Without NLM_F_ACK each element
            // found draws one reply, and a request stops at the first element the set does
            // not hold with one error: a request is answered when all its elements or an
            // error came back.
            buf.clear();
            round.clear();
            let mut elements = 0;
            // Requests get consecutive sequence numbers from here: reply i answers round[i].
            let first = self.seq.wrapping_add(1);
            while let Some(run) =
                todo.front().copied().filter(|r| elements == 0 || elements + (r.end - r.start) <= ROUND)
            {
                todo.pop_front();
                let (_, name, keys) = &sets[run.set];
                let seq = self.next_seq(1);
                let h = Hdr { msg_type: NFT_MSG_GETSETELEM, flags: 0, seq };
                let elems: Vec<ElemRef<'_>> = keys[run.start..run.end]
                    .iter()
                    .map(|k| ElemRef { key: k.as_slice(), verdict: None, data: None, comment: None })
                    .collect();
                put_elements(&mut buf, h, table, name, None, &elems);
                elements += run.end - run.start;
                round.push((run, 0, false));
            }
            self.sock.send(&buf).map_err(NetlinkError::Io)?;
            let mut pending = round.len();
            while pending > 0 {
                let n = self.sock.recv_whole(&mut self.recv_buf, true).map_err(NetlinkError::Io)?.unwrap_or(0);
                if n > self.recv_buf.len() {
                    return Err(NetlinkError::Protocol(format!("a reply of {n} bytes was cut short")));
                }
                for msg in Messages::new(&self.recv_buf[..n]).map_while(Result::ok) {
                    let reply = msg.error();
                    let seq = reply.map_or(msg.header.seq, |e| e.request_seq().unwrap_or(msg.header.seq));
                    let error = reply.map(|e| e.errno());
                    let Some((run, answered, done)) =
                        seq.checked_sub(first).and_then(|i| round.get_mut(i as usize)).filter(|r| !r.2)
                    else {
                        continue; // a stale reply to an earlier request
                    };
                    match error {
                        None => {
                            let mut elems = Vec::with_capacity(1);
                            if !sys::parse_elems(&mut self.scratch, msg.bytes, &mut elems) {
                                return Err(NetlinkError::Protocol("unparsable counting-set element".into()));
                            }
                            sums.add(sets[run.set].0.outcome, elems);
                            *answered += 1;
                            *done = *answered == run.end - run.start;
                        }
                        // Element `answered` is gone: the rest of the run is asked again.
                        Some(ENOENT) => {
                            let rest = Run { start: run.start + *answered + 1, ..*run };
                            if rest.start < rest.end {
                                todo.push_back(rest);
                            }
                            *done = true;
                        }
                        Some(0) => *done = true,
                        Some(errno) => return Err(NetlinkError::Io(std::io::Error::from_raw_os_error(errno))),
                    }
                    if *done {
                        pending -= 1;
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
                for msg in self.request(NFT_MSG_GETSETELEM, table, Some(&set))? {
                    if !sys::parse_elems(&mut self.scratch, &msg, &mut elems) {
                        return Err(NetlinkError::Protocol(format!("unparsable elements of set {set}")));
                    }
                }
                sums.add(outcome, elems);
            }
        }
        Ok(sums.into_counts())
    }
}
