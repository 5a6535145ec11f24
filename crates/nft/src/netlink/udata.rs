//! The userdata TLVs nft stores on tables, sets, rules and elements so that `nft list` can
//! print comments and `typeof` declarations (libnftnl's udata format: type u8, length u8,
//! value; not netlink attributes).

use crate::rule::Selector;
use crate::ruleset::{DataSpec, Datatype, KeySpec, SetDecl};
use verdict_net::IpFamily;

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
            tlv_u32(&mut data, 0, crate::kernel_consts::NFT_META_L4PROTO);
            EXPR_META
        }
        Selector::Mark => {
            tlv_u32(&mut data, 0, crate::kernel_consts::NFT_META_MARK);
            EXPR_META
        }
        Selector::Numgen(modulus) => {
            tlv_u32(&mut data, 0, crate::kernel_consts::NFT_NG_RANDOM);
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
            crate::kernel_consts::NFT_META_L4PROTO => Selector::L4Proto,
            crate::kernel_consts::NFT_META_MARK => Selector::Mark,
            _ => return None,
        },
        EXPR_NUMGEN if get(0)? == crate::kernel_consts::NFT_NG_RANDOM && get(2).unwrap_or(0) == 0 => {
            Selector::Numgen(get(1)?)
        }
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
}
