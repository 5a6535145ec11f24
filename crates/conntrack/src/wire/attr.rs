//! Netlink attributes (TLVs): a writer for one message with nested attributes, and an
//! iterator over a run of attributes.

use super::consts::{NFGENMSG_LEN, NFNETLINK_V0, NLA_F_NESTED, NLA_HDRLEN, NLA_TYPE_MASK, NLMSG_HDRLEN};

/// Rounds up to the 4-byte netlink alignment.
pub(crate) const fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// Builds one netfilter netlink message: `nlmsghdr`, `nfgenmsg`, then attributes.
pub(crate) struct MessageWriter {
    buf: Vec<u8>,
    /// Offsets of the headers of the nests still open.
    open: Vec<usize>,
}

impl MessageWriter {
    /// Starts a message; `nlmsg_len` is filled in by [`MessageWriter::finish`], the port id is 0.
    pub(crate) fn new(msg_type: u16, flags: u16, seq: u32, family: u8) -> MessageWriter {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&msg_type.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        // struct nfgenmsg { u8 family; u8 version; be16 res_id; }
        buf.extend_from_slice(&[family, NFNETLINK_V0, 0, 0]);
        debug_assert_eq!(buf.len(), NLMSG_HDRLEN + NFGENMSG_LEN);
        MessageWriter { buf, open: Vec::new() }
    }

    fn header(&mut self, ty: u16, len: usize) {
        let len = u16::try_from(len).expect("netlink attribute longer than 64 KiB");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
    }

    fn pad(&mut self) {
        self.buf.resize(align(self.buf.len()), 0);
    }

    /// Appends an attribute with this payload (padded to 4 bytes).
    pub(crate) fn put(&mut self, ty: u16, payload: &[u8]) {
        self.header(ty, NLA_HDRLEN + payload.len());
        self.buf.extend_from_slice(payload);
        self.pad();
    }

    /// Appends a one-byte attribute.
    pub(crate) fn put_u8(&mut self, ty: u16, value: u8) {
        self.put(ty, &[value]);
    }

    /// Appends a 16-bit attribute in network byte order (ports, zones).
    pub(crate) fn put_be16(&mut self, ty: u16, value: u16) {
        self.put(ty, &value.to_be_bytes());
    }

    /// Appends a 32-bit attribute in host byte order (`NLA_U32`).
    pub(crate) fn put_u32(&mut self, ty: u16, value: u32) {
        self.put(ty, &value.to_ne_bytes());
    }

    /// Opens a nested attribute (`NLA_F_NESTED` set); close it with [`MessageWriter::end_nest`].
    pub(crate) fn begin_nest(&mut self, ty: u16) {
        self.open.push(self.buf.len());
        self.header(ty | NLA_F_NESTED, 0);
    }

    /// Closes the innermost open nest and writes its length.
    pub(crate) fn end_nest(&mut self) {
        let start = self.open.pop().expect("end_nest without begin_nest");
        let len = u16::try_from(self.buf.len() - start).expect("nested attribute longer than 64 KiB");
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }

    /// The finished message, with `nlmsg_len` set.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        assert!(self.open.is_empty(), "unclosed nested attribute");
        let len = u32::try_from(self.buf.len()).expect("netlink message longer than 4 GiB");
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// One attribute: its type (flags masked off) and payload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attr<'a> {
    pub(crate) ty: u16,
    pub(crate) payload: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The payload as a big-endian u16.
    pub(crate) fn be16(&self) -> Result<u16, String> {
        <[u8; 2]>::try_from(self.payload)
            .map(u16::from_be_bytes)
            .map_err(|_| format!("attribute {} has {} bytes, expected 2", self.ty, self.payload.len()))
    }

    /// The payload as one byte.
    pub(crate) fn u8(&self) -> Result<u8, String> {
        match self.payload {
            [a] => Ok(*a),
            _ => Err(format!("attribute {} has {} bytes, expected 1", self.ty, self.payload.len())),
        }
    }

    /// The attributes nested in this one.
    pub(crate) fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }
}

/// Iterates over a run of attributes; a truncated or overlong attribute is an error.
#[derive(Clone)]
pub(crate) struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Attrs<'a> {
        Attrs { rest: bytes }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < NLA_HDRLEN {
            let n = self.rest.len();
            self.rest = &[];
            return Some(Err(format!("{n} trailing bytes after the last attribute")));
        }
        let len = usize::from(u16::from_ne_bytes([self.rest[0], self.rest[1]]));
        let ty = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > self.rest.len() {
            let n = self.rest.len();
            self.rest = &[];
            return Some(Err(format!("attribute {ty} claims {len} bytes, {n} left")));
        }
        let payload = &self.rest[NLA_HDRLEN..len];
        self.rest = &self.rest[align(len).min(self.rest.len())..];
        Some(Ok(Attr { ty, payload }))
    }
}
