//! The kernel's numbers, typed as they travel on the wire (`nlmsg_type` and `nla_type` are
//! u16, families u8). Values come from `libc` where it has them; what `libc` lacks is typed
//! here by hand, once, under the kernel header it comes from.

#![allow(missing_docs)] // each name is the kernel's own; its header documents it

// ---- linux/netlink.h (libc)
pub const NLMSG_NOOP: u16 = libc::NLMSG_NOOP as u16;
pub const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
pub const NLMSG_DONE: u16 = libc::NLMSG_DONE as u16;
pub const NLMSG_OVERRUN: u16 = libc::NLMSG_OVERRUN as u16;
pub const NLM_F_REQUEST: u16 = libc::NLM_F_REQUEST as u16;
pub const NLM_F_MULTI: u16 = libc::NLM_F_MULTI as u16;
pub const NLM_F_ACK: u16 = libc::NLM_F_ACK as u16;
pub const NLM_F_DUMP_INTR: u16 = libc::NLM_F_DUMP_INTR as u16;
pub const NLM_F_DUMP: u16 = libc::NLM_F_DUMP as u16;
pub const NLM_F_NONREC: u16 = libc::NLM_F_NONREC as u16;
pub const NLM_F_CREATE: u16 = libc::NLM_F_CREATE as u16;
pub const NLM_F_APPEND: u16 = libc::NLM_F_APPEND as u16;
pub const NLM_F_CAPPED: u16 = libc::NLM_F_CAPPED as u16;
pub const NLM_F_ACK_TLVS: u16 = libc::NLM_F_ACK_TLVS as u16;
pub const NLA_F_NESTED: u16 = libc::NLA_F_NESTED as u16;
pub const NLA_TYPE_MASK: u16 = libc::NLA_TYPE_MASK as u16;
pub use libc::{NETLINK_ADD_MEMBERSHIP, NETLINK_CAP_ACK, NETLINK_DROP_MEMBERSHIP, NETLINK_EXT_ACK, SOL_NETLINK};

// ---- linux/netlink.h, enum nlmsgerr_attrs (not in libc)
pub const NLMSGERR_ATTR_MSG: u16 = 1;

// ---- linux/socket.h, linux/netfilter.h (libc)
pub const AF_INET: u8 = libc::AF_INET as u8;
pub const AF_INET6: u8 = libc::AF_INET6 as u8;
pub const NFPROTO_UNSPEC: u8 = libc::NFPROTO_UNSPEC as u8;
pub const NFPROTO_INET: u8 = libc::NFPROTO_INET as u8;
pub const NFPROTO_IPV4: u8 = libc::NFPROTO_IPV4 as u8;
pub const NFPROTO_IPV6: u8 = libc::NFPROTO_IPV6 as u8;

// ---- linux/netfilter/nfnetlink.h (libc)
pub const NFNETLINK_V0: u8 = libc::NFNETLINK_V0 as u8;
pub const NFNL_SUBSYS_CTNETLINK: u16 = libc::NFNL_SUBSYS_CTNETLINK as u16;
pub const NFNL_SUBSYS_NFTABLES: u16 = libc::NFNL_SUBSYS_NFTABLES as u16;
pub const NFNL_MSG_BATCH_BEGIN: u16 = libc::NFNL_MSG_BATCH_BEGIN as u16;
pub const NFNL_MSG_BATCH_END: u16 = libc::NFNL_MSG_BATCH_END as u16;
pub const NFNL_BATCH_GENID: u16 = libc::NFNL_BATCH_GENID as u16;
pub const NFNLGRP_NFTABLES: u32 = libc::NFNLGRP_NFTABLES as u32;
pub const NFNLGRP_NFTRACE: u32 = libc::NFNLGRP_NFTRACE as u32;

/// The `nlmsg_type` of message `msg` of nfnetlink subsystem `subsys`.
pub const fn nfnl_msg_type(subsys: u16, msg: u16) -> u16 {
    (subsys << 8) | msg
}

// ---- linux/netfilter/nf_tables.h, enum nf_tables_msg_types (libc)
pub const NFT_MSG_NEWTABLE: u16 = libc::NFT_MSG_NEWTABLE as u16;
pub const NFT_MSG_GETTABLE: u16 = libc::NFT_MSG_GETTABLE as u16;
pub const NFT_MSG_DELTABLE: u16 = libc::NFT_MSG_DELTABLE as u16;
pub const NFT_MSG_NEWCHAIN: u16 = libc::NFT_MSG_NEWCHAIN as u16;
pub const NFT_MSG_GETCHAIN: u16 = libc::NFT_MSG_GETCHAIN as u16;
pub const NFT_MSG_DELCHAIN: u16 = libc::NFT_MSG_DELCHAIN as u16;
pub const NFT_MSG_NEWRULE: u16 = libc::NFT_MSG_NEWRULE as u16;
pub const NFT_MSG_GETRULE: u16 = libc::NFT_MSG_GETRULE as u16;
pub const NFT_MSG_DELRULE: u16 = libc::NFT_MSG_DELRULE as u16;
pub const NFT_MSG_NEWSET: u16 = libc::NFT_MSG_NEWSET as u16;
pub const NFT_MSG_GETSET: u16 = libc::NFT_MSG_GETSET as u16;
pub const NFT_MSG_DELSET: u16 = libc::NFT_MSG_DELSET as u16;
pub const NFT_MSG_NEWSETELEM: u16 = libc::NFT_MSG_NEWSETELEM as u16;
pub const NFT_MSG_GETSETELEM: u16 = libc::NFT_MSG_GETSETELEM as u16;
pub const NFT_MSG_DELSETELEM: u16 = libc::NFT_MSG_DELSETELEM as u16;
pub const NFT_MSG_NEWGEN: u16 = libc::NFT_MSG_NEWGEN as u16;
pub const NFT_MSG_GETGEN: u16 = libc::NFT_MSG_GETGEN as u16;
pub const NFT_MSG_TRACE: u16 = libc::NFT_MSG_TRACE as u16;

// ---- linux/netfilter/nf_tables.h, attribute enums (not in libc)
pub const NFTA_LIST_ELEM: u16 = 1;
pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_CHAIN_POLICY: u16 = 5;
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
pub const NFTA_HOOK_PRIORITY: u16 = 2;
pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;
pub const NFTA_IMMEDIATE_DATA: u16 = 2;
pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;
pub const NFTA_VERDICT_CODE: u16 = 1;
pub const NFTA_VERDICT_CHAIN: u16 = 2;
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_SET_ELEM_DATA: u16 = 2;
pub const NFTA_SET_ELEM_USERDATA: u16 = 6;
pub const NFTA_TRACE_TABLE: u16 = 1;
pub const NFTA_TRACE_CHAIN: u16 = 2;
pub const NFTA_TRACE_RULE_HANDLE: u16 = 3;
pub const NFTA_TRACE_TYPE: u16 = 4;
pub const NFTA_TRACE_VERDICT: u16 = 5;
pub const NFTA_TRACE_ID: u16 = 6;
pub const NFTA_TRACE_NETWORK_HEADER: u16 = 8;
pub const NFTA_TRACE_TRANSPORT_HEADER: u16 = 9;
pub const NFTA_TRACE_IIF: u16 = 10;
pub const NFTA_TRACE_OIF: u16 = 12;
pub const NFTA_TRACE_MARK: u16 = 14;
pub const NFTA_TRACE_NFPROTO: u16 = 15;
pub const NFTA_TRACE_POLICY: u16 = 16;

// ---- linux/netfilter/nf_tables.h, flowtables (not in libc)
pub const NFT_MSG_NEWFLOWTABLE: u16 = 22;
pub const NFT_MSG_GETFLOWTABLE: u16 = 23;
pub const NFT_MSG_DELFLOWTABLE: u16 = 24;
pub const NFTA_FLOWTABLE_TABLE: u16 = 1;
pub const NFTA_FLOWTABLE_NAME: u16 = 2;
pub const NFTA_FLOWTABLE_HOOK: u16 = 3;
pub const NFTA_FLOWTABLE_HOOK_NUM: u16 = 1;
pub const NFTA_FLOWTABLE_HOOK_PRIORITY: u16 = 2;
pub const NFTA_FLOWTABLE_HOOK_DEVS: u16 = 3;
pub const NFTA_DEVICE_NAME: u16 = 1;
/// `NF_NETDEV_INGRESS`, linux/netfilter.h: the only hook a flowtable has.
pub const NF_NETDEV_INGRESS: u32 = 0;

// ---- linux/netfilter/nfnetlink_conntrack.h (not in libc)
pub const IPCTNL_MSG_CT_NEW: u16 = 0;
pub const IPCTNL_MSG_CT_GET: u16 = 1;
pub const IPCTNL_MSG_CT_DELETE: u16 = 2;
pub const CTA_TUPLE_ORIG: u16 = 1;
pub const CTA_TUPLE_REPLY: u16 = 2;
pub const CTA_ZONE: u16 = 18;
pub const CTA_FILTER: u16 = 25;
pub const CTA_TUPLE_IP: u16 = 1;
pub const CTA_TUPLE_PROTO: u16 = 2;
pub const CTA_IP_V4_SRC: u16 = 1;
pub const CTA_IP_V4_DST: u16 = 2;
pub const CTA_IP_V6_SRC: u16 = 3;
pub const CTA_IP_V6_DST: u16 = 4;
pub const CTA_PROTO_NUM: u16 = 1;
pub const CTA_PROTO_SRC_PORT: u16 = 2;
pub const CTA_PROTO_DST_PORT: u16 = 3;
pub const CTA_FILTER_ORIG_FLAGS: u16 = 1;
pub const CTA_FILTER_REPLY_FLAGS: u16 = 2;
/// `CTA_FILTER_FLAG(CTA_PROTO_NUM)`, from `net/netfilter/nf_internals.h` (not uapi).
pub const CTA_FILTER_F_CTA_PROTO_NUM: u32 = 1 << 3;

// ---- linux/rtnetlink.h, linux/if_link.h, linux/genetlink.h (libc)
pub const RTM_DELLINK: u16 = libc::RTM_DELLINK;
pub const RTM_GETLINK: u16 = libc::RTM_GETLINK;
pub const IFLA_IFNAME: u16 = libc::IFLA_IFNAME;
pub const GENL_ID_CTRL: u16 = libc::GENL_ID_CTRL as u16;
pub const CTRL_CMD_GETFAMILY: u8 = libc::CTRL_CMD_GETFAMILY as u8;
pub const CTRL_ATTR_FAMILY_ID: u16 = libc::CTRL_ATTR_FAMILY_ID as u16;
pub const CTRL_ATTR_FAMILY_NAME: u16 = libc::CTRL_ATTR_FAMILY_NAME as u16;

// ---- linux/ip_vs.h (not in libc)
pub const IPVS_GENL_VERSION: u8 = 1;
pub const IPVS_CMD_GET_SERVICE: u8 = 4;
pub const IPVS_CMD_FLUSH: u8 = 17;
pub const IPVS_CMD_ATTR_SERVICE: u16 = 1;
pub const IPVS_SVC_ATTR_AF: u16 = 1;
pub const IPVS_SVC_ATTR_PROTOCOL: u16 = 2;
pub const IPVS_SVC_ATTR_ADDR: u16 = 3;
pub const IPVS_SVC_ATTR_PORT: u16 = 4;
