//! What the kernel sends back: a stream of netlink messages, and the conntrack entries in them.

use super::attr::{Attr, Attrs, align};
use super::consts::*;
use crate::entry::{Entry, Family};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The fields of `struct nlmsghdr` we look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) ty: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
}

/// One message of a reply.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reply<'a> {
    /// `IPCTNL_MSG_CT_NEW`: one entry of a dump, still encoded.
    Conntrack {
        /// `nfgen_family`.
        family: u8,
        /// The attributes after the `nfgenmsg` header.
        attrs: &'a [u8],
    },
    /// `NLMSG_ERROR`: 0 acknowledges a request, a negative value is `-errno`.
    Error(i32),
    /// `NLMSG_DONE`, the end of a dump, with its (normally 0) error code.
    Done(i32),
    /// Anything else (`NLMSG_NOOP`, other ctnetlink messages).
    Other,
}

/// Iterates over the netlink messages in one received datagram.
pub(crate) struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Messages<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Messages<'a> {
        Messages { rest: buf }
    }
}

fn i32_at(bytes: &[u8]) -> i32 {
    match bytes {
        [a, b, c, d, ..] => i32::from_ne_bytes([*a, *b, *c, *d]),
        _ => 0,
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<(Header, Reply<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let fail = |this: &mut Self, msg: String| {
            this.rest = &[];
            Some(Err(msg))
        };
        if self.rest.len() < NLMSG_HDRLEN {
            return fail(self, format!("{} trailing bytes after the last message", self.rest.len()));
        }
        let b = self.rest;
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            return fail(self, format!("message claims {len} bytes, {} received", b.len()));
        }
        let header = Header {
            ty: u16::from_ne_bytes([b[4], b[5]]),
            flags: u16::from_ne_bytes([b[6], b[7]]),
            seq: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
        };
        let payload = &b[NLMSG_HDRLEN..len];
        self.rest = &b[align(len).min(b.len())..];
        let reply = match header.ty {
            NLMSG_ERROR => {
                if payload.len() < 4 {
                    return fail(self, format!("NLMSG_ERROR with {} bytes of payload", payload.len()));
                }
                Reply::Error(i32_at(payload))
            }
            NLMSG_DONE => Reply::Done(i32_at(payload)),
            NLMSG_OVERRUN => return fail(self, "NLMSG_OVERRUN: the kernel lost data".to_string()),
            NLMSG_NOOP => Reply::Other,
            t if t == ct_msg_type(IPCTNL_MSG_CT_NEW) => {
                if payload.len() < NFGENMSG_LEN {
                    return fail(self, format!("conntrack message with {} bytes of payload", payload.len()));
                }
                Reply::Conntrack { family: payload[0], attrs: &payload[NFGENMSG_LEN..] }
            }
            _ => Reply::Other,
        };
        Some(Ok((header, reply)))
    }
}

/// One direction's tuple.
#[derive(Default)]
struct Tuple {
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    protocol: Option<u8>,
    sport: u16,
    dport: u16,
}

fn ip(attr: &Attr<'_>) -> Result<IpAddr, String> {
    let bad = || format!("address attribute {} has {} bytes", attr.ty, attr.payload.len());
    match attr.ty {
        CTA_IP_V4_SRC | CTA_IP_V4_DST => {
            <[u8; 4]>::try_from(attr.payload).map(|o| IpAddr::V4(Ipv4Addr::from(o))).map_err(|_| bad())
        }
        _ => <[u8; 16]>::try_from(attr.payload).map(|o| IpAddr::V6(Ipv6Addr::from(o))).map_err(|_| bad()),
    }
}

fn parse_tuple(attr: &Attr<'_>) -> Result<Tuple, String> {
    let mut t = Tuple::default();
    for a in attr.nested() {
        let a = a?;
        match a.ty {
            CTA_TUPLE_IP => {
                for ipa in a.nested() {
                    let ipa = ipa?;
                    match ipa.ty {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => t.src = Some(ip(&ipa)?),
                        CTA_IP_V4_DST | CTA_IP_V6_DST => t.dst = Some(ip(&ipa)?),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for pa in a.nested() {
                    let pa = pa?;
                    match pa.ty {
                        CTA_PROTO_NUM => t.protocol = Some(pa.u8()?),
                        CTA_PROTO_SRC_PORT => t.sport = pa.be16()?,
                        CTA_PROTO_DST_PORT => t.dport = pa.be16()?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(t)
}

/// Decodes one `IPCTNL_MSG_CT_NEW` message. `Ok(None)` for a layer-3 family other than IPv4
/// and IPv6; an error when the tuples are incomplete.
pub(crate) fn parse_entry(family: u8, attrs: &[u8]) -> Result<Option<Entry>, String> {
    let family = match family {
        AF_INET => Family::V4,
        AF_INET6 => Family::V6,
        _ => return Ok(None),
    };
    let (mut orig, mut reply, mut zone) = (None, None, 0);
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.ty {
            CTA_TUPLE_ORIG => orig = Some(parse_tuple(&a)?),
            CTA_TUPLE_REPLY => reply = Some(parse_tuple(&a)?),
            CTA_ZONE => zone = a.be16()?,
            _ => {}
        }
    }
    let orig = orig.ok_or("entry without CTA_TUPLE_ORIG")?;
    let reply = reply.ok_or("entry without CTA_TUPLE_REPLY")?;
    let missing = |what: &str| format!("entry without {what}");
    Ok(Some(Entry {
        family,
        protocol: orig.protocol.ok_or_else(|| missing("an original protocol number"))?,
        orig_src: orig.src.ok_or_else(|| missing("an original source"))?,
        orig_dst: orig.dst.ok_or_else(|| missing("an original destination"))?,
        orig_sport: orig.sport,
        orig_dport: orig.dport,
        reply_src: reply.src.ok_or_else(|| missing("a reply source"))?,
        reply_dst: reply.dst.ok_or_else(|| missing("a reply destination"))?,
        reply_sport: reply.sport,
        reply_dport: reply.dport,
        zone,
    }))
}
