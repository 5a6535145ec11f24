//! The two requests we send: a dump of one family's entries, and the deletion of one entry.

use super::attr::MessageWriter;
use super::consts::*;
use crate::entry::{Entry, Family};
use std::net::IpAddr;

/// The `nfgen_family` byte of a family.
pub(crate) fn family_byte(family: Family) -> u8 {
    match family {
        Family::V4 => AF_INET,
        Family::V6 => AF_INET6,
    }
}

/// `IPCTNL_MSG_CT_GET` with `NLM_F_DUMP` for one family.
///
/// With `protocol`, the request also carries a kernel-side filter (`CTA_FILTER`, kernel 5.8+)
/// on the original tuple's protocol number; older kernels ignore it and dump everything, so
/// callers must still filter what they receive.
pub(crate) fn dump_request(seq: u32, family: Family, protocol: Option<u8>) -> Vec<u8> {
    let mut w =
        MessageWriter::new(ct_msg_type(IPCTNL_MSG_CT_GET), NLM_F_REQUEST | NLM_F_DUMP, seq, family_byte(family));
    if let Some(protocol) = protocol {
        w.begin_nest(CTA_FILTER);
        w.put_u32(CTA_FILTER_ORIG_FLAGS, CTA_FILTER_F_CTA_PROTO_NUM);
        w.put_u32(CTA_FILTER_REPLY_FLAGS, 0);
        w.end_nest();
        w.begin_nest(CTA_TUPLE_ORIG);
        w.begin_nest(CTA_TUPLE_PROTO);
        w.put_u8(CTA_PROTO_NUM, protocol);
        w.end_nest();
        w.end_nest();
    }
    w.finish()
}

/// `IPCTNL_MSG_CT_DELETE` (with `NLM_F_ACK`) of the entry with this original tuple and zone.
pub(crate) fn delete_request(seq: u32, entry: &Entry) -> Vec<u8> {
    let mut w = MessageWriter::new(
        ct_msg_type(IPCTNL_MSG_CT_DELETE),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        family_byte(entry.family),
    );
    w.begin_nest(CTA_TUPLE_ORIG);
    put_ip_nest(&mut w, entry.orig_src, entry.orig_dst);
    w.begin_nest(CTA_TUPLE_PROTO);
    w.put_u8(CTA_PROTO_NUM, entry.protocol);
    w.put_be16(CTA_PROTO_SRC_PORT, entry.orig_sport);
    w.put_be16(CTA_PROTO_DST_PORT, entry.orig_dport);
    w.end_nest();
    w.end_nest();
    if entry.zone != 0 {
        w.put_be16(CTA_ZONE, entry.zone);
    }
    w.finish()
}

/// `CTA_TUPLE_IP { CTA_IP_V4_SRC/V6_SRC, CTA_IP_V4_DST/V6_DST }`.
fn put_ip_nest(w: &mut MessageWriter, src: IpAddr, dst: IpAddr) {
    w.begin_nest(CTA_TUPLE_IP);
    for (addr, v4, v6) in [(src, CTA_IP_V4_SRC, CTA_IP_V6_SRC), (dst, CTA_IP_V4_DST, CTA_IP_V6_DST)] {
        match addr {
            IpAddr::V4(a) => w.put(v4, &a.octets()),
            IpAddr::V6(a) => w.put(v6, &a.octets()),
        }
    }
    w.end_nest();
}
