//! Tables verdict does not own: upstream kube-proxy's `ip`/`ip6 kube-proxy` tables, removed
//! when switching from it. One message, built in plain Rust.

use super::wire::{self, NLM_F_ACK, NLM_F_REQUEST, NLMSG_HDRLEN};
use super::{Netlink, NetlinkError};
use nix::errno::Errno;

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
            TableFamily::Inet => 1,
            TableFamily::Ip => 2,
            TableFamily::Ip6 => 10,
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

const NFT_MSG_DELTABLE: u16 = 2;
const NFTA_TABLE_NAME: u16 = 1;
const NFNL_SUBSYS_NFTABLES: u16 = 10;

/// Appends a DELTABLE message for `family name`.
fn put_deltable(buf: &mut Vec<u8>, seq: u32, family: TableFamily, name: &str) {
    let attr_len = 4 + name.len() + 1;
    let len = NLMSG_HDRLEN + 4 + wire::align4(attr_len);
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    buf.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE).to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&[family.number(), 0, 0, 0]);
    buf.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    buf.extend_from_slice(&NFTA_TABLE_NAME.to_ne_bytes());
    buf.extend_from_slice(name.as_bytes());
    buf.resize(buf.len() + wire::align4(attr_len) - attr_len + 1, 0);
}

impl Netlink {
    /// Deletes table `family name` with everything in it, in one transaction. Returns whether
    /// it existed.
    pub fn delete_foreign_table(&mut self, family: TableFamily, name: &str) -> Result<bool, NetlinkError> {
        let seq = self.next_seq(3);
        let mut buf = Vec::new();
        wire::put_begin(&mut buf, seq, None);
        put_deltable(&mut buf, seq + 1, family, name);
        wire::put_end(&mut buf, seq + 2);
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
