//! Building messages with libnftnl: tables, chains, rules and their expressions, sets,
//! elements, and dump requests.

use super::{ChainWire, ElemWire, Hdr, Owned, RuleWire, Scratch, SetWire, cstring};
use crate::kernel_expr::{ImmData, LowExpr, SetRef};
use nftnl::nftnl_sys as sys;
use std::ffi::CStr;
use verdict_netlink::consts::{
    NFPROTO_INET, NFT_MSG_GETCHAIN, NFT_MSG_GETGEN, NFT_MSG_GETRULE, NFT_MSG_GETSET, NFT_MSG_GETSETELEM,
    NFT_MSG_GETTABLE, NFT_MSG_NEWSET, NLM_F_DUMP,
};

pub(crate) fn put_table(s: &mut Scratch, out: &mut Vec<u8>, h: Hdr, name: &str, udata: Option<&[u8]>) {
    let t = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_table_alloc() },
    );
    let cname = cstring(name);
    // SAFETY: `t` is a live table; libnftnl copies the string and the userdata.
    unsafe {
        sys::nftnl_table_set_str(t.as_ptr(), sys::NFTNL_TABLE_NAME as u16, cname.as_ptr());
        if let Some(u) = udata {
            sys::nftnl_table_set_data(t.as_ptr(), sys::NFTNL_TABLE_USERDATA as u16, u.as_ptr().cast(), u.len() as u32);
        }
    }
    s.build(out, h, |nlh| {
        // SAFETY: nlh is the header of the message being built in the scratch buffer.
        unsafe { sys::nftnl_table_nlmsg_build_payload(nlh, t.as_ptr()) }
    });
}

pub(crate) fn put_chain(s: &mut Scratch, out: &mut Vec<u8>, h: Hdr, table: &str, c: &ChainWire) {
    let chain = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_chain_alloc() },
    );
    let (ctable, cname) = (cstring(table), cstring(&c.name));
    // SAFETY: `chain` is live; libnftnl copies strings. (Dump requests leave the name out,
    // which would otherwise filter on it.)
    unsafe {
        sys::nftnl_chain_set_str(chain.as_ptr(), sys::NFTNL_CHAIN_TABLE as u16, ctable.as_ptr());
        if !c.name.is_empty() {
            sys::nftnl_chain_set_str(chain.as_ptr(), sys::NFTNL_CHAIN_NAME as u16, cname.as_ptr());
        }
    }
    if let Some((hook, prio, kind)) = &c.hook {
        let ckind = cstring(kind);
        // SAFETY: as above.
        unsafe {
            sys::nftnl_chain_set_u32(chain.as_ptr(), sys::NFTNL_CHAIN_HOOKNUM as u16, *hook);
            sys::nftnl_chain_set_s32(chain.as_ptr(), sys::NFTNL_CHAIN_PRIO as u16, *prio);
            sys::nftnl_chain_set_str(chain.as_ptr(), sys::NFTNL_CHAIN_TYPE as u16, ckind.as_ptr());
            sys::nftnl_chain_set_u32(chain.as_ptr(), sys::NFTNL_CHAIN_POLICY as u16, c.policy.unwrap_or(1));
        }
    }
    s.build(out, h, |nlh| {
        // SAFETY: nlh is the header being built.
        unsafe { sys::nftnl_chain_nlmsg_build_payload(nlh, chain.as_ptr()) }
    });
}

/// A rule (`exprs` empty and `msg_type` DELRULE: flush the chain). `anon` gives the set id of
/// each anonymous set the rule's lookups refer to (named `__set%d`).
pub(crate) fn put_rule(s: &mut Scratch, out: &mut Vec<u8>, h: Hdr, table: &str, r: &RuleWire, anon: &[u32]) {
    let rule = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_rule_alloc() },
    );
    let (ctable, cchain) = (cstring(table), cstring(&r.chain));
    // SAFETY: `rule` is live; strings and userdata are copied.
    unsafe {
        sys::nftnl_rule_set_str(rule.as_ptr(), sys::NFTNL_RULE_TABLE as u16, ctable.as_ptr());
        if !r.chain.is_empty() {
            sys::nftnl_rule_set_str(rule.as_ptr(), sys::NFTNL_RULE_CHAIN as u16, cchain.as_ptr());
        }
        if let Some(u) = &r.udata {
            sys::nftnl_rule_set_data(rule.as_ptr(), sys::NFTNL_RULE_USERDATA as u16, u.as_ptr().cast(), u.len() as u32);
        }
    }
    for e in &r.exprs {
        let expr = build_expr(e, anon);
        // SAFETY: the rule takes ownership of the expression and frees it with itself.
        unsafe { sys::nftnl_rule_add_expr(rule.as_ptr(), expr.into_raw()) };
    }
    s.build(out, h, |nlh| {
        // SAFETY: nlh is the header being built.
        unsafe { sys::nftnl_rule_nlmsg_build_payload(nlh, rule.as_ptr()) }
    });
}

fn build_expr(e: &LowExpr, anon: &[u32]) -> Owned<sys::nftnl_expr> {
    let name: &CStr = match e {
        LowExpr::Meta { .. } | LowExpr::MetaSet { .. } => c"meta",
        LowExpr::Payload { .. } => c"payload",
        LowExpr::Cmp { .. } => c"cmp",
        LowExpr::Bitwise { .. } => c"bitwise",
        LowExpr::Lookup { .. } => c"lookup",
        LowExpr::Immediate { .. } => c"immediate",
        LowExpr::Numgen { .. } => c"numgen",
        LowExpr::Ct { .. } => c"ct",
        LowExpr::Fib { .. } => c"fib",
        LowExpr::Nat { .. } => c"nat",
        LowExpr::Masq { .. } => c"masq",
        LowExpr::Reject { .. } => c"reject",
        LowExpr::Counter => c"counter",
        LowExpr::Dynset { .. } => c"dynset",
        LowExpr::FlowOffload { .. } => c"flow_offload",
    };
    let x = Owned::new(
        // SAFETY: `name` is a NUL-terminated expression name libnftnl knows.
        unsafe { sys::nftnl_expr_alloc(name.as_ptr()) },
    );
    let p = x.as_ptr();
    // SAFETY (for every setter below): `p` is a live expression of the matching type; data
    // setters copy their input.
    let u32_ = |attr: u32, v: u32| unsafe { sys::nftnl_expr_set_u32(p, attr as u16, v) };
    let data = |attr: u32, b: &[u8]| unsafe {
        sys::nftnl_expr_set(p, attr as u16, b.as_ptr().cast(), b.len() as u32);
    };
    let str_ = |attr: u32, st: &str| {
        let c = cstring(st);
        unsafe {
            sys::nftnl_expr_set_str(p, attr as u16, c.as_ptr());
        }
    };
    match e {
        LowExpr::Meta { key, dreg } => {
            u32_(sys::NFTNL_EXPR_META_KEY, *key);
            u32_(sys::NFTNL_EXPR_META_DREG, *dreg);
        }
        LowExpr::MetaSet { key, sreg } => {
            u32_(sys::NFTNL_EXPR_META_KEY, *key);
            u32_(sys::NFTNL_EXPR_META_SREG, *sreg);
        }
        LowExpr::Payload { base, offset, len, dreg } => {
            u32_(sys::NFTNL_EXPR_PAYLOAD_DREG, *dreg);
            u32_(sys::NFTNL_EXPR_PAYLOAD_BASE, *base);
            u32_(sys::NFTNL_EXPR_PAYLOAD_OFFSET, *offset);
            u32_(sys::NFTNL_EXPR_PAYLOAD_LEN, *len);
        }
        LowExpr::Cmp { sreg, op, data: d } => {
            u32_(sys::NFTNL_EXPR_CMP_SREG, *sreg);
            u32_(sys::NFTNL_EXPR_CMP_OP, *op);
            data(sys::NFTNL_EXPR_CMP_DATA, d);
        }
        LowExpr::Bitwise { sreg, dreg, len, mask, xor } => {
            u32_(sys::NFTNL_EXPR_BITWISE_SREG, *sreg);
            u32_(sys::NFTNL_EXPR_BITWISE_DREG, *dreg);
            u32_(sys::NFTNL_EXPR_BITWISE_LEN, *len);
            data(sys::NFTNL_EXPR_BITWISE_MASK, mask);
            data(sys::NFTNL_EXPR_BITWISE_XOR, xor);
        }
        LowExpr::Lookup { sreg, dreg, set, invert } => {
            u32_(sys::NFTNL_EXPR_LOOKUP_SREG, *sreg);
            if let Some(d) = dreg {
                u32_(sys::NFTNL_EXPR_LOOKUP_DREG, *d);
            }
            match set {
                SetRef::Named(n) => str_(sys::NFTNL_EXPR_LOOKUP_SET, n),
                SetRef::Anon(i) => {
                    str_(sys::NFTNL_EXPR_LOOKUP_SET, "__set%d");
                    u32_(sys::NFTNL_EXPR_LOOKUP_SET_ID, anon[*i]);
                }
            }
            if *invert {
                u32_(sys::NFTNL_EXPR_LOOKUP_FLAGS, 1);
            }
        }
        LowExpr::Immediate { dreg, data: d } => {
            u32_(sys::NFTNL_EXPR_IMM_DREG, *dreg);
            match d {
                ImmData::Verdict(code, chain) => {
                    u32_(sys::NFTNL_EXPR_IMM_VERDICT, *code as u32);
                    if let Some(c) = chain {
                        str_(sys::NFTNL_EXPR_IMM_CHAIN, c);
                    }
                }
                ImmData::Value(v) => data(sys::NFTNL_EXPR_IMM_DATA, v),
            }
        }
        LowExpr::Numgen { dreg, modulus, kind, offset } => {
            u32_(sys::NFTNL_EXPR_NG_DREG, *dreg);
            u32_(sys::NFTNL_EXPR_NG_MODULUS, *modulus);
            u32_(sys::NFTNL_EXPR_NG_TYPE, *kind);
            u32_(sys::NFTNL_EXPR_NG_OFFSET, *offset);
        }
        LowExpr::Ct { key, dreg } => {
            u32_(sys::NFTNL_EXPR_CT_KEY, *key);
            u32_(sys::NFTNL_EXPR_CT_DREG, *dreg);
        }
        LowExpr::Fib { flags, result, dreg } => {
            u32_(sys::NFTNL_EXPR_FIB_FLAGS, *flags);
            u32_(sys::NFTNL_EXPR_FIB_RESULT, *result);
            u32_(sys::NFTNL_EXPR_FIB_DREG, *dreg);
        }
        LowExpr::Nat { kind, family, reg_addr, reg_proto, flags } => {
            u32_(sys::NFTNL_EXPR_NAT_TYPE, *kind);
            u32_(sys::NFTNL_EXPR_NAT_FAMILY, *family);
            u32_(sys::NFTNL_EXPR_NAT_REG_ADDR_MIN, *reg_addr);
            if let Some(r) = reg_proto {
                u32_(sys::NFTNL_EXPR_NAT_REG_PROTO_MIN, *r);
            }
            if let Some(f) = flags {
                u32_(sys::NFTNL_EXPR_NAT_FLAGS, *f);
            }
        }
        LowExpr::Masq { flags } => {
            if let Some(f) = flags {
                u32_(sys::NFTNL_EXPR_MASQ_FLAGS, *f);
            }
        }
        LowExpr::Reject { kind, code } => {
            u32_(sys::NFTNL_EXPR_REJECT_TYPE, *kind);
            // SAFETY: as above.
            unsafe { sys::nftnl_expr_set_u8(p, sys::NFTNL_EXPR_REJECT_CODE as u16, *code) };
        }
        LowExpr::Counter => {}
        LowExpr::Dynset { op, sreg_key, set } => {
            u32_(sys::NFTNL_EXPR_DYNSET_OP, *op);
            u32_(sys::NFTNL_EXPR_DYNSET_SREG_KEY, *sreg_key);
            str_(sys::NFTNL_EXPR_DYNSET_SET_NAME, set);
        }
        LowExpr::FlowOffload { flowtable } => str_(sys::NFTNL_EXPR_FLOW_TABLE_NAME, flowtable),
    }
    x
}

fn new_set(table: &str, w: &SetWire) -> Owned<sys::nftnl_set> {
    let set = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_set_alloc() },
    );
    let p = set.as_ptr();
    let (ctable, cname) = (cstring(table), cstring(&w.name));
    // SAFETY: `p` is a live set; strings and userdata are copied.
    unsafe {
        sys::nftnl_set_set_str(p, sys::NFTNL_SET_TABLE as u16, ctable.as_ptr());
        sys::nftnl_set_set_str(p, sys::NFTNL_SET_NAME as u16, cname.as_ptr());
        sys::nftnl_set_set_u32(p, sys::NFTNL_SET_FAMILY as u16, u32::from(NFPROTO_INET));
    }
    p_set_id(p, w.id);
    set
}

fn p_set_id(p: *mut sys::nftnl_set, id: Option<u32>) {
    if let Some(id) = id {
        // SAFETY: `p` is a live set.
        unsafe { sys::nftnl_set_set_u32(p, sys::NFTNL_SET_ID as u16, id) };
    }
}

pub(crate) fn put_set(s: &mut Scratch, out: &mut Vec<u8>, h: Hdr, table: &str, w: &SetWire) {
    let set = new_set(table, w);
    let p = set.as_ptr();
    if h.msg_type == NFT_MSG_NEWSET {
        // SAFETY: `p` is a live set; data setters copy.
        unsafe {
            sys::nftnl_set_set_u32(p, sys::NFTNL_SET_FLAGS as u16, w.flags);
            sys::nftnl_set_set_u32(p, sys::NFTNL_SET_KEY_TYPE as u16, w.key_type);
            sys::nftnl_set_set_u32(p, sys::NFTNL_SET_KEY_LEN as u16, w.key_len);
            if let Some(dt) = w.data_type {
                sys::nftnl_set_set_u32(p, sys::NFTNL_SET_DATA_TYPE as u16, dt);
                sys::nftnl_set_set_u32(p, sys::NFTNL_SET_DATA_LEN as u16, w.data_len);
            }
            if let Some(size) = w.size {
                sys::nftnl_set_set_u32(p, sys::NFTNL_SET_DESC_SIZE as u16, size);
            }
            if let Some(t) = w.timeout_ms {
                sys::nftnl_set_set_u64(p, sys::NFTNL_SET_TIMEOUT as u16, t);
            }
            if w.counter {
                // The set takes ownership of the expression; elements added without
                // expressions of their own get a copy of it (a fresh counter).
                let counter = sys::nftnl_expr_alloc(c"counter".as_ptr());
                sys::nftnl_set_add_expr(p, counter);
            }
            if !w.udata.is_empty() {
                sys::nftnl_set_set_data(
                    p,
                    sys::NFTNL_SET_USERDATA as u16,
                    w.udata.as_ptr().cast(),
                    w.udata.len() as u32,
                );
            }
        }
    }
    s.build(out, h, |nlh| {
        // SAFETY: nlh is the header being built.
        unsafe { sys::nftnl_set_nlmsg_build_payload(nlh, p) }
    });
}

/// Elements of one set, in one message (the caller keeps the message under 64 KiB).
pub(crate) fn put_elems(
    s: &mut Scratch,
    out: &mut Vec<u8>,
    h: Hdr,
    table: &str,
    set_name: &str,
    set_id: Option<u32>,
    elems: &[ElemWire],
) {
    let set = new_set(table, &SetWire { name: set_name.to_string(), id: set_id, ..SetWire::default() });
    for e in elems {
        let el = Owned::new(
            // SAFETY: plain allocation.
            unsafe { sys::nftnl_set_elem_alloc() },
        );
        let p = el.as_ptr();
        // SAFETY: `p` is a live element; setters copy their input.
        unsafe {
            sys::nftnl_set_elem_set(p, sys::NFTNL_SET_ELEM_KEY as u16, e.key.as_ptr().cast(), e.key.len() as u32);
            if let Some((code, chain)) = &e.verdict {
                sys::nftnl_set_elem_set_u32(p, sys::NFTNL_SET_ELEM_VERDICT as u16, *code as u32);
                if let Some(c) = chain {
                    let cc = cstring(c);
                    sys::nftnl_set_elem_set_str(p, sys::NFTNL_SET_ELEM_CHAIN as u16, cc.as_ptr());
                }
            }
            if let Some(d) = &e.data {
                sys::nftnl_set_elem_set(p, sys::NFTNL_SET_ELEM_DATA as u16, d.as_ptr().cast(), d.len() as u32);
            }
            if let Some(u) = &e.udata {
                sys::nftnl_set_elem_set(p, sys::NFTNL_SET_ELEM_USERDATA as u16, u.as_ptr().cast(), u.len() as u32);
            }
            // The set takes ownership of the element.
            sys::nftnl_set_elem_add(set.as_ptr(), el.into_raw());
        }
    }
    s.build(out, h, |nlh| {
        // SAFETY: nlh is the header being built.
        unsafe { sys::nftnl_set_elems_nlmsg_build_payload(nlh, set.as_ptr()) }
    });
}

/// A dump request for the objects of one table (and, for elements, one set).
pub(crate) fn put_dump_request(
    s: &mut Scratch,
    out: &mut Vec<u8>,
    msg_type: u16,
    seq: u32,
    table: &str,
    set: Option<&str>,
) {
    let dump = Hdr { msg_type, flags: NLM_F_DUMP, seq };
    match msg_type {
        NFT_MSG_GETTABLE => put_table(s, out, Hdr { flags: 0, ..dump }, table, None),
        NFT_MSG_GETCHAIN => put_chain(s, out, dump, table, &ChainWire::default()),
        NFT_MSG_GETRULE => put_rule(s, out, dump, table, &RuleWire::default(), &[]),
        NFT_MSG_GETSET => {
            let set = new_set(table, &SetWire::default());
            // An empty name would filter on it; dump requests carry only the table.
            // SAFETY: `set` is live.
            unsafe { sys::nftnl_set_unset(set.as_ptr(), sys::NFTNL_SET_NAME as u16) };
            s.build(out, dump, |nlh| {
                // SAFETY: nlh is the header being built.
                unsafe { sys::nftnl_set_nlmsg_build_payload(nlh, set.as_ptr()) }
            });
        }
        NFT_MSG_GETSETELEM => put_elems(s, out, dump, table, set.unwrap_or_default(), None, &[]),
        NFT_MSG_GETGEN => s.build(out, Hdr { flags: 0, ..dump }, |_| {}),
        other => unreachable!("no dump request for message type {other}"),
    }
}
