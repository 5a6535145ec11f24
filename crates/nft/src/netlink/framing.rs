//! Batch framing in safe Rust: the begin and end messages around a transaction, with the
//! generation id libnftnl cannot add.

use verdict_netlink::consts::{
    NFNL_BATCH_GENID, NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, NFNL_SUBSYS_NFTABLES, NFPROTO_UNSPEC, NLM_F_ACK,
};
use verdict_netlink::{NLMSG_HDRLEN, Writer};

/// Appends a batch marker: a netfilter message with no attribute but an optional generation id.
fn put_batch_marker(buf: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, genid: Option<u32>) {
    let mut w = Writer::nfnetlink(buf, kind, flags, seq, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES);
    if let Some(g) = genid {
        w.put_be32(NFNL_BATCH_GENID, g);
    }
    w.finish();
}

/// Batch begin, carrying the generation id the batch was computed against: the kernel refuses
/// it with ERESTART if anyone committed in between.
pub(crate) fn put_begin(buf: &mut Vec<u8>, seq: u32, genid: Option<u32>) {
    put_batch_marker(buf, NFNL_MSG_BATCH_BEGIN, 0, seq, genid);
}

/// Where the generation id sits in a batch that starts with [`put_begin`].
pub(crate) const GENID_AT: usize = NLMSG_HDRLEN + 8;

/// Sets the generation id of a batch that starts with [`put_begin`].
pub(crate) fn set_begin_genid(batch: &mut [u8], genid: u32) {
    batch[GENID_AT..GENID_AT + 4].copy_from_slice(&genid.to_be_bytes());
}

/// Batch end; the only message that asks for an acknowledgement.
pub(crate) fn put_end(buf: &mut Vec<u8>, seq: u32) {
    put_batch_marker(buf, NFNL_MSG_BATCH_END, NLM_F_ACK, seq, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_netlink::Messages;

    #[test]
    fn begin_carries_genid_in_network_order() {
        let mut b = Vec::new();
        put_begin(&mut b, 7, Some(0x01020304));
        assert_eq!(b.len(), 28);
        assert_eq!(&b[24..28], &[1, 2, 3, 4]);
        let msgs: Vec<_> = Messages::new(&b).map(Result::unwrap).collect();
        assert_eq!(msgs.len(), 1);
        assert_eq!((msgs[0].header.kind, msgs[0].header.seq), (0x10, 7));
        put_end(&mut b, 8);
        assert_eq!(&b[28..], &[20, 0, 0, 0, 0x11, 0, 5, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10]);
    }
}
