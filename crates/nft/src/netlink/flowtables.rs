//! Flowtables on the wire: the messages that create one, join and remove its devices, delete
//! it, and the dump that reads them back. Built with the codec's writer: libnftnl's flowtable
//! object would need `unsafe` for what a dozen attributes do.

use super::sys::Hdr;
use super::{Netlink, NetlinkError};
use crate::ruleset::{Flowtable, Table};
use crate::transaction::{Op, Transaction};
use nix::errno::Errno;
use verdict_netlink::consts::*;
use verdict_netlink::{Attrs, Messages, Writer};

/// Appends a NEWFLOWTABLE (`devices` joined) or DELFLOWTABLE (`devices` removed, or the whole
/// flowtable when `devices` is `None`) message.
pub(super) fn put_flowtable(out: &mut Vec<u8>, h: Hdr, table: &str, ft: &Flowtable, devices: Option<&[String]>) {
    let kind = nfnl_msg_type(NFNL_SUBSYS_NFTABLES, h.msg_type);
    let mut m = Writer::nfnetlink(out, kind, h.flags, h.seq, NFPROTO_INET, 0);
    m.put_strz(NFTA_FLOWTABLE_TABLE, table);
    m.put_strz(NFTA_FLOWTABLE_NAME, &ft.name);
    let adding = h.msg_type == NFT_MSG_NEWFLOWTABLE;
    if adding || devices.is_some() {
        let hook = m.nest(NFTA_FLOWTABLE_HOOK);
        if adding {
            m.put_be32(NFTA_FLOWTABLE_HOOK_NUM, NF_NETDEV_INGRESS);
            m.put_be32(NFTA_FLOWTABLE_HOOK_PRIORITY, ft.priority as u32);
        }
        let devices = devices.unwrap_or_default();
        if !devices.is_empty() {
            let devs = m.nest(NFTA_FLOWTABLE_HOOK_DEVS);
            for d in devices {
                m.put_strz(NFTA_DEVICE_NAME, d);
            }
            m.end(devs);
        }
        m.end(hook);
    }
    m.finish();
}

/// A flowtable from one NEWFLOWTABLE message of a dump.
fn parse(msg: &[u8]) -> Option<Flowtable> {
    let msg = Messages::new(msg).next()?.ok()?;
    let (mut name, mut priority, mut devices) = (None, 0, std::collections::BTreeSet::new());
    for a in msg.attrs(4).map_while(Result::ok) {
        match a.ty {
            NFTA_FLOWTABLE_NAME => name = a.str().map(str::to_string),
            NFTA_FLOWTABLE_HOOK => {
                for h in a.nested().map_while(Result::ok) {
                    match h.ty {
                        NFTA_FLOWTABLE_HOOK_PRIORITY => priority = h.be32().ok()? as i32,
                        NFTA_FLOWTABLE_HOOK_DEVS => {
                            devices.extend(
                                Attrs::new(h.payload)
                                    .map_while(Result::ok)
                                    .filter(|d| d.ty == NFTA_DEVICE_NAME)
                                    .filter_map(|d| d.str().map(str::to_string)),
                            );
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(Flowtable { name: name?, priority, devices })
}

impl Netlink {
    /// Whether the kernel has software flowtables (`CONFIG_NF_FLOW_TABLE_INET`): one
    /// transaction creates a table with a flowtable and deletes it again, which leaves
    /// nothing behind. Without them the kernel refuses the flowtable with ENOENT (no such
    /// flowtable type) or EOPNOTSUPP.
    pub fn supports_flowtables(&mut self) -> Result<bool, NetlinkError> {
        let name = format!("verdict-probe-{}", std::process::id());
        let tx = Transaction {
            table: name.clone(),
            ops: vec![
                Op::AddTable(Table { name, comment: None }),
                Op::AddFlowtable(Flowtable::new("probe")),
                Op::DeleteTable,
            ],
        };
        match self.commit(&tx) {
            Ok(_) => Ok(true),
            Err(NetlinkError::Rejected { errno: Errno::ENOENT | Errno::EOPNOTSUPP, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The flowtables of table `table` (none when it does not exist).
    pub fn flowtables(&mut self, table: &str) -> Result<Vec<Flowtable>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut buf = Vec::new();
        let kind = nfnl_msg_type(NFNL_SUBSYS_NFTABLES, NFT_MSG_GETFLOWTABLE);
        let mut m = Writer::nfnetlink(&mut buf, kind, NLM_F_DUMP, seq, NFPROTO_INET, 0);
        m.put_strz(NFTA_FLOWTABLE_TABLE, table);
        m.finish();
        let mut out = Vec::new();
        for reply in self.exchange(seq, &buf)? {
            out.push(parse(&reply).ok_or_else(|| NetlinkError::Protocol("unparsable flowtable".into()))?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flowtable_message_reads_back_as_the_flowtable_it_carries() {
        let ft = Flowtable {
            name: "fastpath".into(),
            priority: -10,
            devices: ["br0".to_string(), "eth0".to_string()].into_iter().collect(),
        };
        let devices: Vec<String> = ft.devices.iter().cloned().collect();
        let mut buf = Vec::new();
        put_flowtable(
            &mut buf,
            Hdr { msg_type: NFT_MSG_NEWFLOWTABLE, flags: 0, seq: 7 },
            "kube-proxy",
            &ft,
            Some(&devices),
        );
        assert_eq!(parse(&buf), Some(ft));
    }
}
