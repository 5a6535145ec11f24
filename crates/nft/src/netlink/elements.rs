//! NEWSETELEM and DELSETELEM messages encoded in safe Rust.
//!
//! A cold sync at 100k Services carries over a million elements; building each through a
//! libnftnl object cost about 1 µs per element, more than the kernel's own work. The layout is
//! the plain netlink TLV format libnftnl writes (a unit test compares the two byte for byte).

use super::glue::{Hdr, NFPROTO_INET};
use super::wire::{NLM_F_REQUEST, align4};

/// One element to write: key, and a verdict, data or neither, and an optional comment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ElemRef<'a> {
    pub key: &'a [u8],
    pub verdict: Option<(i32, Option<&'a str>)>,
    pub data: Option<&'a [u8]>,
    pub comment: Option<&'a str>,
}

impl ElemRef<'_> {
    /// Upper bound of the encoded size.
    pub(crate) fn size(&self) -> usize {
        let mut n = 4 + 8 + align4(self.key.len()) + 8;
        if let Some(d) = self.data {
            n += 8 + align4(d.len());
        }
        if let Some((_, chain)) = self.verdict {
            n += 20 + chain.map(|c| align4(c.len() + 1)).unwrap_or(0);
        }
        if let Some(c) = self.comment {
            n += 4 + align4(c.len() + 3);
        }
        n
    }
}

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NLA_F_NESTED: u16 = 0x8000;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;

struct Msg<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
}

impl Msg<'_> {
    fn attr(&mut self, kind: u16, value: &[u8]) {
        let len = 4 + value.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    fn strz(&mut self, kind: u16, s: &str) {
        let len = 4 + s.len() + 1;
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    /// Userdata holding one comment TLV (type 0, as nft writes element comments).
    fn comment(&mut self, kind: u16, c: &str) {
        let tlv_len = c.len() + 1;
        let len = 4 + 2 + tlv_len;
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.push(0);
        self.buf.push(u8::try_from(tlv_len).unwrap_or(u8::MAX));
        self.buf.extend_from_slice(c.as_bytes());
        self.buf.push(0);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    fn nest_start(&mut self, kind: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        at
    }

    fn nest_end(&mut self, at: usize) {
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn finish(self) {
        let len = (self.buf.len() - self.start) as u32;
        self.buf[self.start..self.start + 4].copy_from_slice(&len.to_ne_bytes());
    }
}

/// Appends one element-list message (new or delete) to `out`.
pub(crate) fn put_elements(
    out: &mut Vec<u8>,
    h: Hdr,
    table: &str,
    set: &str,
    set_id: Option<u32>,
    elems: &[ElemRef<'_>],
) {
    let start = out.len();
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | h.msg_type).to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | h.flags).to_ne_bytes());
    out.extend_from_slice(&h.seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: family, version 0, resource id 0.
    out.extend_from_slice(&[NFPROTO_INET as u8, 0, 0, 0]);
    let mut m = Msg { buf: out, start };
    m.strz(NFTA_SET_ELEM_LIST_SET, set);
    if let Some(id) = set_id {
        m.attr(NFTA_SET_ELEM_LIST_SET_ID, &id.to_be_bytes());
    }
    m.strz(NFTA_SET_ELEM_LIST_TABLE, table);
    let list = m.nest_start(NFTA_SET_ELEM_LIST_ELEMENTS);
    for (i, e) in elems.iter().enumerate() {
        let elem = m.nest_start(i as u16 + 1);
        let key = m.nest_start(NFTA_SET_ELEM_KEY);
        m.attr(NFTA_DATA_VALUE, e.key);
        m.nest_end(key);
        if let Some((code, chain)) = e.verdict {
            let data = m.nest_start(NFTA_SET_ELEM_DATA);
            let verdict = m.nest_start(NFTA_DATA_VERDICT);
            m.attr(NFTA_VERDICT_CODE, &code.to_be_bytes());
            if let Some(c) = chain {
                m.strz(NFTA_VERDICT_CHAIN, c);
            }
            m.nest_end(verdict);
            m.nest_end(data);
        }
        if let Some(d) = e.data {
            let data = m.nest_start(NFTA_SET_ELEM_DATA);
            m.attr(NFTA_DATA_VALUE, d);
            m.nest_end(data);
        }
        if let Some(c) = e.comment {
            m.comment(NFTA_SET_ELEM_USERDATA, c);
        }
        m.nest_end(elem);
    }
    m.nest_end(list);
    m.finish();
}
