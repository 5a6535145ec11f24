//! The glue between verdict's wire structs and libnftnl, and the socket: the only code in
//! verdict that uses `unsafe` (this folder alone allows it). Every object handed to libnftnl
//! is owned by an RAII wrapper here and never escapes; callers see plain Rust data
//! ([`ChainWire`], [`SetWire`], [`ElemWire`], ...).
//!
//! Messages are built ([`build`]) into a private, aligned scratch buffer that is always larger
//! than the biggest message we build (elements are chunked by the caller, see
//! `ELEMENT_BUDGET`), then copied into the batch; replies are copied into it to be parsed
//! ([`parse`]). [`socket`] is the netfilter netlink socket.
#![allow(unsafe_code)]

mod build;
mod parse;
mod socket;

pub(crate) use build::{put_chain, put_dump_request, put_elems, put_rule, put_set, put_table};
pub(crate) use parse::{parse_chain, parse_elems, parse_genid, parse_rule, parse_set, parse_table};
pub(crate) use socket::{Socket, set_membership};

use crate::kernel_expr::LowExpr;
use nftnl::nftnl_sys as sys;
use nftnl::nftnl_sys::libc;
use std::ffi::{CString, c_char};
use std::ptr::NonNull;
use verdict_netlink::consts::NFPROTO_INET;

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
    /// A base chain's policy (NF_ACCEPT, NF_DROP); written as NF_ACCEPT when `None`.
    pub policy: Option<u32>,
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
pub(super) trait NftObject {
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
pub(super) struct Owned<T: NftObject> {
    ptr: NonNull<T>,
}

impl<T: NftObject> Owned<T> {
    pub(super) fn new(ptr: *mut T) -> Owned<T> {
        // libnftnl allocators only fail when out of memory.
        let ptr = NonNull::new(ptr).expect("libnftnl allocation failed (out of memory)");
        Owned { ptr }
    }

    pub(super) fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    /// Gives up ownership (the object now belongs to a container that frees it).
    pub(super) fn into_raw(self) -> *mut T {
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

pub(super) fn cstring(s: &str) -> CString {
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

    /// Whether a message of `len` bytes fits (a larger one would panic [`Scratch::load`]).
    pub(crate) fn holds(&self, len: usize) -> bool {
        len <= self.0.len() * 8
    }

    pub(super) fn load(&mut self, msg: &[u8]) -> *const libc::nlmsghdr {
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
    pub(super) fn build(&mut self, out: &mut Vec<u8>, h: Hdr, payload: impl FnOnce(*mut libc::nlmsghdr)) {
        // SAFETY: the scratch buffer is aligned for nlmsghdr and larger than any message built
        // here; nftnl_nlmsg_build_hdr writes the 20-byte header into it.
        let nlh =
            unsafe { sys::nftnl_nlmsg_build_hdr(self.ptr(), h.msg_type, u16::from(NFPROTO_INET), h.flags, h.seq) };
        payload(nlh);
        // SAFETY: nlh points at the header just written.
        let len = unsafe { (*nlh).nlmsg_len } as usize;
        out.extend_from_slice(self.bytes(verdict_netlink::align(len)));
    }
}
