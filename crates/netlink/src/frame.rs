//! Messages: the `nlmsghdr` framing, splitting a datagram, and `NLMSG_ERROR` replies.

use crate::attr::align;
use crate::consts::{NLM_F_ACK_TLVS, NLM_F_CAPPED, NLMSG_ERROR, NLMSGERR_ATTR_MSG};
use crate::{Attrs, Malformed};

/// Size of `struct nlmsghdr` (libc has the struct but keeps its `NLMSG_HDRLEN` private).
pub const NLMSG_HDRLEN: usize = std::mem::size_of::<libc::nlmsghdr>();

/// The fields of a `struct nlmsghdr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `nlmsg_len`: the message's length, header included, without trailing padding.
    pub len: u32,
    /// `nlmsg_type`; for nfnetlink, `subsystem << 8 | message`.
    pub kind: u16,
    /// `nlmsg_flags` (`NLM_F_*`).
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid`.
    pub pid: u32,
}

impl Header {
    /// Reads a header from the first 16 bytes of `b` (which the caller checked are there).
    fn read(b: &[u8]) -> Header {
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        Header {
            len: u32_at(0),
            kind: u16::from_ne_bytes([b[4], b[5]]),
            flags: u16::from_ne_bytes([b[6], b[7]]),
            seq: u32_at(8),
            pid: u32_at(12),
        }
    }
}

/// One message of a datagram.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// Its header.
    pub header: Header,
    /// The whole message, header included, without trailing padding.
    pub bytes: &'a [u8],
}

impl<'a> Message<'a> {
    /// What follows the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[NLMSG_HDRLEN..]
    }

    /// For nfnetlink messages: the `nfgen_family` of the `nfgenmsg` after the header.
    pub fn nfgen_family(&self) -> Option<u8> {
        self.payload().first().copied()
    }

    /// For nfnetlink messages: the `res_id` of the `nfgenmsg` (in nf_tables notices, the low
    /// 16 bits of the generation the notified commit made).
    pub fn nfgen_res_id(&self) -> Option<u16> {
        let id = self.payload().get(2..4)?;
        Some(u16::from_be_bytes([id[0], id[1]]))
    }

    /// The attributes after a family header of `family_header_len` bytes (4 for nfnetlink's
    /// `nfgenmsg` and generic netlink's `genlmsghdr`). Empty when the message is shorter.
    pub fn attrs(&self, family_header_len: usize) -> Attrs<'a> {
        Attrs::new(self.payload().get(family_header_len..).unwrap_or_default())
    }

    /// The error or acknowledgement in an `NLMSG_ERROR` message; `None` for other messages
    /// and for an error message too short to carry its code.
    pub fn error(&self) -> Option<ErrorReply<'a>> {
        if self.header.kind != NLMSG_ERROR {
            return None;
        }
        let p = self.payload();
        let code = i32::from_ne_bytes(p.get(..4)?.try_into().ok()?);
        let request = (p.len() >= 4 + NLMSG_HDRLEN).then(|| Header::read(&p[4..]));
        // The echoed request is cut to its header when the socket set NETLINK_CAP_ACK (the
        // kernel then says NLM_F_CAPPED); the extended-ack attributes follow it.
        let tlvs = match request {
            Some(r) if self.header.flags & NLM_F_ACK_TLVS != 0 => {
                let echoed = if self.header.flags & NLM_F_CAPPED != 0 { NLMSG_HDRLEN } else { align(r.len as usize) };
                p.get(4 + echoed..).unwrap_or_default()
            }
            _ => &[],
        };
        Some(ErrorReply { code, request, tlvs })
    }
}

/// An `NLMSG_ERROR` message: an error, or (code 0) an acknowledgement.
#[derive(Clone, Copy, Debug)]
pub struct ErrorReply<'a> {
    /// `0` for an acknowledgement, otherwise `-errno`, as the kernel sends it.
    pub code: i32,
    /// The header of the request it answers (its sequence number is the one to match).
    pub request: Option<Header>,
    tlvs: &'a [u8],
}

impl<'a> ErrorReply<'a> {
    /// The positive errno (0 for an acknowledgement).
    pub fn errno(&self) -> i32 {
        -self.code
    }

    /// The sequence number of the request it answers.
    pub fn request_seq(&self) -> Option<u32> {
        self.request.map(|h| h.seq)
    }

    /// The kernel's extended-ack text (`NLMSGERR_ATTR_MSG`), if it sent one.
    pub fn message(&self) -> Option<&'a str> {
        Attrs::new(self.tlvs).map_while(Result::ok).find(|a| a.ty == NLMSGERR_ATTR_MSG).and_then(|a| a.str())
    }
}

/// Iterates over the messages of one datagram. A message cut short, or bytes too few for a
/// header, end the walk with one [`Malformed`] error.
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Messages<'a> {
    /// The messages in `datagram`.
    pub fn new(datagram: &'a [u8]) -> Messages<'a> {
        Messages { rest: datagram }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.rest;
        if b.is_empty() {
            return None;
        }
        if b.len() < NLMSG_HDRLEN {
            self.rest = &[];
            return Some(Err(Malformed::Trailing { what: "message", left: b.len() }));
        }
        let header = Header::read(b);
        let len = header.len as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            self.rest = &[];
            return Some(Err(Malformed::Message { claims: len, left: b.len() }));
        }
        self.rest = &b[align(len).min(b.len())..];
        Some(Ok(Message { header, bytes: &b[..len] }))
    }
}
