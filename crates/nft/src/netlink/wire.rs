//! Netlink framing done in safe Rust: batch begin and end messages (with the generation id
//! libnftnl cannot add), reply parsing, and the userdata TLVs nft stores on tables, sets, rules
//! and elements so that `nft list` can print comments and `typeof` declarations.

use crate::rule::Selector;
use crate::ruleset::{DataSpec, Datatype, KeySpec, SetDecl};
use verdict_model::IpFamily;

pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_MULTI: u16 = 0x2;
pub(crate) const NLM_F_ACK: u16 = 0x4;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_BATCH_GENID: u16 = 1;

pub(crate) fn align4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Appends a netfilter message with no attributes but an optional u32 one: batch begin/end.
fn put_batch_marker(buf: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, genid: Option<u32>) {
    let attr_len = if genid.is_some() { 8 } else { 0 };
    let len = (NLMSG_HDRLEN + 4 + attr_len) as u32;
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: family AF_UNSPEC, version 0, res_id = subsystem (network order).
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&NFNL_SUBSYS_NFTABLES.to_be_bytes());
    if let Some(g) = genid {
        buf.extend_from_slice(&8u16.to_ne_bytes());
        buf.extend_from_slice(&NFNL_BATCH_GENID.to_ne_bytes());
        buf.extend_from_slice(&g.to_be_bytes());
    }
}

/// Batch begin, carrying the generation id the batch was computed against: the kernel refuses
/// it with ERESTART if anyone committed in between.
pub(crate) fn put_begin(buf: &mut Vec<u8>, seq: u32, genid: Option<u32>) {
    put_batch_marker(buf, NFNL_MSG_BATCH_BEGIN, 0, seq, genid);
}

/// Sets the generation id of a batch that starts with [`put_begin`].
pub(crate) fn set_begin_genid(batch: &mut [u8], genid: u32) {
    batch[NLMSG_HDRLEN + 8..NLMSG_HDRLEN + 12].copy_from_slice(&genid.to_be_bytes());
}

/// Batch end; the only message that asks for an acknowledgement.
pub(crate) fn put_end(buf: &mut Vec<u8>, seq: u32) {
    put_batch_marker(buf, NFNL_MSG_BATCH_END, NLM_F_ACK, seq, None);
}

/// One received netlink message.
pub(crate) struct Msg<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// The whole message, header included.
    pub bytes: &'a [u8],
}

impl Msg<'_> {
    /// For NLMSG_ERROR: the errno (0 for an acknowledgement).
    pub fn error(&self) -> Option<i32> {
        (self.kind == NLMSG_ERROR)
            .then(|| self.bytes.get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4))
            .flatten()
            .map(|b| -i32::from_ne_bytes(b.try_into().expect("4 bytes")))
    }

    /// For NLMSG_ERROR: the sequence number of the request it answers.
    pub fn error_seq(&self) -> Option<u32> {
        self.bytes
            .get(NLMSG_HDRLEN + 4 + 8..NLMSG_HDRLEN + 4 + 12)
            .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
    }

    /// The extended-ack message text, if the kernel sent one.
    pub fn ext_ack_text(&self) -> Option<String> {
        // Error payload: errno(4) + the request's header (16, capped) then NLMSGERR_ATTR_* TLVs.
        let mut at = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;
        while at + 4 <= self.bytes.len() {
            let len = u16::from_ne_bytes([self.bytes[at], self.bytes[at + 1]]) as usize;
            let kind = u16::from_ne_bytes([self.bytes[at + 2], self.bytes[at + 3]]) & 0x3fff;
            if len < 4 || at + len > self.bytes.len() {
                return None;
            }
            if kind == 1 {
                let text = &self.bytes[at + 4..at + len];
                let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
                return String::from_utf8(text[..end].to_vec()).ok();
            }
            at += align4(len);
        }
        None
    }
}

/// Splits a receive buffer into messages.
pub(crate) fn messages(buf: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + NLMSG_HDRLEN > buf.len() {
            return None;
        }
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return None;
        }
        let msg = Msg {
            kind: u16::from_ne_bytes([buf[at + 4], buf[at + 5]]),
            flags: u16::from_ne_bytes([buf[at + 6], buf[at + 7]]),
            seq: u32::from_ne_bytes(buf[at + 8..at + 12].try_into().expect("4 bytes")),
            bytes: &buf[at..at + len],
        };
        at += align4(len);
        Some(msg)
    })
}

// ---- userdata TLVs (libnftnl's udata format: type u8, length u8, value) ----

const UDATA_COMMENT: u8 = 0; // table, rule and element comments
const SET_KEYBYTEORDER: u8 = 0;
const SET_DATABYTEORDER: u8 = 1;
const SET_KEY_TYPEOF: u8 = 3;
const SET_DATA_TYPEOF: u8 = 4;
const SET_DATA_INTERVAL: u8 = 6;
const SET_COMMENT: u8 = 7;
const TYPEOF_EXPR: u8 = 0;
const TYPEOF_DATA: u8 = 1;

const BYTEORDER_INVALID: u32 = 0;
const BYTEORDER_HOST: u32 = 1;
const BYTEORDER_BIG: u32 = 2;

// nft's expression type numbers, as stored in typeof userdata.
const EXPR_PAYLOAD: u32 = 7;
const EXPR_META: u32 = 9;
const EXPR_CONCAT: u32 = 13;
const EXPR_NUMGEN: u32 = 23;

// nft protocol descriptions and header fields, as stored for payload expressions.
const DESC_TH: u32 = 11;
const DESC_IP: u32 = 12;
const DESC_IP6: u32 = 13;

fn tlv(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    out.push(kind);
    out.push(u8::try_from(value.len()).expect("userdata value fits in 255 bytes"));
    out.extend_from_slice(value);
}

fn tlv_u32(out: &mut Vec<u8>, kind: u8, v: u32) {
    tlv(out, kind, &v.to_ne_bytes());
}

fn tlv_str(out: &mut Vec<u8>, kind: u8, s: &str) {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    tlv(out, kind, &v);
}

/// A comment as table, rule or element userdata.
pub(crate) fn comment_udata(comment: &str) -> Vec<u8> {
    let mut out = Vec::new();
    tlv_str(&mut out, UDATA_COMMENT, comment);
    out
}

/// The comment in table, rule or element userdata.
pub(crate) fn parse_comment(udata: &[u8]) -> Option<String> {
    tlvs(udata).find(|(k, _)| *k == UDATA_COMMENT).and_then(|(_, v)| cstr(v))
}

fn cstr(v: &[u8]) -> Option<String> {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8(v[..end].to_vec()).ok()
}

fn tlvs(mut b: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 2 {
            return None;
        }
        let (kind, len) = (b[0], b[1] as usize);
        let value = b.get(2..2 + len)?;
        b = &b[2 + len..];
        Some((kind, value))
    })
}

fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.try_into().ok()?))
}

/// One selector as nft's typeof userdata: (expression type, its attributes).
fn selector_udata(sel: &Selector) -> (u32, Vec<u8>) {
    let mut data = Vec::new();
    let payload = |data: &mut Vec<u8>, desc: u32, field: u32| {
        tlv_u32(data, 0, desc);
        tlv_u32(data, 1, field);
    };
    let kind = match sel {
        Selector::Saddr(IpFamily::V4) => {
            payload(&mut data, DESC_IP, 11);
            EXPR_PAYLOAD
        }
        Selector::Daddr(IpFamily::V4) => {
            payload(&mut data, DESC_IP, 12);
            EXPR_PAYLOAD
        }
        Selector::Saddr(IpFamily::V6) => {
            payload(&mut data, DESC_IP6, 8);
            EXPR_PAYLOAD
        }
        Selector::Daddr(IpFamily::V6) => {
            payload(&mut data, DESC_IP6, 9);
            EXPR_PAYLOAD
        }
        Selector::ThDport => {
            payload(&mut data, DESC_TH, 2);
            EXPR_PAYLOAD
        }
        Selector::L4Proto => {
            tlv_u32(&mut data, 0, crate::low::k::NFT_META_L4PROTO);
            EXPR_META
        }
        Selector::Mark => {
            tlv_u32(&mut data, 0, crate::low::k::NFT_META_MARK);
            EXPR_META
        }
        Selector::Numgen(modulus) => {
            tlv_u32(&mut data, 0, crate::low::k::NFT_NG_RANDOM);
            tlv_u32(&mut data, 1, *modulus);
            tlv_u32(&mut data, 2, 0);
            EXPR_NUMGEN
        }
        other => unreachable!("{other:?} is never used in a typeof declaration"),
    };
    (kind, data)
}

fn selector_from_udata(kind: u32, data: &[u8]) -> Option<Selector> {
    let attrs: Vec<(u8, u32)> = tlvs(data).filter_map(|(k, v)| Some((k, u32_of(v)?))).collect();
    let get = |k: u8| attrs.iter().find(|(kk, _)| *kk == k).map(|(_, v)| *v);
    Some(match kind {
        EXPR_PAYLOAD => match (get(0)?, get(1)?) {
            (DESC_IP, 11) => Selector::Saddr(IpFamily::V4),
            (DESC_IP, 12) => Selector::Daddr(IpFamily::V4),
            (DESC_IP6, 8) => Selector::Saddr(IpFamily::V6),
            (DESC_IP6, 9) => Selector::Daddr(IpFamily::V6),
            (DESC_TH, 2) => Selector::ThDport,
            _ => return None,
        },
        EXPR_META => match get(0)? {
            crate::low::k::NFT_META_L4PROTO => Selector::L4Proto,
            crate::low::k::NFT_META_MARK => Selector::Mark,
            _ => return None,
        },
        EXPR_NUMGEN if get(0)? == crate::low::k::NFT_NG_RANDOM && get(2).unwrap_or(0) == 0 => Selector::Numgen(get(1)?),
        _ => return None,
    })
}

/// `typeof` userdata: one expression, or a concatenation of them.
fn typeof_udata(sels: &[Selector]) -> Vec<u8> {
    let mut out = Vec::new();
    if let [single] = sels {
        let (kind, data) = selector_udata(single);
        tlv_u32(&mut out, TYPEOF_EXPR, kind);
        tlv(&mut out, TYPEOF_DATA, &data);
        return out;
    }
    let mut members = Vec::new();
    for (i, sel) in sels.iter().enumerate() {
        let (kind, data) = selector_udata(sel);
        let mut member = Vec::new();
        tlv_u32(&mut member, TYPEOF_EXPR, kind);
        tlv(&mut member, TYPEOF_DATA, &data);
        tlv(&mut members, i as u8, &member);
    }
    tlv_u32(&mut out, TYPEOF_EXPR, EXPR_CONCAT);
    tlv(&mut out, TYPEOF_DATA, &members);
    out
}

fn parse_typeof(v: &[u8]) -> Option<Vec<Selector>> {
    let kind = tlvs(v).find(|(k, _)| *k == TYPEOF_EXPR).and_then(|(_, v)| u32_of(v))?;
    let data = tlvs(v).find(|(k, _)| *k == TYPEOF_DATA).map(|(_, v)| v).unwrap_or_default();
    if kind != EXPR_CONCAT {
        return selector_from_udata(kind, data).map(|s| vec![s]);
    }
    let mut sels = Vec::new();
    for (_, member) in tlvs(data) {
        let kind = tlvs(member).find(|(k, _)| *k == TYPEOF_EXPR).and_then(|(_, v)| u32_of(v))?;
        let mdata = tlvs(member).find(|(k, _)| *k == TYPEOF_DATA).map(|(_, v)| v).unwrap_or_default();
        sels.push(selector_from_udata(kind, mdata)?);
    }
    // `type a . b` sets carry a concatenation with no members: not a typeof declaration.
    (!sels.is_empty()).then_some(sels)
}

/// Set userdata exactly as nft 1.0.6 writes it for the same declaration.
pub(crate) fn set_udata(decl: &SetDecl) -> Vec<u8> {
    let mut out = Vec::new();
    let key_types = decl.key_types();
    let order = |types: &[Datatype]| match types {
        [single] if single.big_endian() => BYTEORDER_BIG,
        [_] => BYTEORDER_HOST,
        _ => BYTEORDER_INVALID,
    };
    tlv_u32(&mut out, SET_KEYBYTEORDER, order(&key_types));
    if let Some(data) = &decl.data {
        let data_order = match data {
            DataSpec::Verdict => BYTEORDER_INVALID,
            DataSpec::Typeof(sels) => order(&sels.iter().map(|s| s.datatype()).collect::<Vec<_>>()),
        };
        tlv_u32(&mut out, SET_DATABYTEORDER, data_order);
    }
    match &decl.key {
        KeySpec::Typeof(sels) => tlv(&mut out, SET_KEY_TYPEOF, &typeof_udata(sels)),
        KeySpec::Type(types) if types.len() > 1 => {
            let mut v = Vec::new();
            tlv_u32(&mut v, TYPEOF_EXPR, EXPR_CONCAT);
            tlv(&mut v, TYPEOF_DATA, &[]);
            tlv(&mut out, SET_KEY_TYPEOF, &v);
        }
        KeySpec::Type(_) => {}
    }
    if let Some(DataSpec::Typeof(sels)) = &decl.data {
        tlv(&mut out, SET_DATA_TYPEOF, &typeof_udata(sels));
    }
    if decl.data.is_some() {
        tlv_u32(&mut out, SET_DATA_INTERVAL, 0);
    }
    if let Some(c) = &decl.comment {
        tlv_str(&mut out, SET_COMMENT, c);
    }
    out
}

/// Userdata of the anonymous set behind `<selector> { ... }`.
pub(crate) fn anon_set_udata(sel: Selector, verdict_map: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let order = if sel.datatype().big_endian() { BYTEORDER_BIG } else { BYTEORDER_HOST };
    tlv_u32(&mut out, SET_KEYBYTEORDER, order);
    if verdict_map {
        tlv_u32(&mut out, SET_DATABYTEORDER, BYTEORDER_INVALID);
    }
    tlv(&mut out, SET_KEY_TYPEOF, &typeof_udata(&[sel]));
    if verdict_map {
        tlv_u32(&mut out, SET_DATA_INTERVAL, 0);
    }
    out
}

/// What set userdata says about the declaration.
#[derive(Default, Debug)]
pub(crate) struct SetUdata {
    pub key_typeof: Option<Vec<Selector>>,
    pub data_typeof: Option<Vec<Selector>>,
    pub comment: Option<String>,
}

pub(crate) fn parse_set_udata(udata: &[u8]) -> SetUdata {
    let mut out = SetUdata::default();
    for (kind, v) in tlvs(udata) {
        match kind {
            SET_KEY_TYPEOF => out.key_typeof = parse_typeof(v),
            SET_DATA_TYPEOF => out.data_typeof = parse_typeof(v),
            SET_COMMENT => out.comment = cstr(v),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::{KeySpec, SetDecl};

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn typeof_map_udata_matches_nft() {
        // Captured from `nft --debug=mnl` (nft 1.0.6) for
        // map endpoints-2 { typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport; comment "x"; }
        let decl = SetDecl::map(
            "endpoints-2",
            KeySpec::Typeof(vec![
                Selector::Daddr(IpFamily::V4),
                Selector::L4Proto,
                Selector::ThDport,
                Selector::Numgen(2),
            ]),
            DataSpec::Typeof(vec![Selector::Daddr(IpFamily::V4), Selector::ThDport]),
        )
        .with_comment("x");
        assert_eq!(
            hex(&set_udata(&decl)),
            "000400000000010400000000036000040d00000001580014000407000000010c00040c00000001040c000000010e000409000000010600041000000002140004070000\
00010c00040b000000010402000000031a0004170000000112000401000000010402000000020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00040b000000010402000000060400000000070278\
00"
        );
        let parsed = parse_set_udata(&set_udata(&decl));
        assert_eq!(
            parsed.key_typeof,
            Some(vec![Selector::Daddr(IpFamily::V4), Selector::L4Proto, Selector::ThDport, Selector::Numgen(2)])
        );
        assert_eq!(parsed.comment.as_deref(), Some("x"));
    }

    #[test]
    fn type_sets_and_anon_sets_match_nft() {
        let cluster_ips =
            SetDecl::set("cluster-ips", KeySpec::Type(vec![Datatype::Ipv4Addr])).with_comment("Active ClusterIPs");
        assert_eq!(
            hex(&set_udata(&cluster_ips)),
            "000402000000071241637469766520436c7573746572495073 00".replace(' ', "")
        );
        let vmap =
            SetDecl::map("m", KeySpec::Type(vec![Datatype::InetProto, Datatype::InetService]), DataSpec::Verdict);
        assert_eq!(
            hex(&set_udata(&vmap)),
            "000400000000010400000000030800040d00000001000604 00000000".replace(' ', "")
        );
        assert_eq!(
            hex(&anon_set_udata(Selector::L4Proto, false)),
            "000401000000030e000409000000010600041000000 0".replace(' ', "")
        );
    }

    #[test]
    fn begin_carries_genid_in_network_order() {
        let mut b = Vec::new();
        put_begin(&mut b, 7, Some(0x01020304));
        assert_eq!(b.len(), 28);
        assert_eq!(&b[24..28], &[1, 2, 3, 4]);
        let msgs: Vec<_> = messages(&b).collect();
        assert_eq!(msgs.len(), 1);
        assert_eq!((msgs[0].kind, msgs[0].seq), (0x10, 7));
    }
}
