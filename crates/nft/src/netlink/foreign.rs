//! Tables verdict does not own: upstream kube-proxy's `ip`/`ip6 kube-proxy` tables, removed
//! when switching from it. One message, built in plain Rust.

use super::framing;
use super::{Netlink, NetlinkError};
use nix::errno::Errno;
use verdict_netlink::Writer;
use verdict_netlink::consts::*;

/// Address families of nftables tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TableFamily {
    /// `ip`.
    Ip,
    /// `ip6`.
    Ip6,
    /// `inet`.
    Inet,
}

impl TableFamily {
    pub(crate) fn number(self) -> u8 {
        match self {
            TableFamily::Inet => NFPROTO_INET,
            TableFamily::Ip => NFPROTO_IPV4,
            TableFamily::Ip6 => NFPROTO_IPV6,
        }
    }

    /// The family of an nfgenmsg header; `None` for families Service traffic does not pass
    /// through (arp, bridge, netdev).
    pub(crate) fn from_number(n: u8) -> Option<TableFamily> {
        [TableFamily::Inet, TableFamily::Ip, TableFamily::Ip6].into_iter().find(|f| f.number() == n)
    }

    /// nft's name for the family.
    pub fn name(self) -> &'static str {
        match self {
            TableFamily::Ip => "ip",
            TableFamily::Ip6 => "ip6",
            TableFamily::Inet => "inet",
        }
    }
}

/// Appends a DELTABLE message for `family name`.
fn put_deltable(buf: &mut Vec<u8>, seq: u32, family: TableFamily, name: &str) {
    let kind = nfnl_msg_type(NFNL_SUBSYS_NFTABLES, NFT_MSG_DELTABLE);
    let mut w = Writer::nfnetlink(buf, kind, NLM_F_ACK, seq, family.number(), 0);
    w.put_strz(NFTA_TABLE_NAME, name);
    w.finish();
}

impl Netlink {
    /// Deletes table `family name` with everything in it, in one transaction. Returns whether
    /// it existed.
    pub fn delete_foreign_table(&mut self, family: TableFamily, name: &str) -> Result<bool, NetlinkError> {
        let seq = self.next_seq(3);
        let mut buf = Vec::new();
        framing::put_begin(&mut buf, seq, None);
        put_deltable(&mut buf, seq + 1, family, name);
        framing::put_end(&mut buf, seq + 2);
        self.send_batch(&buf).map(|errors| {
            if let Some(errno) = errors.iter().map(|e| e.1).find(|e| *e != Errno::ENOENT as i32) {
                return Err(NetlinkError::Rejected {
                    index: 0,
                    op: format!("delete table {} {name}", family.name()),
                    errno: Errno::from_raw(errno),
                    detail: None,
                    others: 0,
                });
            }
            Ok(errors.is_empty())
        })?
    }
}

impl Netlink {
    /// The keys of set (or map) `set` in table `family table`, as the kernel holds them (each
    /// concatenation component padded to 4 bytes): how the other proxy's dispatch maps are
    /// read when verdict's table is handed back to kube-proxy. A table or set that does not
    /// exist has no keys.
    pub fn foreign_set_keys(
        &mut self,
        family: TableFamily,
        table: &str,
        set: &str,
    ) -> Result<Vec<Vec<u8>>, NetlinkError> {
        let seq = self.next_seq(1);
        let mut buf = Vec::new();
        let kind = nfnl_msg_type(NFNL_SUBSYS_NFTABLES, NFT_MSG_GETSETELEM);
        let mut w = Writer::nfnetlink(&mut buf, kind, NLM_F_DUMP, seq, family.number(), 0);
        w.put_strz(NFTA_SET_ELEM_LIST_TABLE, table);
        w.put_strz(NFTA_SET_ELEM_LIST_SET, set);
        w.finish();
        let replies = self.exchange(seq, &buf)?;
        Ok(replies.iter().flat_map(|msg| element_keys(super::firewalls::payload(msg))).collect())
    }
}

/// The keys of the elements of one element-list message's attributes.
fn element_keys(payload: &[u8]) -> Vec<Vec<u8>> {
    use super::firewalls::attrs;
    let mut keys = Vec::new();
    for (kind, list) in attrs(payload) {
        if kind != NFTA_SET_ELEM_LIST_ELEMENTS {
            continue;
        }
        for (_, elem) in attrs(list).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
            for (_, key) in attrs(elem).filter(|(k, _)| *k == NFTA_SET_ELEM_KEY) {
                keys.extend(attrs(key).filter(|(k, _)| *k == NFTA_DATA_VALUE).map(|(_, v)| v.to_vec()));
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltable_message_is_laid_out_like_nfts() {
        // `nft delete table ip kube-proxy` sends 76 bytes (strace): begin and end (20 each)
        // around a 36-byte DELTABLE laid out as below.
        let mut buf = Vec::new();
        put_deltable(&mut buf, 7, TableFamily::Ip, "kube-proxy");
        assert_eq!(buf.len(), 36);
        assert_eq!(&buf[0..4], &36u32.to_ne_bytes());
        assert_eq!(&buf[4..6], &0x0a02u16.to_ne_bytes());
        assert_eq!(&buf[16..20], &[2, 0, 0, 0]);
        assert_eq!(&buf[20..22], &15u16.to_ne_bytes());
        assert_eq!(&buf[24..35], b"kube-proxy\0");
    }
}
