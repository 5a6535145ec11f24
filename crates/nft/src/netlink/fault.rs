//! Injected kernel failures, for tests only (cargo feature `fault-injection`, which only test
//! builds enable, and which does nothing until a test hands a [`Faults`] plan to
//! [`Netlink::with_faults`]).
//!
//! Each fault is made as real as the kernel allows, at the boundary where it happens, so that
//! what a test sees afterwards is what the kernel really did, not what a mock claims:
//!
//! | fault | what is sent | what the kernel does |
//! |---|---|---|
//! | [`Fault::Restart`] | the batch, its begin carrying a stale generation id | refuses it with ERESTART, applies nothing |
//! | [`Fault::Busy`] | the batch plus, before its end, a scratch table with a chain and the table's non-recursive deletion | refuses that deletion with EBUSY, so aborts the whole batch |
//! | [`Fault::NoBuffers`] | the batch with every message asking for an ACK, into a minimal receive buffer | commits, then drops ACKs it cannot queue and reports ENOBUFS |
//! | [`Fault::NoMemory`] | nothing (a kernel out of memory aborts the transaction, so nothing is what it applies) | nothing; the batch is reported refused with ENOMEM |
//! | [`Fault::ShortRead`] | the batch, unchanged | commits (or refuses it); its replies are read into 8 bytes, so each is cut short (before 6.10 a commit draws no reply, so there is nothing to cut) |
//!
//! A fault applies to batches as they are sent: the ERESTART retries of one transaction count
//! one each.

use super::sys::{self, ChainWire, Hdr};
use super::{Netlink, NetlinkError, Replies, framing};
use nix::errno::Errno;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use verdict_netlink::consts::{
    NFT_MSG_DELTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_NEWTABLE, NLM_F_ACK, NLM_F_CREATE, NLM_F_NONREC,
};
use verdict_netlink::{Messages, NLMSG_HDRLEN, align};

/// One kind of kernel failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// EBUSY from the kernel for one operation: the whole transaction is refused.
    Busy,
    /// ENOBUFS: the kernel committed, but its replies overflowed the receive queue.
    NoBuffers,
    /// ERESTART: the generation moved between planning and sending.
    Restart,
    /// ENOMEM (synthetic: the batch is not sent).
    NoMemory,
    /// The transaction committed, but its acknowledgement was read short.
    ShortRead,
}

/// One batch a fault was injected into.
#[derive(Clone, Copy, Debug)]
pub struct Injected {
    /// When it was sent (or, for [`Fault::NoMemory`], not sent).
    pub at: Instant,
    /// Which fault.
    pub fault: Fault,
    /// Its number among the batches this plan has seen (1 = the first).
    pub batch: u64,
}

#[derive(Debug, Default)]
struct Plan {
    /// Batches seen so far.
    batches: u64,
    /// Batches `first..=last` (numbered as `batches`) get `fault`.
    window: Option<(u64, u64, Fault)>,
    injected: Vec<Injected>,
}

/// A plan of faults, shared between a test and the [`Netlink`] it was given to.
#[derive(Clone, Debug, Default)]
pub struct Faults(Arc<Mutex<Plan>>);

impl Faults {
    /// A plan that injects nothing yet.
    pub fn new() -> Faults {
        Faults::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets `skip` more batches through, then makes the `times` after them fail with `fault`
    /// (`u64::MAX`: until [`Faults::clear`]). Replaces what was planned before.
    pub fn fail(&self, fault: Fault, skip: u64, times: u64) {
        let mut p = self.lock();
        let first = p.batches + skip + 1;
        p.window = (times > 0).then(|| (first, first.saturating_add(times - 1), fault));
    }

    /// Stops injecting.
    pub fn clear(&self) {
        self.lock().window = None;
    }

    /// Batches seen so far (failed or not).
    pub fn batches(&self) -> u64 {
        self.lock().batches
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> Vec<Injected> {
        self.lock().injected.clone()
    }

    /// Counts one batch; the fault it must get, if any.
    pub(super) fn next(&self) -> Option<Fault> {
        let mut p = self.lock();
        p.batches += 1;
        let n = p.batches;
        let (first, last, fault) = p.window?;
        if n < first || n > last {
            return None;
        }
        p.injected.push(Injected { at: Instant::now(), fault, batch: n });
        Some(fault)
    }
}

/// The batch end's length: a header and an nfgenmsg.
const END_LEN: usize = NLMSG_HDRLEN + 4;
/// Sequence numbers of the scratch messages: far from the batch's own (which start at 1), so
/// an error names them as foreign to the transaction.
const SCRATCH_SEQ: u32 = 0xfa17_0000;
const SCRATCH_TABLE: &str = "verdict-fault-injection";

/// Sends `batch` (which starts with a batch begin and ends with a batch end) with `fault`, and
/// reads the replies as the normal path would.
pub(super) fn transact(nl: &mut Netlink, batch: &[u8], fault: Fault) -> Result<Replies, NetlinkError> {
    tracing::warn!(?fault, "injecting a kernel failure (test build)");
    match fault {
        Fault::Restart => {
            let mut copy = batch.to_vec();
            let at = framing::GENID_AT;
            let genid = u32::from_be_bytes(copy[at..at + 4].try_into().expect("4"));
            // Any other value than the current generation; 0 would mean "do not check".
            framing::set_begin_genid(&mut copy, genid.wrapping_add(0x8000_0000).max(1));
            nl.sock.send(&copy).map_err(NetlinkError::Io)?;
            nl.drain()
        }
        Fault::Busy => {
            let mut copy = batch[..batch.len() - END_LEN].to_vec();
            let h = |msg_type, flags, k| Hdr { msg_type, flags, seq: SCRATCH_SEQ + k };
            sys::put_table(&mut nl.scratch, &mut copy, h(NFT_MSG_NEWTABLE, NLM_F_CREATE, 0), SCRATCH_TABLE, None);
            let chain = ChainWire { name: "c".into(), ..ChainWire::default() };
            sys::put_chain(&mut nl.scratch, &mut copy, h(NFT_MSG_NEWCHAIN, NLM_F_CREATE, 1), SCRATCH_TABLE, &chain);
            sys::put_table(&mut nl.scratch, &mut copy, h(NFT_MSG_DELTABLE, NLM_F_NONREC, 2), SCRATCH_TABLE, None);
            copy.extend_from_slice(&batch[batch.len() - END_LEN..]);
            nl.sock.send(&copy).map_err(NetlinkError::Io)?;
            nl.drain()
        }
        Fault::NoBuffers => {
            let mut copy = batch.to_vec();
            let mut at = 0;
            while let Some(Ok(msg)) = Messages::new(&copy[at..]).next() {
                let (len, flags) = (msg.header.len as usize, msg.header.flags | NLM_F_ACK);
                copy[at + 6..at + 8].copy_from_slice(&flags.to_ne_bytes());
                at += align(len);
            }
            // The kernel rounds 0 up to its minimum; the overflow happens inside the send, so
            // the normal size is back before anything is read.
            nl.sock.size_buffers(copy.len() + 64 * 1024, 0).map_err(NetlinkError::Io)?;
            let sent = nl.sock.send(&copy).map_err(NetlinkError::Io);
            nl.sock.size_buffers(copy.len() + 64 * 1024, 4 << 20).map_err(NetlinkError::Io)?;
            sent?;
            nl.drain()
        }
        Fault::NoMemory => Ok(Replies {
            errors: vec![(super::FIRST_SEQ, Errno::ENOMEM as i32, Some("injected: batch not sent".into()))],
            acks: Vec::new(),
        }),
        Fault::ShortRead => {
            nl.sock.send(batch).map_err(NetlinkError::Io)?;
            let full = std::mem::replace(&mut nl.recv_buf, vec![0; 8]);
            let replies = nl.drain();
            nl.recv_buf = full;
            replies
        }
    }
}
