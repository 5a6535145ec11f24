//! Another proxy programming Services on this node while verdict runs: upstream kube-proxy
//! brought back by `kubeadm upgrade apply` (which re-applies its addon) or by a rollback that
//! forgot to stop verdict. Both then answer for the same Service addresses, and which one a
//! packet meets depends on hook priorities: Services half work, and nothing says why.
//!
//! Looked for with the firewalls (see [`crate::firewalls`]): at the first sync, after the
//! leftovers of a previous kube-proxy are removed, and whenever the table monitor reports
//! that another program added or deleted a table, chain or rule (a netlink notice, so an
//! appearance is seen within moments rather than at the next periodic sync). Each appearance
//! is reported once as a problem of the Node (a warning line and a Warning Event
//! `ForeignProxy`) and as `verdict_foreign_proxy_detected{what}` (1 while present).
//!
//! What counts: kube-proxy's nftables mode tables (`ip kube-proxy`, `ip6 kube-proxy`), and its
//! iptables and ipvs modes' `KUBE-SERVICES` chain as the iptables nft back end writes it (a
//! chain of `ip`/`ip6` tables `nat` or `filter`). Legacy iptables (`iptables-legacy`) lives
//! outside nftables and cannot be seen through its netlink interface.

use crate::metrics as m;
use verdict_model::{ObjectKind, ObjectRef, Problem};
use verdict_nft::Kernel;
use verdict_nft::netlink::TableFamily;
use verdict_nft::netlink::tables::NamedObject;

/// The problem reason.
pub const REASON: &str = "ForeignProxy";

/// Every `what` reported, in the order they are looked for: the metric's label values, which
/// `crate::metrics` registers (it owns them, so it need not import this file).
pub const WHATS: [&str; 4] = m::FOREIGN_PROXY_WHATS;

/// What each of [`WHATS`] is: a table of a family (with `chain: None`), or a chain of one
/// of some tables.
const SIGNS: [(TableFamily, &[&str], Option<&str>); 4] = [
    (TableFamily::Ip, &["kube-proxy"], None),
    (TableFamily::Ip6, &["kube-proxy"], None),
    (TableFamily::Ip, &["nat", "filter"], Some("KUBE-SERVICES")),
    (TableFamily::Ip6, &["nat", "filter"], Some("KUBE-SERVICES")),
];

/// Which of [`WHATS`] the tables and chains show.
pub fn found(objects: &[NamedObject]) -> Vec<&'static str> {
    let shows = |(family, tables, chain): &(TableFamily, &[&str], Option<&str>)| {
        objects
            .iter()
            .any(|o| o.family == *family && tables.contains(&o.table.as_str()) && o.chain.as_deref() == *chain)
    };
    WHATS.iter().zip(&SIGNS).filter(|(_, sign)| shows(sign)).map(|(what, _)| *what).collect()
}

fn message(what: &str) -> String {
    format!(
        "another proxy programs Services on this node ({what}): remove it, or stop verdict. \
         Upgrading with kubeadm re-applies kube-proxy unless run as `kubeadm upgrade apply \
         --skip-phases=addon/kube-proxy`; rolling back to kube-proxy means stopping verdict and \
         running `verdict cleanup` (docs/operations.md, \"Two proxies on one node\")"
    )
}

/// The other proxies found, as problems of Node `node`, with the gauge set. When the kernel
/// cannot be read, the problems of `previous` of this kind are kept (a failed look is not a
/// proxy gone).
pub fn problems(nl: &mut impl Kernel, node: &str, previous: &[Problem]) -> Vec<Problem> {
    let objects = match nl.tables_and_chains() {
        Ok(objects) => objects,
        Err(e) => {
            tracing::warn!("could not look for another proxy's tables: {e}");
            return previous.iter().filter(|p| p.reason == REASON).cloned().collect();
        }
    };
    let found = found(&objects);
    for what in WHATS {
        metrics::gauge!(m::FOREIGN_PROXY, "what" => what).set(if found.contains(&what) { 1.0 } else { 0.0 });
    }
    let object = ObjectRef::new(ObjectKind::Node, "", node);
    found.iter().map(|what| Problem::new(object.clone(), REASON, message(what))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(family: TableFamily, table: &str, chain: Option<&str>) -> NamedObject {
        NamedObject { family, table: table.into(), chain: chain.map(str::to_string) }
    }

    #[test]
    fn finds_upstreams_tables_and_chains_and_nothing_else() {
        let objects = [
            object(TableFamily::Inet, "kube-proxy", None),
            object(TableFamily::Inet, "kube-proxy", Some("services")),
            object(TableFamily::Ip, "filter", Some("KUBE-FIREWALL")),
            object(TableFamily::Ip6, "mangle", Some("KUBE-SERVICES")),
        ];
        assert!(found(&objects).is_empty(), "verdict's own table and kubelet's chains are not another proxy");
        let objects = [
            object(TableFamily::Ip6, "kube-proxy", None),
            object(TableFamily::Ip, "nat", Some("KUBE-SERVICES")),
            object(TableFamily::Ip, "filter", Some("KUBE-SERVICES")),
        ];
        assert_eq!(found(&objects), vec!["nftables ip6 kube-proxy", "iptables KUBE-SERVICES"]);
    }
}
