//! Building a message in place: the header, a family header, attributes and nests, appended
//! to a caller's buffer (a batch is many messages in one buffer, sent with one `send`).

use crate::attr::NLA_HDRLEN;
use crate::attr::align;
use crate::consts::{NFNETLINK_V0, NLA_F_NESTED, NLM_F_REQUEST};
use crate::frame::NLMSG_HDRLEN;

/// One message being appended to a buffer; [`Writer::finish`] writes its length.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
}

/// An open nested attribute: close it with [`Writer::end`], which writes its length.
#[derive(Debug)]
#[must_use = "a nest must be closed with Writer::end"]
pub struct Nest(usize);

impl<'a> Writer<'a> {
    /// Starts a message of type `kind` with `NLM_F_REQUEST | flags`; the port id is 0 (the
    /// kernel's).
    pub fn new(buf: &'a mut Vec<u8>, kind: u16, flags: u16, seq: u32) -> Writer<'a> {
        let start = buf.len();
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        debug_assert_eq!(buf.len() - start, NLMSG_HDRLEN);
        Writer { buf, start }
    }

    /// Starts an nfnetlink message: the header, then `struct nfgenmsg` (family, version 0,
    /// `res_id` in network order: the subsystem for batch begin and end, else 0).
    pub fn nfnetlink(buf: &'a mut Vec<u8>, kind: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> Writer<'a> {
        let mut w = Writer::new(buf, kind, flags, seq);
        let [r0, r1] = res_id.to_be_bytes();
        w.extend(&[family, NFNETLINK_V0, r0, r1]);
        w
    }

    /// Appends raw bytes: a family header (`ifinfomsg`, `genlmsghdr`) before the attributes.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn header(&mut self, ty: u16, len: usize) {
        let len = u16::try_from(len).expect("netlink attribute longer than 64 KiB");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
    }

    /// Pads to 4 bytes from the message's start (the buffer before it need not be aligned).
    fn pad(&mut self) {
        self.buf.resize(self.start + align(self.buf.len() - self.start), 0);
    }

    /// Appends an attribute whose payload is `parts` one after the other (padded to 4 bytes),
    /// so that a composite value needs no buffer of its own.
    pub fn put_parts(&mut self, ty: u16, parts: &[&[u8]]) {
        self.header(ty, NLA_HDRLEN + parts.iter().map(|p| p.len()).sum::<usize>());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.pad();
    }

    /// Appends an attribute with this payload (padded to 4 bytes).
    pub fn put(&mut self, ty: u16, payload: &[u8]) {
        self.put_parts(ty, &[payload]);
    }

    /// Appends a NUL-terminated string attribute (`NLA_NUL_STRING`).
    pub fn put_strz(&mut self, ty: u16, s: &str) {
        self.put_parts(ty, &[s.as_bytes(), &[0]]);
    }

    /// Appends a one-byte attribute.
    pub fn put_u8(&mut self, ty: u16, value: u8) {
        self.put(ty, &[value]);
    }

    /// Appends a 16-bit attribute in network byte order (ports, zones).
    pub fn put_be16(&mut self, ty: u16, value: u16) {
        self.put(ty, &value.to_be_bytes());
    }

    /// Appends a 32-bit attribute in network byte order (nftables numbers).
    pub fn put_be32(&mut self, ty: u16, value: u32) {
        self.put(ty, &value.to_be_bytes());
    }

    /// Appends a 32-bit attribute in host byte order (`NLA_U32`).
    pub fn put_u32(&mut self, ty: u16, value: u32) {
        self.put(ty, &value.to_ne_bytes());
    }

    /// Opens a nested attribute (`NLA_F_NESTED` set).
    pub fn nest(&mut self, ty: u16) -> Nest {
        let at = self.buf.len();
        self.header(ty | NLA_F_NESTED, 0);
        Nest(at)
    }

    /// Closes a nest and writes its length.
    pub fn end(&mut self, nest: Nest) {
        let len = u16::try_from(self.buf.len() - nest.0).expect("nested attribute longer than 64 KiB");
        self.buf[nest.0..nest.0 + 2].copy_from_slice(&len.to_ne_bytes());
    }

    /// Writes the message's length; returns it.
    pub fn finish(self) -> usize {
        let len = self.buf.len() - self.start;
        let n = u32::try_from(len).expect("netlink message longer than 4 GiB");
        self.buf[self.start..self.start + 4].copy_from_slice(&n.to_ne_bytes());
        len
    }
}
