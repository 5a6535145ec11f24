//! Encoding and decoding checked against messages captured from `conntrack` (conntrack-tools
//! 1.4.7) and the kernel (6.18.44) with strace; see the headers of the files in `testdata/`.

use super::reply::{CtMessage, Messages, parse_entry};
use super::request::{delete_request, dump_request};
use crate::entry::{Entry, Family, IPPROTO_TCP, IPPROTO_UDP};
use std::net::IpAddr;
use verdict_netlink::consts::*;
use verdict_netlink::{Attrs, NLMSG_HDRLEN};

/// Size of `struct nfgenmsg`.
const NFGENMSG_LEN: usize = 4;

/// Bytes of a `testdata/*.hex` file: `#` lines are comments, the rest hex byte pairs.
fn hex(text: &str) -> Vec<u8> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .map(|b| u8::from_str_radix(b, 16).expect("hex byte"))
        .collect()
}

const DUMP_ALL: &str = include_str!("testdata/dump_all.hex");
const DUMP_DONE: &str = include_str!("testdata/dump_done.hex");
const DUMP_REQUEST_V4: &str = include_str!("testdata/dump_request_v4.hex");
const DELETE_V4: &str = include_str!("testdata/delete_v4.hex");
const DELETE_V6: &str = include_str!("testdata/delete_v6.hex");
const DELETE_ACK: &str = include_str!("testdata/delete_ack.hex");

/// Sequence numbers conntrack used in the captures.
const DUMP_SEQ: u32 = 0x6b02_e3d9;
const LIST_SEQ: u32 = 0x6b02_e31b;
const DELETE_SEQ: u32 = 0x6b02_e31d;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn entry(protocol: u8, o: (&str, u16, &str, u16), r: (&str, u16, &str, u16), zone: u16) -> Entry {
    let family = if o.0.contains(':') { Family::V6 } else { Family::V4 };
    Entry {
        family,
        protocol,
        orig_src: ip(o.0),
        orig_sport: o.1,
        orig_dst: ip(o.2),
        orig_dport: o.3,
        reply_src: ip(r.0),
        reply_sport: r.1,
        reply_dst: ip(r.2),
        reply_dport: r.3,
        zone,
    }
}

/// The six entries of `dump_all.hex`, in dump order.
fn captured_entries() -> Vec<Entry> {
    vec![
        entry(IPPROTO_UDP, ("fd00::1", 40003, "fd00:96::10", 53), ("fd00:244::5", 5353, "fd00::1", 40003), 0),
        entry(IPPROTO_UDP, ("10.244.0.6", 40004, "10.244.0.6", 5353), ("10.244.0.6", 5353, "10.244.0.6", 40004), 7),
        entry(IPPROTO_UDP, ("10.244.0.6", 40004, "10.244.0.6", 5353), ("10.244.0.6", 5353, "10.244.0.6", 40004), 0),
        entry(IPPROTO_UDP, ("10.0.0.1", 40002, "10.96.0.10", 53), ("10.244.0.6", 5353, "10.0.0.1", 40002), 0),
        entry(IPPROTO_TCP, ("10.0.0.1", 35944, "10.96.0.10", 53), ("10.244.0.5", 5353, "10.0.0.1", 35944), 0),
        entry(IPPROTO_UDP, ("10.0.0.1", 40001, "10.96.0.10", 53), ("10.244.0.5", 5353, "10.0.0.1", 40001), 0),
    ]
}

/// The captured message cut after its first attribute, with `nlmsg_len` patched to match.
fn header_and_first_attr(msg: &[u8]) -> Vec<u8> {
    let start = NLMSG_HDRLEN + NFGENMSG_LEN;
    let first = usize::from(u16::from_ne_bytes([msg[start], msg[start + 1]]));
    let mut out = msg[..start + first].to_vec();
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    out
}

#[test]
fn dump_request_is_byte_identical_to_conntrack_tools() {
    assert_eq!(dump_request(LIST_SEQ, Family::V4, None), hex(DUMP_REQUEST_V4));
}

#[test]
fn dump_request_for_ipv6_differs_only_in_the_family() {
    let mut expected = hex(DUMP_REQUEST_V4);
    expected[NLMSG_HDRLEN] = AF_INET6;
    assert_eq!(dump_request(LIST_SEQ, Family::V6, None), expected);
}

#[test]
fn filtered_dump_request_carries_cta_filter_and_the_protocol() {
    let msg = dump_request(7, Family::V4, Some(IPPROTO_UDP));
    let mut expected = hex(DUMP_REQUEST_V4);
    expected[8..12].copy_from_slice(&7u32.to_ne_bytes());
    #[rustfmt::skip]
    expected.extend_from_slice(&[
        // CTA_FILTER (25) | NLA_F_NESTED, 20 bytes
        0x14, 0x00, 0x19, 0x80,
        //   CTA_FILTER_ORIG_FLAGS = CTA_FILTER_F_CTA_PROTO_NUM (host order)
        0x08, 0x00, 0x01, 0x00, 0x08, 0x00, 0x00, 0x00,
        //   CTA_FILTER_REPLY_FLAGS = 0
        0x08, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
        // CTA_TUPLE_ORIG | NLA_F_NESTED, 16 bytes
        0x10, 0x00, 0x01, 0x80,
        //   CTA_TUPLE_PROTO | NLA_F_NESTED, 12 bytes
        0x0c, 0x00, 0x02, 0x80,
        //     CTA_PROTO_NUM = 17, padded
        0x05, 0x00, 0x01, 0x00, 0x11, 0x00, 0x00, 0x00,
    ]);
    let len = expected.len() as u32;
    expected[0..4].copy_from_slice(&len.to_ne_bytes());
    assert_eq!(msg, expected);
}

#[test]
fn ipv4_delete_request_matches_the_original_tuple_conntrack_tools_sends() {
    let e = &captured_entries()[5]; // udp 10.0.0.1:40001 -> 10.96.0.10:53
    assert_eq!(delete_request(DELETE_SEQ, e), header_and_first_attr(&hex(DELETE_V4)));
}

#[test]
fn ipv6_delete_request_matches_the_original_tuple_conntrack_tools_sends() {
    let e = &captured_entries()[0]; // udp [fd00::1]:40003 -> [fd00:96::10]:53
    assert_eq!(delete_request(DELETE_SEQ, e), header_and_first_attr(&hex(DELETE_V6)));
}

#[test]
fn delete_request_in_a_zone_appends_cta_zone_as_the_kernel_encodes_it() {
    let e = &captured_entries()[1]; // zone 7
    let msg = delete_request(1, e);
    let zone_attr = [0x06, 0x00, 0x12, 0x00, 0x00, 0x07, 0x00, 0x00];
    assert_eq!(&msg[msg.len() - 8..], &zone_attr, "CTA_ZONE, big-endian 7, padded");
    // The kernel's own dump of that entry carries exactly these bytes.
    let dump = hex(DUMP_ALL);
    assert!(dump.windows(8).any(|w| w == zone_attr));
    // The zone-0 twin is the same message without CTA_ZONE.
    let twin = delete_request(1, &captured_entries()[2]);
    let mut without_zone = msg[..msg.len() - 8].to_vec();
    let len = without_zone.len() as u32;
    without_zone[0..4].copy_from_slice(&len.to_ne_bytes());
    assert_eq!(twin, without_zone);
}

#[test]
fn captured_dump_decodes_into_its_six_entries() {
    let buf = hex(DUMP_ALL);
    let mut entries = Vec::new();
    for m in Messages::new(&buf) {
        let (h, reply) = m.unwrap();
        assert_eq!(h.seq, DUMP_SEQ);
        assert_eq!(h.kind, nfnl_msg_type(NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_NEW));
        match reply {
            CtMessage::Conntrack { family, attrs } => entries.push(parse_entry(family, attrs).unwrap().unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(entries, captured_entries());
}

#[test]
fn captured_done_and_ack_decode() {
    let done = hex(DUMP_DONE);
    let msgs: Vec<_> = Messages::new(&done).map(Result::unwrap).collect();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].0.seq, DUMP_SEQ);
    assert!(matches!(msgs[0].1, CtMessage::Done(0)));

    let ack = hex(DELETE_ACK);
    let msgs: Vec<_> = Messages::new(&ack).map(Result::unwrap).collect();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].0.seq, DELETE_SEQ);
    assert!(matches!(msgs[0].1, CtMessage::Error(0)));
}

#[test]
fn nlmsg_error_carries_negative_errno() {
    let mut ack = hex(DELETE_ACK);
    ack[16..20].copy_from_slice(&(-2i32).to_ne_bytes());
    let (_, reply) = Messages::new(&ack).next().unwrap().unwrap();
    assert!(matches!(reply, CtMessage::Error(-2)));
}

#[test]
fn dump_and_done_in_one_buffer_are_both_seen() {
    let mut buf = hex(DUMP_ALL);
    buf.extend(hex(DUMP_DONE));
    let replies: Vec<_> = Messages::new(&buf).map(|m| m.unwrap().1).collect();
    assert_eq!(replies.len(), 7);
    assert!(matches!(replies[6], CtMessage::Done(0)));
}

#[test]
fn truncated_message_is_an_error() {
    let buf = hex(DUMP_ALL);
    let cut = &buf[..100]; // inside the first message (212 bytes)
    let first = Messages::new(cut).next().unwrap();
    assert!(first.unwrap_err().contains("claims 212 bytes"));
}

#[test]
fn truncated_attribute_is_an_error() {
    let buf = hex(DUMP_ALL);
    let (_, reply) = Messages::new(&buf).next().unwrap().unwrap();
    let CtMessage::Conntrack { family, attrs } = reply else { panic!("not an entry") };
    // Cut the attributes inside CTA_TUPLE_ORIG (76 bytes long).
    let err = parse_entry(family, &attrs[..40]).unwrap_err();
    assert!(err.contains("claims 76 bytes"), "{err}");
}

#[test]
fn entry_without_reply_tuple_is_an_error() {
    let buf = hex(DUMP_ALL);
    let (_, reply) = Messages::new(&buf).next().unwrap().unwrap();
    let CtMessage::Conntrack { family, attrs } = reply else { panic!("not an entry") };
    let orig_only: Vec<u8> = {
        let first = Attrs::new(attrs).next().unwrap().unwrap();
        attrs[..4 + first.payload.len()].to_vec()
    };
    assert_eq!(parse_entry(family, &orig_only).unwrap_err(), "entry without CTA_TUPLE_REPLY");
}

#[test]
fn unknown_layer3_family_is_skipped() {
    let buf = hex(DUMP_ALL);
    let (_, reply) = Messages::new(&buf).next().unwrap().unwrap();
    let CtMessage::Conntrack { attrs, .. } = reply else { panic!("not an entry") };
    assert_eq!(parse_entry(7, attrs), Ok(None));
}
