//! One cleanup pass over both families.

use crate::entry::Family;
use crate::error::ConntrackError;
use crate::socket::Conntrack;
use crate::stale::{UdpTarget, stale_entries};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// What one [`reconcile`] pass did, for the caller's `kubeproxy_conntrack_reconciler_*` metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Entries the kernel deleted (entries that vanished in the meantime are not counted).
    pub deleted: usize,
    /// UDP entries listed and checked.
    pub examined: usize,
    /// Wall-clock time of the pass.
    pub duration: Duration,
    /// Of `deleted`, those of each family, in the order of [`Family::ALL`] (for the
    /// `ip_family` label upstream's per-family reconcilers give their metrics).
    pub deleted_by_family: [usize; 2],
    /// Of `duration`, the time spent on each family, in the order of [`Family::ALL`] (zero
    /// for a family not listed).
    pub duration_by_family: [Duration; 2],
}

/// Lists the UDP entries of each family and deletes the stale ones ([`stale_entries`]).
///
/// A family is not listed at all when no target could match an entry of it (no Service
/// address of that family: a NodePort is matched only in its Service's families), so a single-stack node never dumps the other family's table and an empty
/// `targets` costs nothing. The first error stops the pass; entries already deleted stay
/// deleted.
pub fn reconcile(
    ct: &mut Conntrack,
    targets: &[UdpTarget],
    node_addresses: &[IpAddr],
) -> Result<Report, ConntrackError> {
    let start = Instant::now();
    let mut report = Report::default();
    for (i, family) in Family::ALL.into_iter().enumerate() {
        if !relevant(family, targets) {
            continue;
        }
        let family_start = Instant::now();
        let entries = ct.udp_entries(family)?;
        report.examined += entries.len();
        let stale = stale_entries(&entries, targets, node_addresses);
        if !stale.is_empty() {
            let deleted = ct.delete_all(stale.into_iter())?;
            report.deleted += deleted;
            report.deleted_by_family[i] = deleted;
        }
        report.duration_by_family[i] = family_start.elapsed();
    }
    report.duration = start.elapsed();
    Ok(report)
}

/// Whether an entry of this family could be stale for one of the targets.
fn relevant(family: Family, targets: &[UdpTarget]) -> bool {
    // A NodePort is matched only in the families of the target's addresses, so a target
    // without an address of this family matches nothing of it.
    let of_family = |a: &IpAddr| Family::of(&a.to_canonical()) == family;
    targets.iter().any(|t| t.addresses.iter().any(of_family))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(addresses: &[&str], node_port: Option<u16>, serving: &[&str]) -> UdpTarget {
        UdpTarget {
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            port: 53,
            node_port,
            serving_endpoints: serving.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn only_families_with_a_possible_match_are_listed() {
        let v4 = [target(&["10.96.0.10"], None, &["10.244.0.5"])];
        assert!(relevant(Family::V4, &v4));
        assert!(!relevant(Family::V6, &v4));

        let v6 = [target(&["fd00:96::10"], None, &["fd00:244::5"])];
        assert!(!relevant(Family::V4, &v6));
        assert!(relevant(Family::V6, &v6));

        // A NodePort is matched only in its Service's families: an IPv4-only Service's does
        // not make IPv6 relevant, whatever the node's addresses.
        let np = [target(&["10.96.0.10"], Some(30053), &["10.244.0.5"])];
        assert!(!relevant(Family::V6, &np));
        assert!(relevant(Family::V4, &np));
        let np6 = [target(&["10.96.0.10", "fd00:96::10"], Some(30053), &["10.244.0.5"])];
        assert!(relevant(Family::V6, &np6));

        // Targets without serving endpoints select every flow to them, so they are listed too.
        let none = [target(&["10.96.0.10"], None, &[])];
        assert!(relevant(Family::V4, &none));
        assert!(!relevant(Family::V6, &none));
        assert!(!relevant(Family::V4, &[]));
    }
}
