//! Reading dumped messages with libnftnl into wire structs.

use super::{ChainWire, ElemWire, Owned, RuleWire, Scratch, SetWire};
use crate::kernel_expr::{ImmData, LowExpr, SetRef};
use nftnl::nftnl_sys as sys;
use nftnl::nftnl_sys::libc;
use std::ffi::{CStr, c_char, c_void};

fn get_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: libnftnl returns NUL-terminated strings owned by the object being read.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn get_bytes(p: *const c_void, len: u32) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: libnftnl returns `len` bytes owned by the object being read.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) }.to_vec())
}

/// (name, userdata) of a table message.
pub(crate) fn parse_table(s: &mut Scratch, msg: &[u8]) -> Option<(String, Option<Vec<u8>>)> {
    let t = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_table_alloc() },
    );
    let nlh = s.load(msg);
    // SAFETY: nlh points at a complete message copied into the aligned scratch buffer.
    if unsafe { sys::nftnl_table_nlmsg_parse(nlh, t.as_ptr()) } < 0 {
        return None;
    }
    // SAFETY: getters read attributes of the live table.
    unsafe {
        let name = get_str(sys::nftnl_table_get_str(t.as_ptr(), sys::NFTNL_TABLE_NAME as u16))?;
        let mut len = 0u32;
        let udata = if sys::nftnl_table_is_set(t.as_ptr(), sys::NFTNL_TABLE_USERDATA as u16) {
            get_bytes(sys::nftnl_table_get_data(t.as_ptr(), sys::NFTNL_TABLE_USERDATA as u16, &mut len), len)
        } else {
            None
        };
        Some((name, udata))
    }
}

pub(crate) fn parse_chain(s: &mut Scratch, msg: &[u8]) -> Option<ChainWire> {
    let c = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_chain_alloc() },
    );
    let nlh = s.load(msg);
    // SAFETY: nlh points at a complete message in the aligned scratch buffer.
    if unsafe { sys::nftnl_chain_nlmsg_parse(nlh, c.as_ptr()) } < 0 {
        return None;
    }
    let p = c.as_ptr();
    // SAFETY: getters read attributes of the live chain.
    unsafe {
        let name = get_str(sys::nftnl_chain_get_str(p, sys::NFTNL_CHAIN_NAME as u16))?;
        let hook = if sys::nftnl_chain_is_set(p, sys::NFTNL_CHAIN_HOOKNUM as u16) {
            Some((
                sys::nftnl_chain_get_u32(p, sys::NFTNL_CHAIN_HOOKNUM as u16),
                sys::nftnl_chain_get_s32(p, sys::NFTNL_CHAIN_PRIO as u16),
                get_str(sys::nftnl_chain_get_str(p, sys::NFTNL_CHAIN_TYPE as u16)).unwrap_or_default(),
            ))
        } else {
            None
        };
        let policy = sys::nftnl_chain_is_set(p, sys::NFTNL_CHAIN_POLICY as u16)
            .then(|| sys::nftnl_chain_get_u32(p, sys::NFTNL_CHAIN_POLICY as u16));
        Some(ChainWire { name, hook, policy })
    }
}

pub(crate) fn parse_set(s: &mut Scratch, msg: &[u8]) -> Option<SetWire> {
    let set = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_set_alloc() },
    );
    let nlh = s.load(msg);
    // SAFETY: nlh points at a complete message in the aligned scratch buffer.
    if unsafe { sys::nftnl_set_nlmsg_parse(nlh, set.as_ptr()) } < 0 {
        return None;
    }
    let p = set.as_ptr();
    // SAFETY: getters read attributes of the live set.
    unsafe {
        let is = |attr: u32| sys::nftnl_set_is_set(p, attr as u16);
        let u32_ = |attr: u32| sys::nftnl_set_get_u32(p, attr as u16);
        let mut len = 0u32;
        let udata = if is(sys::NFTNL_SET_USERDATA) {
            get_bytes(sys::nftnl_set_get_data(p, sys::NFTNL_SET_USERDATA as u16, &mut len), len).unwrap_or_default()
        } else {
            Vec::new()
        };
        Some(SetWire {
            name: get_str(sys::nftnl_set_get_str(p, sys::NFTNL_SET_NAME as u16))?,
            flags: u32_(sys::NFTNL_SET_FLAGS),
            key_type: u32_(sys::NFTNL_SET_KEY_TYPE),
            key_len: u32_(sys::NFTNL_SET_KEY_LEN),
            data_type: is(sys::NFTNL_SET_DATA_TYPE).then(|| u32_(sys::NFTNL_SET_DATA_TYPE)),
            data_len: u32_(sys::NFTNL_SET_DATA_LEN),
            id: None,
            size: is(sys::NFTNL_SET_DESC_SIZE).then(|| u32_(sys::NFTNL_SET_DESC_SIZE)),
            timeout_ms: is(sys::NFTNL_SET_TIMEOUT).then(|| sys::nftnl_set_get_u64(p, sys::NFTNL_SET_TIMEOUT as u16)),
            udata,
            counter: (is(sys::NFTNL_SET_EXPR) || is(sys::NFTNL_SET_EXPRESSIONS))
                && first_expr_is_counter(|cb, data| sys::nftnl_set_expr_foreach(p, cb, data)),
        })
    }
}

/// The elements carried by one NEWSETELEM dump message.
pub(crate) fn parse_elems(s: &mut Scratch, msg: &[u8], out: &mut Vec<ElemWire>) -> bool {
    let set = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_set_alloc() },
    );
    let nlh = s.load(msg);
    // SAFETY: nlh points at a complete message in the aligned scratch buffer.
    if unsafe { sys::nftnl_set_elems_nlmsg_parse(nlh, set.as_ptr()) } < 0 {
        return false;
    }
    // SAFETY: the iterator walks elements owned by the live set and is destroyed before it.
    unsafe {
        let iter = sys::nftnl_set_elems_iter_create(set.as_ptr());
        if iter.is_null() {
            return false;
        }
        loop {
            let e = sys::nftnl_set_elems_iter_next(iter);
            if e.is_null() {
                break;
            }
            let get = |attr: u32| {
                if !sys::nftnl_set_elem_is_set(e, attr as u16) {
                    return None;
                }
                let mut len = 0u32;
                get_bytes(sys::nftnl_set_elem_get(e, attr as u16, &mut len), len)
            };
            let verdict = sys::nftnl_set_elem_is_set(e, sys::NFTNL_SET_ELEM_VERDICT as u16).then(|| {
                let code = sys::nftnl_set_elem_get_u32(e, sys::NFTNL_SET_ELEM_VERDICT as u16) as i32;
                let chain = if sys::nftnl_set_elem_is_set(e, sys::NFTNL_SET_ELEM_CHAIN as u16) {
                    get_str(sys::nftnl_set_elem_get_str(e, sys::NFTNL_SET_ELEM_CHAIN as u16))
                } else {
                    None
                };
                (code, chain)
            });
            out.push(ElemWire {
                key: get(sys::NFTNL_SET_ELEM_KEY).unwrap_or_default(),
                verdict,
                data: get(sys::NFTNL_SET_ELEM_DATA),
                udata: get(sys::NFTNL_SET_ELEM_USERDATA),
                packets: elem_packets(e),
            });
        }
        sys::nftnl_set_elems_iter_destroy(iter);
    }
    true
}

/// Whether the first expression a libnftnl `*_expr_foreach` visits is a `counter`.
///
/// # Safety
/// `foreach` must call libnftnl's foreach on a live object with the given callback and data.
unsafe fn first_expr_is_counter(
    foreach: impl FnOnce(
        Option<unsafe extern "C" fn(*mut sys::nftnl_expr, *mut c_void) -> libc::c_int>,
        *mut c_void,
    ) -> libc::c_int,
) -> bool {
    unsafe extern "C" fn visit(e: *mut sys::nftnl_expr, data: *mut c_void) -> libc::c_int {
        // SAFETY: `data` is the `Option<bool>` below, alive for the whole foreach; `e` is a
        // live expression of the object being walked.
        unsafe {
            let seen = &mut *data.cast::<Option<bool>>();
            if seen.is_none() {
                let name = get_str(sys::nftnl_expr_get_str(e, sys::NFTNL_EXPR_NAME as u16));
                *seen = Some(name.as_deref() == Some("counter"));
            }
        }
        0
    }
    let mut seen: Option<bool> = None;
    foreach(Some(visit), (&mut seen as *mut Option<bool>).cast());
    seen == Some(true)
}

/// The packet count of an element's `counter` expression, if it has one.
///
/// # Safety
/// `e` must be a live element.
unsafe fn elem_packets(e: *mut sys::nftnl_set_elem) -> Option<u64> {
    unsafe extern "C" fn visit(x: *mut sys::nftnl_expr, data: *mut c_void) -> libc::c_int {
        // SAFETY: `data` is the `Option<u64>` below, alive for the whole foreach; `x` is a
        // live expression of the element being walked.
        unsafe {
            let out = &mut *data.cast::<Option<u64>>();
            let name = get_str(sys::nftnl_expr_get_str(x, sys::NFTNL_EXPR_NAME as u16));
            if out.is_none() && name.as_deref() == Some("counter") {
                *out = Some(sys::nftnl_expr_get_u64(x, sys::NFTNL_EXPR_CTR_PACKETS as u16));
            }
        }
        0
    }
    let mut packets: Option<u64> = None;
    // SAFETY: `e` is live (caller); the callback only writes `packets`, which outlives the call.
    unsafe { sys::nftnl_set_elem_expr_foreach(e, Some(visit), (&mut packets as *mut Option<u64>).cast()) };
    packets
}

pub(crate) fn parse_rule(s: &mut Scratch, msg: &[u8]) -> Option<RuleWire> {
    let rule = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_rule_alloc() },
    );
    let nlh = s.load(msg);
    // SAFETY: nlh points at a complete message in the aligned scratch buffer.
    if unsafe { sys::nftnl_rule_nlmsg_parse(nlh, rule.as_ptr()) } < 0 {
        return None;
    }
    let p = rule.as_ptr();
    let mut w = RuleWire::default();
    // SAFETY: getters read the live rule; the expression iterator is destroyed before the rule.
    unsafe {
        w.chain = get_str(sys::nftnl_rule_get_str(p, sys::NFTNL_RULE_CHAIN as u16))?;
        w.handle = sys::nftnl_rule_get_u64(p, sys::NFTNL_RULE_HANDLE as u16);
        if sys::nftnl_rule_is_set(p, sys::NFTNL_RULE_USERDATA as u16) {
            let mut len = 0u32;
            w.udata = get_bytes(sys::nftnl_rule_get_data(p, sys::NFTNL_RULE_USERDATA as u16, &mut len), len);
        }
        let iter = sys::nftnl_expr_iter_create(p);
        if iter.is_null() {
            return None;
        }
        let mut ok = true;
        loop {
            let e = sys::nftnl_expr_iter_next(iter);
            if e.is_null() {
                break;
            }
            match parse_expr(e) {
                Some(x) => w.exprs.push(x),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        sys::nftnl_expr_iter_destroy(iter);
        ok.then_some(w)
    }
}

/// One expression; `None` for expression types verdict never writes.
///
/// # Safety
/// `e` must be a live expression.
unsafe fn parse_expr(e: *mut sys::nftnl_expr) -> Option<LowExpr> {
    // SAFETY: the caller guarantees `e` is live; getters read its attributes.
    unsafe {
        let is = |a: u32| sys::nftnl_expr_is_set(e, a as u16);
        let u = |a: u32| sys::nftnl_expr_get_u32(e, a as u16);
        let bytes = |a: u32| {
            let mut len = 0u32;
            get_bytes(sys::nftnl_expr_get(e, a as u16, &mut len), len).unwrap_or_default()
        };
        let name = get_str(sys::nftnl_expr_get_str(e, sys::NFTNL_EXPR_NAME as u16))?;
        Some(match name.as_str() {
            "meta" if is(sys::NFTNL_EXPR_META_SREG) => {
                LowExpr::MetaSet { key: u(sys::NFTNL_EXPR_META_KEY), sreg: u(sys::NFTNL_EXPR_META_SREG) }
            }
            "meta" => LowExpr::Meta { key: u(sys::NFTNL_EXPR_META_KEY), dreg: u(sys::NFTNL_EXPR_META_DREG) },
            "payload" if !is(sys::NFTNL_EXPR_PAYLOAD_SREG) => LowExpr::Payload {
                base: u(sys::NFTNL_EXPR_PAYLOAD_BASE),
                offset: u(sys::NFTNL_EXPR_PAYLOAD_OFFSET),
                len: u(sys::NFTNL_EXPR_PAYLOAD_LEN),
                dreg: u(sys::NFTNL_EXPR_PAYLOAD_DREG),
            },
            "cmp" => LowExpr::Cmp {
                sreg: u(sys::NFTNL_EXPR_CMP_SREG),
                op: u(sys::NFTNL_EXPR_CMP_OP),
                data: bytes(sys::NFTNL_EXPR_CMP_DATA),
            },
            "bitwise" if !is(sys::NFTNL_EXPR_BITWISE_OP) || u(sys::NFTNL_EXPR_BITWISE_OP) == 0 => LowExpr::Bitwise {
                sreg: u(sys::NFTNL_EXPR_BITWISE_SREG),
                dreg: u(sys::NFTNL_EXPR_BITWISE_DREG),
                len: u(sys::NFTNL_EXPR_BITWISE_LEN),
                mask: bytes(sys::NFTNL_EXPR_BITWISE_MASK),
                xor: bytes(sys::NFTNL_EXPR_BITWISE_XOR),
            },
            "lookup" => LowExpr::Lookup {
                sreg: u(sys::NFTNL_EXPR_LOOKUP_SREG),
                dreg: is(sys::NFTNL_EXPR_LOOKUP_DREG).then(|| u(sys::NFTNL_EXPR_LOOKUP_DREG)),
                set: SetRef::Named(get_str(sys::nftnl_expr_get_str(e, sys::NFTNL_EXPR_LOOKUP_SET as u16))?),
                invert: is(sys::NFTNL_EXPR_LOOKUP_FLAGS) && u(sys::NFTNL_EXPR_LOOKUP_FLAGS) & 1 != 0,
            },
            "immediate" => LowExpr::Immediate {
                dreg: u(sys::NFTNL_EXPR_IMM_DREG),
                data: if is(sys::NFTNL_EXPR_IMM_VERDICT) {
                    let chain = if is(sys::NFTNL_EXPR_IMM_CHAIN) {
                        get_str(sys::nftnl_expr_get_str(e, sys::NFTNL_EXPR_IMM_CHAIN as u16))
                    } else {
                        None
                    };
                    ImmData::Verdict(u(sys::NFTNL_EXPR_IMM_VERDICT) as i32, chain)
                } else {
                    ImmData::Value(bytes(sys::NFTNL_EXPR_IMM_DATA))
                },
            },
            "numgen" => LowExpr::Numgen {
                dreg: u(sys::NFTNL_EXPR_NG_DREG),
                modulus: u(sys::NFTNL_EXPR_NG_MODULUS),
                kind: u(sys::NFTNL_EXPR_NG_TYPE),
                offset: u(sys::NFTNL_EXPR_NG_OFFSET),
            },
            "ct" => LowExpr::Ct { key: u(sys::NFTNL_EXPR_CT_KEY), dreg: u(sys::NFTNL_EXPR_CT_DREG) },
            "fib" => LowExpr::Fib {
                flags: u(sys::NFTNL_EXPR_FIB_FLAGS),
                result: u(sys::NFTNL_EXPR_FIB_RESULT),
                dreg: u(sys::NFTNL_EXPR_FIB_DREG),
            },
            "nat" => LowExpr::Nat {
                kind: u(sys::NFTNL_EXPR_NAT_TYPE),
                family: u(sys::NFTNL_EXPR_NAT_FAMILY),
                reg_addr: u(sys::NFTNL_EXPR_NAT_REG_ADDR_MIN),
                reg_proto: is(sys::NFTNL_EXPR_NAT_REG_PROTO_MIN).then(|| u(sys::NFTNL_EXPR_NAT_REG_PROTO_MIN)),
                flags: is(sys::NFTNL_EXPR_NAT_FLAGS).then(|| u(sys::NFTNL_EXPR_NAT_FLAGS)),
            },
            "masq" => LowExpr::Masq { flags: is(sys::NFTNL_EXPR_MASQ_FLAGS).then(|| u(sys::NFTNL_EXPR_MASQ_FLAGS)) },
            "reject" => LowExpr::Reject {
                kind: u(sys::NFTNL_EXPR_REJECT_TYPE),
                code: sys::nftnl_expr_get_u8(e, sys::NFTNL_EXPR_REJECT_CODE as u16),
            },
            "counter" => LowExpr::Counter,
            "dynset" => LowExpr::Dynset {
                op: u(sys::NFTNL_EXPR_DYNSET_OP),
                sreg_key: u(sys::NFTNL_EXPR_DYNSET_SREG_KEY),
                set: get_str(sys::nftnl_expr_get_str(e, sys::NFTNL_EXPR_DYNSET_SET_NAME as u16))?,
            },
            "flow_offload" => LowExpr::FlowOffload {
                flowtable: get_str(sys::nftnl_expr_get_str(e, sys::NFTNL_EXPR_FLOW_TABLE_NAME as u16))?,
            },
            _ => return None,
        })
    }
}

pub(crate) fn parse_genid(s: &mut Scratch, msg: &[u8]) -> Option<u32> {
    let g = Owned::new(
        // SAFETY: plain allocation.
        unsafe { sys::nftnl_gen_alloc() },
    );
    let nlh = s.load(msg);
    // SAFETY: nlh points at a complete message in the aligned scratch buffer; the getter reads
    // the live object.
    unsafe {
        if sys::nftnl_gen_nlmsg_parse(nlh, g.as_ptr()) < 0 {
            return None;
        }
        Some(sys::nftnl_gen_get_u32(g.as_ptr(), sys::NFTNL_GEN_ID as u16))
    }
}
