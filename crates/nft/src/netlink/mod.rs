//! Talking to the kernel: one transaction per batch, sent with one system call.
//!
//! The rules measured on this kernel (docs/design.md, "Netlink") are all here: the batch goes
//! out in ONE send so that it commits atomically; socket buffers are sized to the batch; only
//! the batch end asks for an acknowledgement, so a 10^6-element batch does not flood the
//! receive queue with acks; the batch begin carries the generation id the transaction was
//! planned against, and an ERESTART (someone else committed first) is retried; element lists
//! are split below the 64 KiB attribute limit. A transaction the kernel refuses changes
//! nothing, and the error names the operation, the object and the errno.

pub mod counters;
mod elements;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod firewalls;
mod foreign;
mod glue;
pub mod monitor;
pub mod tables;
pub mod trace;
pub(crate) mod wire;

pub use foreign::TableFamily;

use crate::low::LowRule;
use crate::lower::lower;
use crate::ruleset::{Blob, DataSpec, Elem, ElemData, SetDecl, Verdict, concat_len, concat_type_id};
use crate::transaction::{Op, Transaction};
use elements::ElemRef;
use glue::{ChainWire, ElemWire, Hdr, RuleWire, Scratch, SetWire, Socket};
pub(crate) use glue::{NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_GETSET, NFT_MSG_GETSETELEM, NFT_MSG_GETTABLE};
use nix::errno::Errno;
use std::io;
use std::time::Instant;

/// What went wrong talking to the kernel.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// No socket (no CAP_NET_ADMIN, or nf_tables missing).
    #[error("cannot open a netfilter netlink socket: {0}")]
    Open(#[source] io::Error),
    /// Sending or receiving failed.
    #[error("netlink I/O failed: {0}")]
    Io(#[source] io::Error),
    /// The kernel refused the transaction; nothing was applied.
    #[error("the kernel refused operation {index} ({op}): {errno}{detail}{more}",
        detail = detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default(),
        more = if *others > 0 { format!("; {others} more operation(s) failed") } else { String::new() })]
    Rejected {
        /// Index of the first failed operation in the transaction.
        index: usize,
        /// What the operation did, to which object.
        op: String,
        /// The kernel's error.
        errno: Errno,
        /// The kernel's extended-ack message, if any.
        detail: Option<String>,
        /// How many other operations failed too.
        others: usize,
    },
    /// Other programs kept committing between our reads and our batch.
    #[error("nftables kept changing under us (generation id moved) for {0} attempts")]
    Busy(u32),
    /// The batch was planned against the table as read at this generation, and another
    /// program committed since: the kernel refused it (ERESTART), nothing was applied, and
    /// the table must be read and the batch planned again.
    #[error("nftables changed since the table was read at generation {0} (generation id moved): nothing applied")]
    Changed(u32),
    /// Replies were lost, so whether the transaction committed is unknown.
    #[error("lost netlink replies ({0}); the table must be re-read")]
    LostReplies(String),
    /// A reply made no sense.
    #[error("unexpected netlink reply: {0}")]
    Protocol(String),
}

/// What a committed transaction cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Netlink messages in the batch (begin and end included).
    pub messages: usize,
    /// Bytes sent.
    pub bytes: usize,
    /// Attempts refused with ERESTART before the one that committed.
    pub retries: u32,
    /// Time spent in the kernel's send (the kernel processes the batch inside it), microseconds.
    pub kernel_us: u64,
}

/// An encoded transaction: message bodies and which operation each message belongs to.
pub struct EncodedBatch {
    body: Vec<u8>,
    /// For message i of the body (sequence number first_seq + i): the operation's index.
    op_of_message: Vec<usize>,
    descriptions: Vec<String>,
}

impl EncodedBatch {
    /// Size of the message bodies in bytes.
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// Whether the batch holds no messages besides begin and end.
    pub fn is_empty(&self) -> bool {
        self.op_of_message.is_empty()
    }

    /// Number of messages (without begin and end).
    pub fn messages(&self) -> usize {
        self.op_of_message.len()
    }
}

/// Set flags (NFT_SET_*).
const SET_ANONYMOUS: u32 = 0x1;
const SET_CONSTANT: u32 = 0x2;
const SET_MAP: u32 = 0x8;
const SET_TIMEOUT: u32 = 0x10;
const SET_EVAL: u32 = 0x20;
/// NFT_DATA_VERDICT as a set data type.
const DATA_VERDICT: u32 = 0xffff_ff00;
/// Sequence number of the first body message; begin is one less.
const FIRST_SEQ: u32 = 2;
/// Element bytes per NEWSETELEM message: the element list is one attribute, whose length is a
/// u16.
const ELEMENT_BUDGET: usize = 60 * 1024;
const ERESTART: i32 = 85;
const MAX_ATTEMPTS: u32 = 8;

/// A netfilter netlink socket in the network namespace of the thread that opened it.
pub struct Netlink {
    sock: Socket,
    scratch: Scratch,
    recv_buf: Vec<u8>,
    seq: u32,
    /// Whether the kernel acknowledges a batch's end (see [`kernel_acks_batch_end`]).
    end_acked: bool,
    #[cfg(feature = "fault-injection")]
    faults: Option<fault::Faults>,
}

/// Whether a kernel of this release acknowledges the end message of a batch. Kernels before
/// 6.10 ignore `NLM_F_ACK` on batch begin and end (found on Debian 12's 6.1 by
/// `cargo xtask kernels`: every commit there was taken for one whose replies were lost), so
/// on those a batch whose replies were all read, with no error and no overflow, committed:
/// the kernel handles the whole batch inside the send and reports every failure, the commit's
/// own included, as an error message. A release that does not parse is treated as old.
pub fn kernel_acks_batch_end(release: &str) -> bool {
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (6, 10),
        _ => false,
    }
}

/// What the kernel answered to a batch: its errors (sequence number, errno, extended ack) and
/// the sequence numbers it acknowledged.
pub(crate) struct Replies {
    errors: Vec<(u32, i32, Option<String>)>,
    acks: Vec<u32>,
}

impl Netlink {
    /// Opens a socket (in the calling thread's network namespace).
    pub fn open() -> Result<Netlink, NetlinkError> {
        let sock = Socket::open().map_err(NetlinkError::Open)?;
        Ok(Netlink {
            sock,
            scratch: Scratch::new(),
            recv_buf: vec![0; 1 << 20],
            seq: 1 << 20,
            end_acked: kernel_acks_batch_end(
                std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            ),
            #[cfg(feature = "fault-injection")]
            faults: None,
        })
    }

    /// Injects the faults `faults` plans into the transactions this socket commits (tests only).
    #[cfg(feature = "fault-injection")]
    pub fn with_faults(mut self, faults: fault::Faults) -> Netlink {
        self.faults = Some(faults);
        self
    }

    /// Encodes a transaction (pure CPU; exposed for benchmarks and tests).
    pub fn encode(&mut self, tx: &Transaction) -> EncodedBatch {
        encode(&mut self.scratch, tx)
    }

    /// Commits a transaction atomically: all of it, or (with an error) none of it. The batch
    /// is checked against the generation current when it is sent: for a transaction that
    /// does not depend on a read of the kernel (see [`Netlink::commit_planned`]).
    pub fn commit(&mut self, tx: &Transaction) -> Result<CommitStats, NetlinkError> {
        self.commit_planned(tx, None)
    }

    /// Commits a transaction planned against the table as read at generation `read_at`: the
    /// kernel refuses it if anybody committed since ([`NetlinkError::Changed`]), so that a
    /// diff against a table that moved is never applied. `None`: as [`Netlink::commit`].
    pub fn commit_planned(&mut self, tx: &Transaction, read_at: Option<u32>) -> Result<CommitStats, NetlinkError> {
        if tx.is_empty() {
            return Ok(CommitStats::default());
        }
        let mut batch = self.encode(tx);
        self.commit_encoded_planned(&mut batch, read_at)
    }

    /// Commits a batch made by [`Netlink::encode`].
    pub fn commit_encoded(&mut self, batch: &mut EncodedBatch) -> Result<CommitStats, NetlinkError> {
        self.commit_encoded_planned(batch, None)
    }

    /// Commits a batch made by [`Netlink::encode`] (see [`Netlink::commit_planned`]). Without
    /// `read_at`, a batch that meets another program's commit between reading the generation
    /// and sending is sent again, up to 8 times.
    pub fn commit_encoded_planned(
        &mut self,
        batch: &mut EncodedBatch,
        read_at: Option<u32>,
    ) -> Result<CommitStats, NetlinkError> {
        let mut retries = 0;
        loop {
            let genid = match read_at {
                Some(g) => g,
                None => self.genid()?,
            };
            wire::set_begin_genid(&mut batch.body, genid);
            let buf = &batch.body;
            self.sock.size_buffers(buf.len() + 64 * 1024, 4 << 20).map_err(NetlinkError::Io)?;
            let (kernel_us, Replies { errors, acks }) = self.transact(buf)?;
            if errors.is_empty() {
                // Only the end's acknowledgement says the transaction committed: without it
                // (a reply lost or cut short), an error may have been lost too. Kernels that
                // never send it leave only the drained queue as the signal.
                let end_seq = FIRST_SEQ + batch.op_of_message.len() as u32;
                if self.end_acked && !acks.contains(&end_seq) {
                    return Err(NetlinkError::LostReplies("the batch end was not acknowledged".into()));
                }
                return Ok(CommitStats {
                    messages: batch.op_of_message.len() + 2,
                    bytes: buf.len(),
                    retries,
                    kernel_us,
                });
            }
            if errors.iter().any(|e| e.1 == ERESTART) {
                if let Some(g) = read_at {
                    return Err(NetlinkError::Changed(g));
                }
                retries += 1;
                if retries >= MAX_ATTEMPTS {
                    return Err(NetlinkError::Busy(retries));
                }
                continue;
            }
            let (seq, errno, detail) = errors[0].clone();
            let index = seq
                .checked_sub(FIRST_SEQ)
                .and_then(|i| batch.op_of_message.get(i as usize))
                .copied()
                .unwrap_or(usize::MAX);
            let op = batch.descriptions.get(index).cloned().unwrap_or_else(|| format!("batch message {seq}"));
            return Err(NetlinkError::Rejected {
                index,
                op,
                errno: Errno::from_raw(errno),
                detail,
                others: errors.len() - 1,
            });
        }
    }

    /// Reserves `n` sequence numbers and returns the first.
    fn next_seq(&mut self, n: u32) -> u32 {
        let first = self.seq.wrapping_add(1);
        self.seq = self.seq.wrapping_add(n);
        first
    }

    /// Sends a transaction's batch and reads the kernel's replies (in test builds, with the
    /// fault planned for it, if any), and the time the send took in microseconds.
    fn transact(&mut self, buf: &[u8]) -> Result<(u64, Replies), NetlinkError> {
        let started = Instant::now();
        #[cfg(feature = "fault-injection")]
        if let Some(f) = self.faults.as_ref().and_then(fault::Faults::next) {
            return fault::transact(self, buf, f).map(|r| (started.elapsed().as_micros() as u64, r));
        }
        self.sock.send(buf).map_err(NetlinkError::Io)?;
        let kernel_us = started.elapsed().as_micros() as u64;
        Ok((kernel_us, self.drain()?))
    }

    /// Sends a small batch built elsewhere and returns the errors it drew.
    fn send_batch(&mut self, buf: &[u8]) -> Result<Vec<(u32, i32, Option<String>)>, NetlinkError> {
        self.sock.send(buf).map_err(NetlinkError::Io)?;
        self.drain().map(|r| r.errors)
    }

    /// Reads every reply already queued (the kernel handles a batch inside the send).
    fn drain(&mut self) -> Result<Replies, NetlinkError> {
        let mut errors = Vec::new();
        let mut acks = Vec::new();
        let mut overflowed = false;
        // A reply longer than the buffer loses its tail, and with it perhaps an error: on
        // kernels that do not acknowledge the batch end (before 6.10), an error cut short
        // would otherwise leave a drained queue with no error, which is taken for a commit.
        let mut cut_short = None;
        loop {
            let n = match self.sock.recv_whole(&mut self.recv_buf, false) {
                Ok(Some(n)) if n > self.recv_buf.len() => {
                    cut_short = Some(n);
                    self.recv_buf.len()
                }
                Ok(Some(n)) => n,
                Ok(None) if overflowed => return Err(NetlinkError::LostReplies("receive queue overflowed".into())),
                Ok(None) => match cut_short {
                    Some(whole) => {
                        return Err(NetlinkError::LostReplies(format!(
                            "a reply of {whole} bytes was cut short to {}",
                            self.recv_buf.len()
                        )));
                    }
                    None => return Ok(Replies { errors, acks }),
                },
                // The kernel drops every later reply (those to the next requests too) until
                // the queue has been read empty: read on.
                Err(e) if e.raw_os_error() == Some(libc_enobufs()) => {
                    overflowed = true;
                    continue;
                }
                Err(e) => return Err(NetlinkError::Io(e)),
            };
            for msg in wire::messages(&self.recv_buf[..n]) {
                match msg.error() {
                    Some(0) => acks.push(msg.seq), // the end's acknowledgement
                    Some(errno) => {
                        let seq = msg.error_seq().unwrap_or(msg.seq);
                        errors.push((seq, errno, msg.ext_ack_text()));
                    }
                    None => {}
                }
            }
        }
    }

    /// The current ruleset generation (it changes with every commit in the namespace).
    pub fn genid(&mut self) -> Result<u32, NetlinkError> {
        let replies = self.request(glue::NFT_MSG_GETGEN, "", None)?;
        let msg = replies.first().ok_or_else(|| NetlinkError::Protocol("no reply to GETGEN".into()))?;
        glue::parse_genid(&mut self.scratch, msg)
            .ok_or_else(|| NetlinkError::Protocol("unparsable GETGEN reply".into()))
    }

    /// Sends one request and collects its replies (until NLMSG_DONE for dumps). An error reply
    /// of ENOENT yields no replies.
    fn request(&mut self, msg_type: u16, table: &str, set: Option<&str>) -> Result<Vec<Vec<u8>>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut buf = Vec::new();
        glue::put_dump_request(&mut self.scratch, &mut buf, msg_type, seq, table, set);
        self.exchange(seq, &buf)
    }

    /// Sends one request (whose sequence number is `seq`) and collects its replies, as
    /// [`Netlink::request`] does.
    fn exchange(&mut self, seq: u32, buf: &[u8]) -> Result<Vec<Vec<u8>>, NetlinkError> {
        self.sock.send(buf).map_err(NetlinkError::Io)?;
        let mut out = Vec::new();
        loop {
            let n = self.sock.recv_whole(&mut self.recv_buf, true).map_err(NetlinkError::Io)?.unwrap_or(0);
            if n > self.recv_buf.len() {
                return Err(NetlinkError::Protocol(format!(
                    "a reply of {n} bytes does not fit the {}-byte buffer",
                    self.recv_buf.len()
                )));
            }
            for msg in wire::messages(&self.recv_buf[..n]) {
                if msg.seq != seq {
                    continue; // a stale reply to an earlier request
                }
                if msg.kind == wire::NLMSG_DONE {
                    return Ok(out);
                }
                if msg.flags & 0x10 != 0 {
                    return Err(NetlinkError::Protocol("dump interrupted by a concurrent change".into()));
                }
                match msg.error() {
                    Some(0) => return Ok(out),
                    Some(2) => return Ok(Vec::new()), // ENOENT
                    Some(errno) => return Err(NetlinkError::Io(io::Error::from_raw_os_error(errno))),
                    None => {}
                }
                out.push(msg.bytes.to_vec());
                if msg.flags & wire::NLM_F_MULTI == 0 {
                    return Ok(out);
                }
            }
        }
    }

    /// Looks up the element of set `set` whose key is `key` (one request, not a dump): its
    /// data as the kernel holds it, or `None` when the set has no such element.
    pub(crate) fn get_element(&mut self, table: &str, set: &str, key: &[u8]) -> Result<Option<ElemWire>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut buf = Vec::new();
        let wanted = ElemWire { key: key.to_vec(), ..ElemWire::default() };
        let h = Hdr { msg_type: NFT_MSG_GETSETELEM, flags: 0, seq };
        glue::put_elems(&mut self.scratch, &mut buf, h, table, set, None, std::slice::from_ref(&wanted));
        let Some(reply) = self.exchange(seq, &buf)?.into_iter().next() else { return Ok(None) };
        let mut found = Vec::new();
        if !glue::parse_elems(&mut self.scratch, &reply, &mut found) {
            return Err(NetlinkError::Protocol(format!("unparsable element of set {set}")));
        }
        Ok(found.into_iter().next())
    }

    /// Dumps one table (`None` when it does not exist), with the elements of the sets
    /// `read_elements` names: an element dump is the one expensive part (quadratic in the
    /// set's size, see [`crate::snapshot`]).
    pub(crate) fn dump(
        &mut self,
        table: &str,
        read_elements: impl Fn(&str) -> bool,
    ) -> Result<Option<TableDump>, NetlinkError> {
        let tables = self.request(NFT_MSG_GETTABLE, table, None)?;
        let Some(first) = tables.first() else { return Ok(None) };
        let (_, udata) = glue::parse_table(&mut self.scratch, first)
            .ok_or_else(|| NetlinkError::Protocol("unparsable table".into()))?;
        let mut dump = TableDump { comment: udata.as_deref().and_then(wire::parse_comment), ..TableDump::default() };
        for msg in self.request(NFT_MSG_GETCHAIN, table, None)? {
            dump.chains.push(
                glue::parse_chain(&mut self.scratch, &msg)
                    .ok_or_else(|| NetlinkError::Protocol("unparsable chain".into()))?,
            );
        }
        for msg in self.request(NFT_MSG_GETSET, table, None)? {
            let set = glue::parse_set(&mut self.scratch, &msg)
                .ok_or_else(|| NetlinkError::Protocol("unparsable set".into()))?;
            let mut elems = Vec::new();
            if !read_elements(&set.name) {
                dump.sets.push((set, elems));
                continue;
            }
            for emsg in self.request(NFT_MSG_GETSETELEM, table, Some(&set.name))? {
                if !glue::parse_elems(&mut self.scratch, &emsg, &mut elems) {
                    return Err(NetlinkError::Protocol(format!("unparsable elements of set {}", set.name)));
                }
            }
            dump.sets.push((set, elems));
        }
        for msg in self.request(NFT_MSG_GETRULE, table, None)? {
            match glue::parse_rule(&mut self.scratch, &msg) {
                Some(rule) => dump.rules.push(Ok(rule)),
                None => dump.rules.push(Err(format!("{} bytes", msg.len()))),
            }
        }
        Ok(Some(dump))
    }
}

fn libc_enobufs() -> i32 {
    Errno::ENOBUFS as i32
}

/// A table as dumped, before it is read back into a ruleset.
#[derive(Debug, Default)]
pub(crate) struct TableDump {
    pub comment: Option<String>,
    pub chains: Vec<ChainWire>,
    pub sets: Vec<(SetWire, Vec<ElemWire>)>,
    /// Rules in chain order; `Err` for a rule with an expression libnftnl or verdict cannot read.
    pub rules: Vec<Result<RuleWire, String>>,
}

// ---------------------------------------------------------------- encoding

fn set_wire(decl: &SetDecl, id: u32) -> SetWire {
    let key_types = decl.key_types();
    let mut flags = 0;
    let (mut data_type, mut data_len) = (None, 0);
    match &decl.data {
        None => {}
        Some(DataSpec::Verdict) => {
            flags |= SET_MAP;
            data_type = Some(DATA_VERDICT);
        }
        Some(d @ DataSpec::Typeof(_)) => {
            flags |= SET_MAP;
            let types = d.datatypes();
            data_type = Some(concat_type_id(&types));
            data_len = concat_len(&types) as u32;
        }
    }
    if decl.timeout.is_some() {
        flags |= SET_TIMEOUT | SET_EVAL;
    }
    SetWire {
        name: decl.name.clone(),
        flags,
        key_type: concat_type_id(&key_types),
        key_len: concat_len(&key_types) as u32,
        data_type,
        data_len,
        id: Some(id),
        size: decl.size,
        timeout_ms: decl.timeout.map(|t| u64::from(t) * 1000),
        udata: wire::set_udata(decl),
        counter: decl.counter,
    }
}

fn verdict_code(v: &Verdict) -> (i32, Option<&str>) {
    use crate::low::k;
    match v {
        Verdict::Accept => (k::NF_ACCEPT, None),
        Verdict::Drop => (k::NF_DROP, None),
        Verdict::Return => (k::NFT_RETURN, None),
        Verdict::Jump(c) => (k::NFT_JUMP, Some(c)),
        Verdict::Goto(c) => (k::NFT_GOTO, Some(c)),
    }
}

fn elem_ref<'a>(key: &'a Blob, elem: Option<&'a Elem>) -> ElemRef<'a> {
    let mut r = ElemRef { key: key.as_slice(), verdict: None, data: None, comment: None };
    if let Some(e) = elem {
        match &e.data {
            None => {}
            Some(ElemData::Verdict(v)) => r.verdict = Some(verdict_code(v)),
            Some(ElemData::Value(b)) => r.data = Some(b.as_slice()),
        }
        r.comment = e.comment.as_deref();
    }
    r
}

struct Encoder<'a> {
    scratch: &'a mut Scratch,
    table: String,
    out: EncodedBatch,
    next_set_id: u32,
    op: usize,
}

impl Encoder<'_> {
    /// The header of the next message (which belongs to the current operation).
    fn hdr(&mut self, msg_type: u16, flags: u16) -> Hdr {
        self.out.op_of_message.push(self.op);
        Hdr { msg_type, flags, seq: FIRST_SEQ + self.out.op_of_message.len() as u32 - 1 }
    }

    fn elements(
        &mut self,
        msg_type: u16,
        set: &str,
        set_id: Option<u32>,
        elems: impl Iterator<Item = (Blob, Option<Elem>)>,
    ) {
        let flags = if msg_type == glue::NFT_MSG_NEWSETELEM { glue::NLM_F_CREATE } else { 0 };
        let mut chunk: Vec<(Blob, Option<Elem>)> = Vec::new();
        let mut size = 0;
        for (key, elem) in elems {
            let n = elem_ref(&key, elem.as_ref()).size();
            if size + n > ELEMENT_BUDGET && !chunk.is_empty() {
                self.put_elements(msg_type, flags, set, set_id, &chunk);
                chunk.clear();
                size = 0;
            }
            size += n;
            chunk.push((key, elem));
        }
        if !chunk.is_empty() {
            self.put_elements(msg_type, flags, set, set_id, &chunk);
        }
    }

    /// One message of elements.
    fn put_elements(
        &mut self,
        msg_type: u16,
        flags: u16,
        set: &str,
        set_id: Option<u32>,
        elems: &[(Blob, Option<Elem>)],
    ) {
        let refs: Vec<ElemRef<'_>> = elems.iter().map(|(k, e)| elem_ref(k, e.as_ref())).collect();
        let h = self.hdr(msg_type, flags);
        elements::put_elements(&mut self.out.body, h, &self.table, set, set_id, &refs);
    }

    fn rule(&mut self, chain: &str, low: &LowRule) {
        let mut anon_ids = Vec::new();
        for anon in &low.anon_sets {
            let id = self.next_set_id;
            self.next_set_id += 1;
            anon_ids.push(id);
            let mut flags = SET_ANONYMOUS | SET_CONSTANT;
            if anon.verdict_map {
                flags |= SET_MAP;
            }
            let w = SetWire {
                name: "__set%d".into(),
                flags,
                key_type: anon.key_type.id(),
                key_len: anon.key_type.bytes() as u32,
                data_type: anon.verdict_map.then_some(DATA_VERDICT),
                data_len: 0,
                id: Some(id),
                size: Some(anon.elements.len() as u32),
                timeout_ms: None,
                udata: wire::anon_set_udata(anon.key_selector, anon.verdict_map),
                counter: false,
            };
            let h = self.hdr(glue::NFT_MSG_NEWSET, glue::NLM_F_CREATE);
            glue::put_set(self.scratch, &mut self.out.body, h, &self.table, &w);
            let elems = anon
                .elements
                .iter()
                .map(|(key, verdict)| (Blob::new(key), verdict.clone().map(|v| Elem::verdict(v, None))));
            self.elements(glue::NFT_MSG_NEWSETELEM, "__set%d", Some(id), elems);
        }
        let w = RuleWire {
            chain: chain.to_string(),
            exprs: low.exprs.clone(),
            udata: low.comment.as_deref().map(wire::comment_udata),
            handle: 0,
        };
        let h = self.hdr(glue::NFT_MSG_NEWRULE, glue::NLM_F_CREATE | glue::NLM_F_APPEND);
        glue::put_rule(self.scratch, &mut self.out.body, h, &self.table, &w, &anon_ids);
    }
}

fn encode(scratch: &mut Scratch, tx: &Transaction) -> EncodedBatch {
    // Elements dominate large batches; size the buffer once instead of growing it by copies.
    let estimate: usize = tx
        .ops
        .iter()
        .map(|op| match op {
            Op::AddElements { elements, .. } => elements.len() * 96,
            Op::DeleteElements { keys, .. } => keys.len() * 48,
            _ => 512,
        })
        .sum();
    let mut e = Encoder {
        scratch,
        table: tx.table.clone(),
        out: EncodedBatch { body: Vec::with_capacity(estimate), op_of_message: Vec::new(), descriptions: Vec::new() },
        next_set_id: 1,
        op: 0,
    };
    // The batch begins with BEGIN (its generation id is filled in when sending) and ends
    // with END, so the body is sent as it is, without copying it.
    wire::put_begin(&mut e.out.body, FIRST_SEQ - 1, Some(0));
    for (i, op) in tx.ops.iter().enumerate() {
        e.op = i;
        e.out.descriptions.push(op.describe());
        let table = e.table.clone();
        match op {
            Op::AddTable(t) => {
                let udata = t.comment.as_deref().map(wire::comment_udata);
                let h = e.hdr(glue::NFT_MSG_NEWTABLE, glue::NLM_F_CREATE);
                glue::put_table(e.scratch, &mut e.out.body, h, &table, udata.as_deref());
            }
            Op::DeleteTable => {
                let h = e.hdr(glue::NFT_MSG_DELTABLE, 0);
                glue::put_table(e.scratch, &mut e.out.body, h, &table, None);
            }
            Op::AddChain { name, base } => {
                let w = ChainWire {
                    name: name.clone(),
                    hook: base.map(|b| (b.hook.number(), b.priority, b.kind.name().to_string())),
                };
                let h = e.hdr(glue::NFT_MSG_NEWCHAIN, glue::NLM_F_CREATE);
                glue::put_chain(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::FlushChain(name) => {
                let h = e.hdr(glue::NFT_MSG_DELRULE, 0);
                let w = RuleWire { chain: name.clone(), ..RuleWire::default() };
                glue::put_rule(e.scratch, &mut e.out.body, h, &table, &w, &[]);
            }
            Op::DeleteChain(name) => {
                let h = e.hdr(glue::NFT_MSG_DELCHAIN, 0);
                let w = ChainWire { name: name.clone(), hook: None };
                glue::put_chain(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::AddRule { chain, rule } => {
                let low = lower(rule);
                e.rule(chain, &low);
            }
            Op::AddSet(decl) => {
                let id = e.next_set_id;
                e.next_set_id += 1;
                let w = set_wire(decl, id);
                let h = e.hdr(glue::NFT_MSG_NEWSET, glue::NLM_F_CREATE);
                glue::put_set(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::DeleteSet(name) => {
                let h = e.hdr(glue::NFT_MSG_DELSET, 0);
                let w = SetWire { name: name.clone(), ..SetWire::default() };
                glue::put_set(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::AddElements { set, elements, .. } => {
                e.elements(glue::NFT_MSG_NEWSETELEM, set, None, elements.iter().map(|(k, v)| (k, Some(v))));
            }
            Op::DeleteElements { set, keys, .. } => {
                e.elements(glue::NFT_MSG_DELSETELEM, set, None, keys.iter().map(|k| (*k, None)));
            }
        }
    }
    let end_seq = FIRST_SEQ + e.out.op_of_message.len() as u32;
    wire::put_end(&mut e.out.body, end_seq);
    e.out
}

#[cfg(test)]
mod tests {
    use super::glue::{self, ElemWire, Scratch};

    #[test]
    fn kernels_from_6_10_acknowledge_the_batch_end() {
        for old in ["5.10.0-46-amd64", "6.1.0-56-amd64", "6.9.12", "", "weird"] {
            assert!(!super::kernel_acks_batch_end(old), "{old}");
        }
        for new in ["6.10.0", "6.12.118+deb13-amd64", "6.18.44-fc-v782", "7.0.1"] {
            assert!(super::kernel_acks_batch_end(new), "{new}");
        }
    }

    fn sample() -> Vec<ElemWire> {
        vec![
            ElemWire {
                key: vec![172, 30, 0, 41, 6, 0, 0, 0, 0, 80, 0, 0],
                verdict: Some((-4, Some("endpoints-2".into()))),
                data: None,
                udata: Some(super::wire::comment_udata("ns1/web:http")),
                packets: None,
            },
            ElemWire {
                key: vec![172, 30, 0, 41, 6, 0, 0, 0, 0, 80, 0, 0, 1, 0, 0, 0],
                verdict: None,
                data: Some(vec![10, 180, 0, 1, 0x1f, 0x90, 0, 0]),
                udata: None,
                packets: None,
            },
            ElemWire { key: vec![10, 0, 0, 1], verdict: Some((0, None)), ..ElemWire::default() },
            ElemWire { key: vec![6], ..ElemWire::default() },
        ]
    }

    #[test]
    fn element_messages_match_libnftnl_byte_for_byte() {
        let elems = sample();
        for (msg_type, flags, set_id) in [
            (glue::NFT_MSG_NEWSETELEM, glue::NLM_F_CREATE, None),
            (glue::NFT_MSG_DELSETELEM, 0, None),
            (glue::NFT_MSG_NEWSETELEM, glue::NLM_F_CREATE, Some(7)),
        ] {
            let refs: Vec<super::ElemRef<'_>> = elems
                .iter()
                .map(|e| super::ElemRef {
                    key: &e.key,
                    verdict: e.verdict.as_ref().map(|(c, ch)| (*c, ch.as_deref())),
                    data: e.data.as_deref(),
                    comment: e.udata.as_deref().and_then(super::wire::parse_comment).map(|c| &*c.leak()),
                })
                .collect();
            let mut ours = Vec::new();
            let h = glue::Hdr { msg_type, flags, seq: 42 };
            super::elements::put_elements(&mut ours, h, "kube-proxy", "service-ips", set_id, &refs);
            let mut theirs = Vec::new();
            glue::put_elems(&mut Scratch::new(), &mut theirs, h, "kube-proxy", "service-ips", set_id, &elems);
            assert_eq!(ours, theirs, "message type {msg_type}");
        }
    }
}
