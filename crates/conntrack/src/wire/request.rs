//! The two requests we send: a dump of one family's entries, and the deletion of one entry.

use crate::entry::{Entry, Family};
use std::net::IpAddr;
use verdict_netlink::Writer;
use verdict_netlink::consts::*;

/// The `nfgen_family` byte of a family.
pub(crate) fn family_byte(family: Family) -> u8 {
    match family {
        Family::V4 => AF_INET,
        Family::V6 => AF_INET6,
    }
}

/// A ctnetlink message of type `msg` for `family`, its attributes written by `attrs`.
fn message(msg: u16, flags: u16, seq: u32, family: Family, attrs: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128);
    let kind = nfnl_msg_type(NFNL_SUBSYS_CTNETLINK, msg);
    let mut w = Writer::nfnetlink(&mut buf, kind, flags, seq, family_byte(family), 0);
    attrs(&mut w);
    w.finish();
    buf
}

/// `IPCTNL_MSG_CT_GET` with `NLM_F_DUMP` for one family.
///
/// With `protocol`, the request also carries a kernel-side filter (`CTA_FILTER`, kernel 5.8+)
/// on the original tuple's protocol number; older kernels ignore it and dump everything, so
/// callers must still filter what they receive.
pub(crate) fn dump_request(seq: u32, family: Family, protocol: Option<u8>) -> Vec<u8> {
    message(IPCTNL_MSG_CT_GET, NLM_F_DUMP, seq, family, |w| {
        if let Some(protocol) = protocol {
            let filter = w.nest(CTA_FILTER);
            w.put_u32(CTA_FILTER_ORIG_FLAGS, CTA_FILTER_F_CTA_PROTO_NUM);
            w.put_u32(CTA_FILTER_REPLY_FLAGS, 0);
            w.end(filter);
            let orig = w.nest(CTA_TUPLE_ORIG);
            let proto = w.nest(CTA_TUPLE_PROTO);
            w.put_u8(CTA_PROTO_NUM, protocol);
            w.end(proto);
            w.end(orig);
        }
    })
}

/// `IPCTNL_MSG_CT_DELETE` (with `NLM_F_ACK`) of the entry with this original tuple and zone.
pub(crate) fn delete_request(seq: u32, entry: &Entry) -> Vec<u8> {
    message(IPCTNL_MSG_CT_DELETE, NLM_F_ACK, seq, entry.family, |w| {
        let orig = w.nest(CTA_TUPLE_ORIG);
        put_ip_nest(w, entry.orig_src, entry.orig_dst);
        let proto = w.nest(CTA_TUPLE_PROTO);
        w.put_u8(CTA_PROTO_NUM, entry.protocol);
        w.put_be16(CTA_PROTO_SRC_PORT, entry.orig_sport);
        w.put_be16(CTA_PROTO_DST_PORT, entry.orig_dport);
        w.end(proto);
        w.end(orig);
        if entry.zone != 0 {
            w.put_be16(CTA_ZONE, entry.zone);
        }
    })
}

/// `CTA_TUPLE_IP { CTA_IP_V4_SRC/V6_SRC, CTA_IP_V4_DST/V6_DST }`.
fn put_ip_nest(w: &mut Writer<'_>, src: IpAddr, dst: IpAddr) {
    let ip = w.nest(CTA_TUPLE_IP);
    for (addr, v4, v6) in [(src, CTA_IP_V4_SRC, CTA_IP_V6_SRC), (dst, CTA_IP_V4_DST, CTA_IP_V6_DST)] {
        match addr {
            IpAddr::V4(a) => w.put(v4, &a.octets()),
            IpAddr::V6(a) => w.put(v6, &a.octets()),
        }
    }
    w.end(ip);
}
