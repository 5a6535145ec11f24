//! The names of every table and chain (ip, ip6 and inet families), for looking for another
//! proxy's (see `verdict_controller::foreign_proxy`). Read with the dumps of
//! [`super::firewalls`]; nothing here writes.

use super::firewalls::{FAMILY_ANY, attrs, payload, text};
use super::foreign::TableFamily;
use super::{Netlink, NetlinkError};
use verdict_netlink::NLMSG_HDRLEN;
use verdict_netlink::consts::{NFT_MSG_GETCHAIN, NFT_MSG_GETTABLE, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE};

/// The table's name is attribute 1 of table messages, as of chain messages.
const NFTA_TABLE: u16 = NFTA_CHAIN_TABLE;

/// A table, or a chain of one, by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamedObject {
    /// The table's family.
    pub family: TableFamily,
    /// The table.
    pub table: String,
    /// The chain (`None` for the table itself).
    pub chain: Option<String>,
}

impl Netlink {
    /// Every table and every chain of the ip, ip6 and inet families, sorted.
    pub fn tables_and_chains(&mut self) -> Result<Vec<NamedObject>, NetlinkError> {
        let mut found = Vec::new();
        for (msg_type, chain_attr) in [(NFT_MSG_GETTABLE, None), (NFT_MSG_GETCHAIN, Some(NFTA_CHAIN_NAME))] {
            for msg in self.dump_all(msg_type, FAMILY_ANY, None)? {
                if let Some(object) = parse(&msg, chain_attr) {
                    found.push(object);
                }
            }
        }
        found.sort();
        Ok(found)
    }
}

fn parse(msg: &[u8], chain_attr: Option<u16>) -> Option<NamedObject> {
    let family = TableFamily::from_number(*msg.get(NLMSG_HDRLEN)?)?;
    let (mut table, mut chain) = (None, None);
    for (kind, value) in attrs(payload(msg)) {
        if kind == NFTA_TABLE {
            table = text(value);
        } else if Some(kind) == chain_attr {
            chain = text(value);
        }
    }
    if chain_attr.is_some() && chain.is_none() {
        return None;
    }
    Some(NamedObject { family, table: table?, chain })
}
