//! Reading the counters of set elements back from the kernel, with the comment each element
//! carries: what a table's user needs to sum its counters by what they count (verdict-layout
//! sums the per-Service connection counters of `--service-counters` this way). Done by a
//! reader thread, never per packet.
//!
//! Two ways, measured side by side in docs/benchmarks.md. [`Netlink::element_counters_of`]
//! asks for each element by its key (GETSETELEM without NLM_F_DUMP, many keys a request,
//! many requests a send): every element costs the same (1.2 s at 100k counted ports), and
//! each is read whole. [`Netlink::element_counters`] dumps a set and needs no keys, but a set
//! element dump walks the set again from its start for every 32 KiB reply (superlinear: 2.6 ms
//! at 1k counted ports, 0.98 s at 100k), and a commit during it shifts it: it skips or
//! repeats elements (measured: 4 to 12% of the ports missed at 100k under Service churn).

use super::elements::{ElemRef, put_elements};
use super::sys::{self, Hdr};
use super::{Netlink, NetlinkError, udata};
use crate::ruleset::Blob;
use std::collections::VecDeque;
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

/// The counter of one set element that carries a comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElementCounter {
    /// The element's comment.
    pub comment: String,
    /// The packets its counter counted.
    pub packets: u64,
}

/// The elements with both a comment and a counter: the others are not ones a caller counts.
fn counted(elems: Vec<sys::ElemWire>, out: &mut Vec<ElementCounter>) {
    for e in elems {
        if let (Some(comment), Some(packets)) = (e.udata.as_deref().and_then(udata::parse_comment), e.packets) {
            out.push(ElementCounter { comment, packets });
        }
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
    /// The counters of the elements `keys` of each set `(name, keys)` of table `table`: one
    /// list per set, in the order of `sets`, of the elements that carry a comment and a
    /// counter. An element the set does not hold (it went away since the keys were taken) is
    /// left out, and so is every element of a set the table lacks (or of a table that is gone).
    pub fn element_counters_of(
        &mut self,
        table: &str,
        sets: &[(String, Vec<Blob>)],
    ) -> Result<Vec<Vec<ElementCounter>>, NetlinkError> {
        // A request for a set the table lacks fails at its first element; only the table's
        // own sets are asked (and none when the table is gone).
        let mut present = Vec::new();
        for msg in self.request(NFT_MSG_GETSET, table, None)? {
            if let Some(set) = sys::parse_set(&mut self.scratch, &msg) {
                present.push(set.name);
            }
        }
        let mut counters: Vec<Vec<ElementCounter>> = vec![Vec::new(); sets.len()];
        let mut todo: VecDeque<Run> = VecDeque::new();
        for (i, (name, keys)) in sets.iter().enumerate() {
            if !present.contains(name) {
                continue;
            }
            for start in (0..keys.len()).step_by(PER_REQUEST) {
                todo.push_back(Run { set: i, start, end: (start + PER_REQUEST).min(keys.len()) });
            }
        }
        self.sock.size_buffers(ROUND * 64 + 64 * 1024, ROUND_RECV_BUFFER).map_err(NetlinkError::Io)?;
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
                let (name, keys) = &sets[run.set];
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
                                return Err(NetlinkError::Protocol("unparsable set element".into()));
                            }
                            counted(elems, &mut counters[run.set]);
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
        Ok(counters)
    }

    /// The counters of every element of set `set` of table `table` that carries a comment and a
    /// counter, by dumping the set (no keys needed, but superlinear: see the module's comment).
    /// Empty when the table has no such set.
    pub fn element_counters(&mut self, table: &str, set: &str) -> Result<Vec<ElementCounter>, NetlinkError> {
        let mut elems = Vec::new();
        // A missing set (counters off, or a single-stack kernel) answers ENOENT: no replies.
        for msg in self.request(NFT_MSG_GETSETELEM, table, Some(set))? {
            if !sys::parse_elems(&mut self.scratch, &msg, &mut elems) {
                return Err(NetlinkError::Protocol(format!("unparsable elements of set {set}")));
            }
        }
        let mut counters = Vec::new();
        counted(elems, &mut counters);
        Ok(counters)
    }
}
