//! Attributes (`struct nlattr` TLVs): one iterator, and typed reads of a payload.

use crate::Malformed;
use crate::consts::NLA_TYPE_MASK;

/// Rounds up to netlink's 4-byte alignment (`NLMSG_ALIGN`, `NLA_ALIGN`).
pub const fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// Size of `struct nlattr`.
pub(crate) const NLA_HDRLEN: usize = 4;

/// One attribute: its type (nested and byte-order flags masked off) and payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr<'a> {
    /// The type, without `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER`.
    pub ty: u16,
    /// The payload, without padding.
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    fn fixed<const N: usize>(&self) -> Result<[u8; N], Malformed> {
        <[u8; N]>::try_from(self.payload).map_err(|_| Malformed::Size {
            ty: self.ty,
            len: self.payload.len(),
            expected: N,
        })
    }

    /// The payload as one byte.
    pub fn u8(&self) -> Result<u8, Malformed> {
        self.fixed::<1>().map(|[b]| b)
    }

    /// The payload as a big-endian u16 (ports, zones).
    pub fn be16(&self) -> Result<u16, Malformed> {
        self.fixed().map(u16::from_be_bytes)
    }

    /// The payload as a big-endian u32 (nftables numbers, verdict codes).
    pub fn be32(&self) -> Result<u32, Malformed> {
        self.fixed().map(u32::from_be_bytes)
    }

    /// The payload as a host-order u32 (`NLA_U32`).
    pub fn u32(&self) -> Result<u32, Malformed> {
        self.fixed().map(u32::from_ne_bytes)
    }

    /// The payload as text, up to its NUL; `None` if it is not UTF-8.
    pub fn str(&self) -> Option<&'a str> {
        let end = self.payload.iter().position(|b| *b == 0).unwrap_or(self.payload.len());
        std::str::from_utf8(&self.payload[..end]).ok()
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }
}

/// Iterates over a run of attributes. A truncated or overlong attribute ends the walk with
/// one [`Malformed`] error.
#[derive(Clone, Debug)]
pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    /// The attributes in `bytes`.
    pub fn new(bytes: &'a [u8]) -> Attrs<'a> {
        Attrs { rest: bytes }
    }

    /// The first well-formed attribute of type `ty` before any malformed one.
    pub fn find_type(self, ty: u16) -> Option<Attr<'a>> {
        self.map_while(Result::ok).find(|a| a.ty == ty)
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.rest;
        if b.is_empty() {
            return None;
        }
        if b.len() < NLA_HDRLEN {
            self.rest = &[];
            return Some(Err(Malformed::Trailing { what: "attribute", left: b.len() }));
        }
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > b.len() {
            self.rest = &[];
            return Some(Err(Malformed::Attribute { ty, claims: len, left: b.len() }));
        }
        self.rest = &b[align(len).min(b.len())..];
        Some(Ok(Attr { ty, payload: &b[NLA_HDRLEN..len] }))
    }
}
