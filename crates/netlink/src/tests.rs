//! Round trips through [`Writer`], [`Messages`] and [`Attrs`], and the malformed inputs they
//! must refuse without reading past the end.

use crate::consts::*;
use crate::{Attrs, Malformed, Message, Messages, NLMSG_HDRLEN, Writer, align};

fn one(buf: &[u8]) -> Message<'_> {
    let mut msgs = Messages::new(buf);
    let m = msgs.next().expect("a message").expect("well-formed");
    assert!(msgs.next().is_none());
    m
}

#[test]
fn a_message_round_trips_with_its_header_and_attributes() {
    let mut buf = vec![0xaa; 3]; // messages append after what is there
    let mut w = Writer::nfnetlink(
        &mut buf,
        nfnl_msg_type(NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWTABLE),
        NLM_F_ACK,
        7,
        NFPROTO_INET,
        0,
    );
    w.put_strz(NFTA_TABLE_NAME, "kube-proxy");
    w.put_be32(2, 0x0102_0304);
    w.put_u8(3, 9);
    let len = w.finish();
    assert_eq!(len, NLMSG_HDRLEN + 4 + 16 + 8 + 8);
    assert_eq!(buf.len(), 3 + len);
    let m = one(&buf[3..]);
    assert_eq!(m.header.len as usize, len);
    assert_eq!(m.header.kind, 0x0a00);
    assert_eq!(m.header.flags, NLM_F_REQUEST | NLM_F_ACK);
    assert_eq!(m.header.seq, 7);
    assert_eq!(m.nfgen_family(), Some(NFPROTO_INET));
    let attrs: Vec<_> = m.attrs(4).map(Result::unwrap).collect();
    assert_eq!(attrs.len(), 3);
    assert_eq!(attrs[0].str(), Some("kube-proxy"));
    assert_eq!(attrs[0].payload, b"kube-proxy\0", "padding is not payload");
    assert_eq!(attrs[1].be32(), Ok(0x0102_0304));
    assert_eq!(attrs[2].u8(), Ok(9));
    assert_eq!(attrs[2].be16(), Err(Malformed::Size { ty: 3, len: 1, expected: 2 }));
}

#[test]
fn batch_markers_carry_the_subsystem_in_network_order() {
    let mut buf = Vec::new();
    Writer::nfnetlink(&mut buf, NFNL_MSG_BATCH_BEGIN, 0, 1, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES).finish();
    assert_eq!(&buf[16..20], &[0, 0, 0, 10]);
}

#[test]
fn nests_hold_their_length_and_flag() {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, 0x25, 0, 1);
    let outer = w.nest(CTA_TUPLE_ORIG);
    let inner = w.nest(CTA_TUPLE_PROTO);
    w.put_u8(CTA_PROTO_NUM, 17);
    w.put_be16(CTA_PROTO_DST_PORT, 53);
    w.end(inner);
    w.end(outer);
    w.finish();
    #[rustfmt::skip]
    assert_eq!(&buf[NLMSG_HDRLEN..], &[
        0x18, 0, 0x01, 0x80,
            0x14, 0, 0x02, 0x80,
                5, 0, 1, 0, 17, 0, 0, 0,
                6, 0, 3, 0, 0, 53, 0, 0,
    ]);
    let m = one(&buf);
    let outer = m.attrs(0).next().unwrap().unwrap();
    assert_eq!(outer.ty, CTA_TUPLE_ORIG, "NLA_F_NESTED is masked off");
    let inner = outer.nested().next().unwrap().unwrap();
    let port = inner.nested().find_type(CTA_PROTO_DST_PORT).unwrap();
    assert_eq!(port.be16(), Ok(53));
}

#[test]
fn composite_payloads_are_written_without_a_buffer_of_their_own() {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, 1, 0, 1);
    w.put_parts(6, &[&[0, 3], b"ab", &[0]]);
    w.finish();
    assert_eq!(&buf[NLMSG_HDRLEN..], &[9, 0, 6, 0, 0, 3, b'a', b'b', 0, 0, 0, 0]);
}

#[test]
fn truncated_attributes_end_the_walk_with_an_error() {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, 1, 0, 1);
    w.put_strz(1, "first");
    w.put_strz(2, "second one");
    w.finish();
    let attrs = &buf[NLMSG_HDRLEN..];
    for cut in 0..attrs.len() {
        let walked: Vec<_> = Attrs::new(&attrs[..cut]).collect();
        assert!(walked.len() <= 2, "cut at {cut}");
        if cut < 10 && cut > 0 {
            assert!(walked[0].is_err(), "cut at {cut}: the first attribute is incomplete");
        }
        if cut > 12 && cut < 27 {
            assert_eq!(walked[0].as_ref().unwrap().str(), Some("first"));
            assert!(walked[1].is_err(), "cut at {cut}");
        }
    }
    assert_eq!(Attrs::new(&attrs[..2]).next(), Some(Err(Malformed::Trailing { what: "attribute", left: 2 })));
    assert_eq!(Attrs::new(&attrs[..8]).next(), Some(Err(Malformed::Attribute { ty: 1, claims: 10, left: 8 })));
    assert!(Attrs::new(&[3, 0, 1, 0]).next().unwrap().is_err(), "shorter than its own header");
    assert_eq!(Attrs::new(&attrs[..14]).find_type(2), None, "find_type stops at the malformed one");
    assert_eq!(Attrs::new(&attrs[..12]).count(), 1, "the last attribute's padding may be missing");
}

#[test]
fn truncated_messages_end_the_walk_with_an_error() {
    let mut buf = Vec::new();
    Writer::new(&mut buf, NLMSG_DONE, 0, 1).finish();
    let mut w = Writer::new(&mut buf, 0x25, 0, 2);
    w.put(1, &[1, 2, 3, 4, 5]);
    w.finish();
    assert_eq!(Messages::new(&buf).count(), 2);
    let cut = &buf[..buf.len() - 1];
    let walked: Vec<_> = Messages::new(cut).collect();
    assert_eq!(walked[0].as_ref().unwrap().header.kind, NLMSG_DONE);
    assert_eq!(walked[1].as_ref().unwrap_err(), &Malformed::Message { claims: 28, left: 27 });
    assert_eq!(
        Messages::new(&buf[..20]).nth(1).unwrap().unwrap_err(),
        Malformed::Trailing { what: "message", left: 4 }
    );
    assert!(Messages::new(&[0; 16]).next().unwrap().is_err(), "a length below the header's");
}

/// An NLMSG_ERROR for request `seq`: code, the echoed request (capped to its header or
/// whole), then extended-ack attributes.
fn error_message(code: i32, request: &[u8], flags: u16, ext_ack: Option<&str>) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, NLMSG_ERROR, 0, 0);
    w.extend(&code.to_ne_bytes());
    w.extend(request);
    if let Some(text) = ext_ack {
        w.put_strz(NLMSGERR_ATTR_MSG, text);
        w.put_u32(2, 20); // NLMSGERR_ATTR_OFFS
    }
    w.finish();
    buf[6..8].copy_from_slice(&flags.to_ne_bytes()); // replies carry no NLM_F_REQUEST
    buf
}

#[test]
fn errors_and_acknowledgements_are_decoded_with_their_extended_ack() {
    let mut request = Vec::new();
    let mut w = Writer::new(&mut request, 0x0a06, 0, 0x1234);
    w.put_strz(1, "kube-proxy");
    w.finish();

    let capped = error_message(-22, &request[..NLMSG_HDRLEN], NLM_F_CAPPED | NLM_F_ACK_TLVS, Some("no such chain"));
    let e = one(&capped).error().expect("an error reply");
    assert_eq!((e.code, e.errno()), (-22, 22));
    assert_eq!(e.request_seq(), Some(0x1234));
    assert_eq!(e.message(), Some("no such chain"));

    let whole = error_message(-2, &request, NLM_F_ACK_TLVS, Some("table"));
    let e = one(&whole).error().unwrap();
    assert_eq!(e.message(), Some("table"), "the echoed request's attributes are skipped");

    let plain = error_message(-2, &request, 0, None);
    assert_eq!(one(&plain).error().unwrap().message(), None, "its attributes are not an extended ack");

    let ack = error_message(0, &request[..NLMSG_HDRLEN], NLM_F_CAPPED, None);
    let e = one(&ack).error().unwrap();
    assert_eq!((e.errno(), e.request_seq(), e.message()), (0, Some(0x1234), None));

    let short = error_message(-1, &[], 0, None);
    assert_eq!(one(&short).error().unwrap().request, None);
    let mut no_code = Vec::new();
    Writer::new(&mut no_code, NLMSG_ERROR, 0, 0).finish();
    assert!(one(&no_code).error().is_none(), "too short to carry a code");
    assert!(one(&request).error().is_none(), "not an error message");
}

#[test]
fn alignment_is_to_four_bytes() {
    assert_eq!([0, 1, 4, 5, 15, 16].map(align), [0, 4, 4, 8, 16, 16]);
    assert_eq!(NLMSG_HDRLEN, 16);
}
