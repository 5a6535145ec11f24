//! Numbers from `linux/netlink.h`, `linux/netfilter/nfnetlink.h` and
//! `linux/netfilter/nfnetlink_conntrack.h`.

// Netlink message header.
/// Size of `struct nlmsghdr`.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// Size of `struct nfgenmsg`.
pub(crate) const NFGENMSG_LEN: usize = 4;
/// Size of the attribute header (`struct nlattr`).
pub(crate) const NLA_HDRLEN: usize = 4;

pub(crate) const NLMSG_NOOP: u16 = 1;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLMSG_OVERRUN: u16 = 4;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_ROOT | NLM_F_MATCH`.
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// A dump was interrupted by a concurrent change (not used by ctnetlink today).
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;

pub(crate) const NLA_F_NESTED: u16 = 0x8000;
pub(crate) const NLA_F_NET_BYTEORDER: u16 = 0x4000;
pub(crate) const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

// nfnetlink.
pub(crate) const NFNETLINK_V0: u8 = 0;
pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;

// Message types of the ctnetlink subsystem.
pub(crate) const IPCTNL_MSG_CT_NEW: u16 = 0;
pub(crate) const IPCTNL_MSG_CT_GET: u16 = 1;
pub(crate) const IPCTNL_MSG_CT_DELETE: u16 = 2;

/// `nlmsg_type` of a ctnetlink message.
pub(crate) const fn ct_msg_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_CTNETLINK << 8) | msg
}

// enum ctattr_type.
pub(crate) const CTA_TUPLE_ORIG: u16 = 1;
pub(crate) const CTA_TUPLE_REPLY: u16 = 2;
pub(crate) const CTA_ZONE: u16 = 18;
pub(crate) const CTA_FILTER: u16 = 25;

// enum ctattr_tuple.
pub(crate) const CTA_TUPLE_IP: u16 = 1;
pub(crate) const CTA_TUPLE_PROTO: u16 = 2;

// enum ctattr_ip.
pub(crate) const CTA_IP_V4_SRC: u16 = 1;
pub(crate) const CTA_IP_V4_DST: u16 = 2;
pub(crate) const CTA_IP_V6_SRC: u16 = 3;
pub(crate) const CTA_IP_V6_DST: u16 = 4;

// enum ctattr_l4proto.
pub(crate) const CTA_PROTO_NUM: u16 = 1;
pub(crate) const CTA_PROTO_SRC_PORT: u16 = 2;
pub(crate) const CTA_PROTO_DST_PORT: u16 = 3;

// enum ctattr_filter (kernel 5.8+): which fields of CTA_TUPLE_ORIG/REPLY a dump filters on.
pub(crate) const CTA_FILTER_ORIG_FLAGS: u16 = 1;
pub(crate) const CTA_FILTER_REPLY_FLAGS: u16 = 2;
/// `CTA_FILTER_FLAG(CTA_PROTO_NUM)` from `net/netfilter/nf_internals.h`.
pub(crate) const CTA_FILTER_F_CTA_PROTO_NUM: u32 = 1 << 3;

// Address families.
pub(crate) const AF_INET: u8 = 2;
pub(crate) const AF_INET6: u8 = 10;
