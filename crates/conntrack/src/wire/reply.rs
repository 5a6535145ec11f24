//! What the kernel sends back: a stream of netlink messages, and the conntrack entries in them.

use crate::entry::{Entry, Family};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use verdict_netlink::consts::*;
use verdict_netlink::{Attr, Attrs, Header};

/// One message of a reply.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CtMessage<'a> {
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

/// Iterates over the netlink messages in one received datagram; the first malformed one ends
/// the walk with an error.
pub(crate) struct Messages<'a> {
    inner: verdict_netlink::Messages<'a>,
}

impl<'a> Messages<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Messages<'a> {
        Messages { inner: verdict_netlink::Messages::new(buf) }
    }

    fn fail(&mut self, msg: String) -> Option<Result<(Header, CtMessage<'a>), String>> {
        self.inner = verdict_netlink::Messages::new(&[]);
        Some(Err(msg))
    }
}

/// The netfilter family header before a ctnetlink message's attributes.
const NFGENMSG_LEN: usize = 4;

impl<'a> Iterator for Messages<'a> {
    type Item = Result<(Header, CtMessage<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        let m = match self.inner.next()? {
            Ok(m) => m,
            Err(e) => return Some(Err(e.to_string())),
        };
        let payload = m.payload();
        let reply = match m.header.kind {
            NLMSG_ERROR => match m.error() {
                Some(e) => CtMessage::Error(e.code),
                None => return self.fail(format!("NLMSG_ERROR with {} bytes of payload", payload.len())),
            },
            NLMSG_DONE => CtMessage::Done(payload.get(..4).map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))),
            NLMSG_OVERRUN => return self.fail("NLMSG_OVERRUN: the kernel lost data".to_string()),
            NLMSG_NOOP => CtMessage::Other,
            t if t == nfnl_msg_type(NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_NEW) => {
                if payload.len() < NFGENMSG_LEN {
                    return self.fail(format!("conntrack message with {} bytes of payload", payload.len()));
                }
                CtMessage::Conntrack { family: payload[0], attrs: &payload[NFGENMSG_LEN..] }
            }
            _ => CtMessage::Other,
        };
        Some(Ok((m.header, reply)))
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
        let a = a.map_err(|e| e.to_string())?;
        match a.ty {
            CTA_TUPLE_IP => {
                for ipa in a.nested() {
                    let ipa = ipa.map_err(|e| e.to_string())?;
                    match ipa.ty {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => t.src = Some(ip(&ipa)?),
                        CTA_IP_V4_DST | CTA_IP_V6_DST => t.dst = Some(ip(&ipa)?),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for pa in a.nested() {
                    let pa = pa.map_err(|e| e.to_string())?;
                    match pa.ty {
                        CTA_PROTO_NUM => t.protocol = Some(pa.u8().map_err(|e| e.to_string())?),
                        CTA_PROTO_SRC_PORT => t.sport = pa.be16().map_err(|e| e.to_string())?,
                        CTA_PROTO_DST_PORT => t.dport = pa.be16().map_err(|e| e.to_string())?,
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
        let a = a.map_err(|e| e.to_string())?;
        match a.ty {
            CTA_TUPLE_ORIG => orig = Some(parse_tuple(&a)?),
            CTA_TUPLE_REPLY => reply = Some(parse_tuple(&a)?),
            CTA_ZONE => zone = a.be16().map_err(|e| e.to_string())?,
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
