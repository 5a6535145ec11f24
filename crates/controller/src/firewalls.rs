//! Default-drop firewalls in other tables (see [`verdict_nft::netlink::firewalls`]): looked for
//! at start and whenever another program changes a table, and reported as problems of this
//! node's Node (a log line, the `verdict_problems{reason="DropInOtherTable"}` gauge and a
//! Warning Event), once per change.

use verdict_model::{ObjectKind, ObjectRef, Problem};
use verdict_nft::Kernel;
use verdict_nft::netlink::NetlinkError;
use verdict_nft::netlink::firewalls::{DroppingChain, Hook};

/// The problem reason of a dropping chain.
pub const REASON: &str = "DropInOtherTable";

/// Whether a problem reason is about the node's other programs (a firewall here, another
/// proxy in [`crate::foreign_proxy`]) rather than about input verdict left out.
pub fn about_the_node(reason: &str) -> bool {
    reason == REASON || reason == crate::foreign_proxy::REASON
}

/// The dropping chains of other tables, as problems of Node `node`.
pub fn problems(nl: &mut impl Kernel, own_table: &str, node: &str) -> Result<Vec<Problem>, NetlinkError> {
    let object = ObjectRef::new(ObjectKind::Node, "", node);
    Ok(nl.dropping_chains(own_table)?.iter().map(|c| Problem::new(object.clone(), REASON, message(c))).collect())
}

fn message(c: &DroppingChain) -> String {
    let traffic = match c.hook {
        Hook::Forward => "Service traffic to pods",
        Hook::Input => "Service traffic to host-network endpoints",
        Hook::Output => "Service traffic from the node itself",
        Hook::Prerouting | Hook::Postrouting => "all Service traffic",
    };
    format!(
        "{c}: it drops {traffic} that verdict accepted, unless it accepts that traffic itself \
         (docs/operations.md, \"Firewalls in other tables\")"
    )
}
