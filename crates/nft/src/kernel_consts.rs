//! Kernel constants verdict's rules use (linux/netfilter/nf_tables.h and friends), under
//! their C names: the numbers `lower` writes into expressions and `raise` and `observe` read
//! back. From `libc` where it has them; the few it lacks are typed here, with their header.
//! (This was the module `k` inside `low.rs`.)
#![allow(missing_docs)] // each is the C constant of the same name

pub const NFT_REG_VERDICT: u32 = libc::NFT_REG_VERDICT as u32;
pub const NFT_REG_1: u32 = libc::NFT_REG_1 as u32;
pub const NFT_REG32_00: u32 = libc::NFT_REG32_00 as u32;

pub const NFT_META_MARK: u32 = libc::NFT_META_MARK as u32;
pub const NFT_META_IIFNAME: u32 = libc::NFT_META_IIFNAME as u32;
pub const NFT_META_NFTRACE: u32 = libc::NFT_META_NFTRACE as u32;
pub const NFT_META_NFPROTO: u32 = libc::NFT_META_NFPROTO as u32;
pub const NFT_META_L4PROTO: u32 = libc::NFT_META_L4PROTO as u32;

pub const NFT_PAYLOAD_NETWORK_HEADER: u32 = libc::NFT_PAYLOAD_NETWORK_HEADER as u32;
pub const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = libc::NFT_PAYLOAD_TRANSPORT_HEADER as u32;

pub const NFT_CMP_EQ: u32 = libc::NFT_CMP_EQ as u32;
pub const NFT_CMP_NEQ: u32 = libc::NFT_CMP_NEQ as u32;

pub const NFT_CT_STATE: u32 = libc::NFT_CT_STATE as u32;
pub const NFT_CT_STATUS: u32 = libc::NFT_CT_STATUS as u32;

pub const NFT_NG_RANDOM: u32 = libc::NFT_NG_RANDOM as u32;

pub const NFT_NAT_DNAT: u32 = libc::NFT_NAT_DNAT as u32;
pub const NFPROTO_IPV4: u32 = libc::NFPROTO_IPV4 as u32;
pub const NFPROTO_IPV6: u32 = libc::NFPROTO_IPV6 as u32;
// linux/netfilter/nf_nat.h
pub const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;

// linux/netfilter/nf_tables.h (enum nft_fib_result, enum nft_fib_flags)
pub const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
pub const NFTA_FIB_F_SADDR: u32 = 1;
pub const NFTA_FIB_F_DADDR: u32 = 2;

pub const NFT_REJECT_ICMP_UNREACH: u32 = libc::NFT_REJECT_ICMP_UNREACH as u32;
pub const NFT_REJECT_ICMPX_UNREACH: u32 = libc::NFT_REJECT_ICMPX_UNREACH as u32;
// linux/icmp.h, linux/icmpv6.h
pub const ICMP_PORT_UNREACH: u8 = 3;
pub const ICMPV6_PORT_UNREACH: u8 = 4;
pub const NFT_REJECT_ICMPX_PORT_UNREACH: u8 = libc::NFT_REJECT_ICMPX_PORT_UNREACH as u8;

pub const NFT_DYNSET_OP_UPDATE: u32 = libc::NFT_DYNSET_OP_UPDATE as u32;

pub const NF_DROP: i32 = libc::NF_DROP;
pub const NF_ACCEPT: i32 = libc::NF_ACCEPT;
pub const NFT_JUMP: i32 = libc::NFT_JUMP;
pub const NFT_GOTO: i32 = libc::NFT_GOTO;
pub const NFT_RETURN: i32 = libc::NFT_RETURN;

/// The kernel's register numbering for a 32-bit slot: whole 128-bit registers keep their
/// old names (1..4), everything else is NFT_REG32_xx. The kernel dumps registers this way,
/// and nft sends them this way.
pub fn reg(slot: usize) -> u32 {
    if slot.is_multiple_of(4) { NFT_REG_1 + (slot / 4) as u32 } else { NFT_REG32_00 + slot as u32 }
}
