//! The glue between verdict's wire structs and libnftnl: the only code in verdict that uses
//! `unsafe`. Every object handed to libnftnl is owned by an RAII wrapper here and never
//! escapes; callers see plain Rust data ([`ChainWire`], [`SetWire`], [`ElemWire`], ...).
//!
//! Messages are built into a private, aligned scratch buffer that is always larger than the
//! biggest message we build (elements are chunked by the caller, see `ELEMENT_BUDGET`), then
//! copied into the batch.
#![allow(unsafe_code)]

use crate::low::{ImmData, LowExpr, SetRef};
use nftnl::nftnl_sys as sys;
use nftnl::nftnl_sys::libc;
use std::ffi::{CStr, CString, c_char, c_void};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;

pub(crate) const NFPROTO_INET: u16 = 1;

pub(crate) const NFT_MSG_NEWTABLE: u16 = 0;
pub(crate) const NFT_MSG_GETTABLE: u16 = 1;
pub(crate) const NFT_MSG_DELTABLE: u16 = 2;
pub(crate) const NFT_MSG_NEWCHAIN: u16 = 3;
pub(crate) const NFT_MSG_GETCHAIN: u16 = 4;
pub(crate) const NFT_MSG_DELCHAIN: u16 = 5;
pub(crate) const NFT_MSG_NEWRULE: u16 = 6;
pub(crate) const NFT_MSG_GETRULE: u16 = 7;
pub(crate) const NFT_MSG_DELRULE: u16 = 8;
pub(crate) const NFT_MSG_NEWSET: u16 = 9;
pub(crate) const NFT_MSG_GETSET: u16 = 10;
pub(crate) const NFT_MSG_DELSET: u16 = 11;
pub(crate) const NFT_MSG_NEWSETELEM: u16 = 12;
pub(crate) const NFT_MSG_GETSETELEM: u16 = 13;
pub(crate) const NFT_MSG_DELSETELEM: u16 = 14;
pub(crate) const NFT_MSG_GETGEN: u16 = 16;

pub(crate) const NLM_F_CREATE: u16 = 0x400;
pub(crate) const NLM_F_APPEND: u16 = 0x800;
pub(crate) const NLM_F_DUMP: u16 = 0x300;

/// The largest message this module builds; the scratch buffer is twice that.
pub(crate) const MAX_MESSAGE: usize = 64 * 1024;

/// The header fields of a message being built: type (NFT_MSG_*), flags (NLM_F_*), sequence.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hdr {
    pub msg_type: u16,
    pub flags: u16,
    pub seq: u32,
}

/// A chain as it travels on the wire.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChainWire {
    pub name: String,
    /// (hook number, priority, chain type) for base chains.
    pub hook: Option<(u32, i32, String)>,
}

/// A set as it travels on the wire.
#[derive(Clone, Debug, Default)]
pub(crate) struct SetWire {
    pub name: String,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    pub data_type: Option<u32>,
    pub data_len: u32,
    pub id: Option<u32>,
    pub size: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub udata: Vec<u8>,
    /// A `counter` expression on every element (NFTA_SET_EXPR).
    pub counter: bool,
}

/// A set element as it travels on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ElemWire {
    pub key: Vec<u8>,
    pub verdict: Option<(i32, Option<String>)>,
    pub data: Option<Vec<u8>>,
    pub udata: Option<Vec<u8>>,
    /// Packets counted by the element's `counter` (read back only).
    pub packets: Option<u64>,
}

/// A rule as it travels on the wire: lookups name their sets (anonymous ones as `__set<N>`).
#[derive(Clone, Debug, Default)]
pub(crate) struct RuleWire {
    pub chain: String,
    pub exprs: Vec<LowExpr>,
    pub udata: Option<Vec<u8>>,
    /// The kernel's handle (read back only; trace events name rules by it).
    pub handle: u64,
}

/// A libnftnl object type and its destructor.
trait NftObject {
    /// Frees the object.
    ///
    /// # Safety
    /// `p` must come from the type's allocator and not be used afterwards.
    unsafe fn free(p: *mut Self);
}

macro_rules! nft_object {
    ($($ty:ident => $free:ident),* $(,)?) => {$(
        impl NftObject for sys::$ty {
            unsafe fn free(p: *mut Self) {
                // SAFETY: forwarded from the caller's contract.
                unsafe { sys::$free(p) }
            }
        }
    )*};
}

nft_object! {
    nftnl_table => nftnl_table_free,
    nftnl_chain => nftnl_chain_free,
    nftnl_rule => nftnl_rule_free,
    nftnl_expr => nftnl_expr_free,
    nftnl_set => nftnl_set_free,
    nftnl_set_elem => nftnl_set_elem_free,
    nftnl_gen => nftnl_gen_free,
}

/// An nftnl object freed on drop.
struct Owned<T: NftObject> {
    ptr: NonNull<T>,
}

impl<T: NftObject> Owned<T> {
    fn new(ptr: *mut T) -> Owned<T> {
        // libnftnl allocators only fail when out of memory.
        let ptr = NonNull::new(ptr).expect("libnftnl allocation failed (out of memory)");
        Owned { ptr }
    }

    fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Gives up ownership (the object now belongs to a container that frees it).
    fn into_raw(self) -> *mut T {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl<T: NftObject> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from the matching libnftnl allocator and is freed exactly once.
        unsafe { T::free(self.ptr.as_ptr()) }
    }
}

fn cstring(s: &str) -> CString {
    // Names come from our own renderer or from the kernel; neither contains NUL bytes.
    CString::new(s).expect("object name contains a NUL byte")
}

/// A scratch buffer aligned for `nlmsghdr`, for building and parsing messages.
pub(crate) struct Scratch(Vec<u64>);

impl Scratch {
    pub(crate) fn new() -> Scratch {
        Scratch(vec![0u64; 2 * MAX_MESSAGE / 8])
    }

    fn ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr().cast()
    }

    fn bytes(&self, len: usize) -> &[u8] {
        assert!(len <= self.0.len() * 8, "netlink message of {len} bytes overflowed the scratch buffer");
        // SAFETY: the Vec<u64> owns `len` initialised bytes (checked above); u8 has no alignment
        // requirement.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), len) }
    }

    fn load(&mut self, msg: &[u8]) -> *const libc::nlmsghdr {
        assert!(
            msg.len() <= self.0.len() * 8,
            "netlink message of {} bytes is larger than the scratch buffer",
            msg.len()
        );
        // SAFETY: the destination holds at least msg.len() bytes (checked above) and does not
        // overlap `msg`, which borrows a different buffer.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), self.0.as_mut_ptr().cast::<u8>(), msg.len()) };
        self.0.as_ptr().cast()
    }

    /// Builds one message with libnftnl and appends it to `out`.
    fn build(&mut self, out: &mut Vec<u8>, h: Hdr, payload: impl FnOnce(*mut libc::nlmsghdr)) {
        // SAFETY: the scratch buffer is aligned for nlmsghdr and larger than any message built
        // here; nftnl_nlmsg_build_hdr writes the 20-byte header into it.
        let nlh = unsafe { sys::nftnl_nlmsg_build_hdr(self.ptr(), h.msg_type, NFPROTO_INET, h.flags, h.seq) };
        payload(nlh);
        // SAFETY: nlh points at the header just written.
        let len = unsafe { (*nlh).nlmsg_len } as usize;
        out.extend_from_slice(self.bytes(super::wire::align4(len)));
    }
}

// ---------------------------------------------------------------- building

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
            sys::nftnl_chain_set_u32(chain.as_ptr(), sys::NFTNL_CHAIN_POLICY as u16, 1);
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
        sys::nftnl_set_set_u32(p, sys::NFTNL_SET_FAMILY as u16, NFPROTO_INET as u32);
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

// ---------------------------------------------------------------- parsing

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
        Some(ChainWire { name, hook })
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

// ---------------------------------------------------------------- socket

/// A netfilter netlink socket, bound in the network namespace of the thread that opened it.
pub(crate) struct Socket {
    inner: mnl::Socket,
}

// SAFETY: an mnl_socket is a heap struct holding a socket fd and its port id; libmnl keeps no
// thread-local state and the socket's network namespace is fixed when it is created, so moving
// it to another thread is sound. It is not `Sync`: only one thread uses it at a time.
unsafe impl Send for Socket {}

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;

impl Socket {
    pub(crate) fn open() -> io::Result<Socket> {
        let inner = mnl::Socket::new(mnl::Bus::Netfilter)?;
        let sock = Socket { inner };
        // Error replies without the echoed request (small, so many fit) but with the kernel's
        // explanation when it has one.
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)?;
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)?;
        Ok(sock)
    }

    fn setsockopt(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: the fd is open for the socket's lifetime; value is a plain int passed by
        // pointer with its size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Sizes the socket buffers: a whole batch must fit into the send buffer, or the kernel
    /// refuses it (EMSGSIZE). The `FORCE` variants need CAP_NET_ADMIN, which programming
    /// nftables needs anyway; without it the plain variants are tried.
    pub(crate) fn size_buffers(&self, send: usize, recv: usize) -> io::Result<()> {
        let clamp = |n: usize| libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
        self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, clamp(send))
            .or_else(|_| self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUF, clamp(send)))?;
        self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, clamp(recv))
            .or_else(|_| self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, clamp(recv)))
    }

    /// Sends the whole buffer with one system call: nfnetlink only commits a batch whose begin
    /// and end arrive in the same send.
    pub(crate) fn send(&self, buf: &[u8]) -> io::Result<()> {
        let sent = self.inner.send(buf)?;
        if sent != buf.len() {
            return Err(io::Error::other(format!("netlink send was cut short: {sent} of {} bytes", buf.len())));
        }
        Ok(())
    }

    /// Receives one datagram; `None` when nothing is queued and `wait` is false.
    pub(crate) fn recv(&self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        let flags = if wait { nix::sys::socket::MsgFlags::empty() } else { nix::sys::socket::MsgFlags::MSG_DONTWAIT };
        match nix::sys::socket::recv(self.fd(), buf, flags) {
            Ok(n) => Ok(Some(n)),
            Err(nix::errno::Errno::EAGAIN) => Ok(None),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    /// Receives one datagram as [`Socket::recv`] does, but returns its whole length
    /// (`MSG_TRUNC`): a length above `buf.len()` means the datagram was cut short to fit and
    /// its tail is gone.
    pub(crate) fn recv_whole(&self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        let mut flags = nix::sys::socket::MsgFlags::MSG_TRUNC;
        if !wait {
            flags |= nix::sys::socket::MsgFlags::MSG_DONTWAIT;
        }
        match nix::sys::socket::recv(self.fd(), buf, flags) {
            Ok(n) => Ok(Some(n)),
            Err(nix::errno::Errno::EAGAIN) => Ok(None),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    fn fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }

    /// A second descriptor of the same socket, for changing its group memberships from
    /// another thread while this one waits in `recv`.
    pub(crate) fn duplicate(&self) -> io::Result<std::os::fd::OwnedFd> {
        // SAFETY: the fd is open for as long as `self` lives, which outlasts this borrow.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) };
        borrowed.try_clone_to_owned()
    }
}

const NETLINK_ADD_MEMBERSHIP: libc::c_int = 1;
const NETLINK_DROP_MEMBERSHIP: libc::c_int = 2;

/// Joins or leaves a netlink multicast group on the socket behind `fd`.
pub(crate) fn set_membership(fd: std::os::fd::BorrowedFd<'_>, group: u32, join: bool) -> io::Result<()> {
    let name = if join { NETLINK_ADD_MEMBERSHIP } else { NETLINK_DROP_MEMBERSHIP };
    // SAFETY: `fd` is a borrowed, open socket; the value is a u32 passed by pointer with its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_NETLINK,
            name,
            (&group as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
