//! kube-proxy's ipvs-mode leftovers besides its iptables chains: the IPVS virtual servers, the
//! `kube-ipvs0` link that holds the service addresses, and its ipsets.

use super::netlink::{self, RequestError, Socket};
use super::{LeftoverReport, find_program, run};
use nix::errno::Errno;

/// The link kube-proxy's ipvs mode binds service addresses to.
pub(crate) const IPVS_LINK: &str = "kube-ipvs0";

/// Deletes the `kube-ipvs0` link, if there is one.
pub(crate) fn delete_ipvs_link(report: &mut LeftoverReport) {
    let what = format!("link {IPVS_LINK}");
    let result = Socket::open(mnl::Bus::Route).map_err(RequestError::Io).and_then(|mut sock| {
        let seq = sock.next_seq();
        sock.request(&netlink::del_link_by_name(seq, IPVS_LINK), seq)
    });
    match result {
        Ok(_) => report.removed(what),
        Err(RequestError::Kernel(Errno::ENODEV)) => tracing::debug!("no {IPVS_LINK} link"),
        Err(e) => report.failed(format!("{what}: {e}")),
    }
}

/// Flushes the IPVS virtual servers, when the `ip_vs` module is loaded (its generic-netlink
/// family exists) and there are some. Unlike upstream, the module is never loaded for this.
pub(crate) fn flush_virtual_servers(report: &mut LeftoverReport) {
    match flush_ipvs() {
        Ok(None) => tracing::debug!("IPVS is not loaded: no virtual servers"),
        Ok(Some(0)) => tracing::debug!("no IPVS virtual servers"),
        Ok(Some(n)) => report.removed(format!("ipvs virtual servers ({n})")),
        Err(e) => report.failed(format!("ipvs virtual servers: {e}")),
    }
}

/// `None` when IPVS is absent, else how many virtual servers were flushed.
fn flush_ipvs() -> Result<Option<usize>, RequestError> {
    let mut sock = Socket::open(mnl::Bus::Generic)?;
    let seq = sock.next_seq();
    let family = match sock.request(&netlink::get_family(seq, netlink::IPVS_FAMILY), seq) {
        Ok(replies) => {
            replies.iter().find_map(|r| netlink::family_id(r)).ok_or(RequestError::Kernel(Errno::EBADMSG))?
        }
        Err(RequestError::Kernel(Errno::ENOENT)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let seq = sock.next_seq();
    let services = sock.request(&netlink::ipvs_dump_services(seq, family), seq)?.len();
    if services > 0 {
        let seq = sock.next_seq();
        sock.request(&netlink::ipvs_flush(seq, family), seq)?;
    }
    Ok(Some(services))
}

/// The ipsets kube-proxy's ipvs mode creates (current and older releases), IPv4 names.
const IPSETS: &[&str] = &[
    "KUBE-LOOP-BACK",
    "KUBE-CLUSTER-IP",
    "KUBE-EXTERNAL-IP",
    "KUBE-EXTERNAL-IP-LOCAL",
    "KUBE-LOAD-BALANCER",
    "KUBE-LOAD-BALANCER-FW",
    "KUBE-LOAD-BALANCER-LOCAL",
    "KUBE-LOAD-BALANCER-SOURCE-IP",
    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
    "KUBE-LOAD-BALANCER-MASQ",
    "KUBE-NODE-PORT-TCP",
    "KUBE-NODE-PORT-LOCAL-TCP",
    "KUBE-NODE-PORT-UDP",
    "KUBE-NODE-PORT-LOCAL-UDP",
    "KUBE-NODE-PORT-SCTP-HASH",
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
    "KUBE-HEALTH-CHECK-NODE-PORT",
    "KUBE-IPVS-IPS",
    "KUBE-MASQ-ALL",
    "KUBE-CLUSTER-CIDR",
    "KUBE-SERVICE-ACCESS",
];

/// kube-proxy's ipset names, IPv4 and IPv6: the IPv6 set of `KUBE-X` is `KUBE-6-X`, cut to
/// ipset's 31 characters, as kube-proxy names them. Other programs' `KUBE-` sets (kube-router's
/// `KUBE-SRC-`/`KUBE-DST-`, for one) are not in this list.
pub(crate) fn kube_proxy_ipsets() -> Vec<String> {
    let v6 = IPSETS.iter().map(|name| {
        let mut v6 = name.replacen("KUBE-", "KUBE-6-", 1);
        v6.truncate(31);
        v6
    });
    IPSETS.iter().map(|s| s.to_string()).chain(v6).collect()
}

/// The sets of `ipset list -n` output that are kube-proxy's, in listing order.
pub(crate) fn ipsets_to_destroy(listing: &str) -> Vec<String> {
    let ours = kube_proxy_ipsets();
    listing.lines().map(str::trim).filter(|name| ours.iter().any(|o| o == name)).map(str::to_string).collect()
}

/// Destroys kube-proxy's ipsets (call after the iptables rules using them are gone).
pub(crate) fn destroy_ipsets(report: &mut LeftoverReport) {
    let Some(ipset) = find_program("ipset") else {
        tracing::debug!("ipset not installed: skipped");
        return;
    };
    if !std::path::Path::new("/sys/module/ip_set").exists() {
        tracing::debug!("the ip_set module is not loaded: no ipsets");
        return;
    }
    let listing = match run(&ipset, &["list", "-n"], None) {
        Ok(listing) => listing,
        Err(e) => return report.failed(format!("ipsets: {e}")),
    };
    for name in ipsets_to_destroy(&listing) {
        match run(&ipset, &["destroy", &name], None) {
            Ok(_) => report.removed(format!("ipset {name}")),
            Err(e) if e.to_string().contains("does not exist") => tracing::debug!(set = %name, "ipset already gone"),
            Err(e) => report.failed(format!("ipset {name}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_names_are_prefixed_and_cut_like_kube_proxys() {
        let names = kube_proxy_ipsets();
        assert_eq!(names.len(), 2 * IPSETS.len());
        assert!(names.contains(&"KUBE-6-CLUSTER-IP".to_string()));
        // "KUBE-6-LOAD-BALANCER-SOURCE-CIDR" has 32 characters.
        assert!(names.contains(&"KUBE-6-LOAD-BALANCER-SOURCE-CID".to_string()));
        assert!(names.contains(&"KUBE-6-NODE-PORT-LOCAL-SCTP-HAS".to_string()));
        assert!(names.iter().all(|n| n.len() <= 31), "{names:?}");
    }

    #[test]
    fn only_kube_proxys_sets_are_destroyed() {
        let listing = "KUBE-CLUSTER-IP\nKUBE-SRC-ABCDEFGHIJ\nKUBE-6-NODE-PORT-TCP\nmy-set\n\
                       KUBE-LOOP-BACK\nKUBE-DST-XYZ\nkube-router-pod-subnets\n";
        assert_eq!(ipsets_to_destroy(listing), ["KUBE-CLUSTER-IP", "KUBE-6-NODE-PORT-TCP", "KUBE-LOOP-BACK"]);
        assert_eq!(ipsets_to_destroy(""), Vec::<String>::new());
    }
}
