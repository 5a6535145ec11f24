//! What the node's kernel can do, asked once at start.

use std::path::Path;
use verdict_model::IpFamily;

/// Where the kernel lists IPv6 interface addresses; absent when IPv6 is off (`ipv6.disable=1`
/// or no IPv6 module). Upstream kube-proxy decides IPv6 support from the same file.
const IF_INET6: &str = "/proc/net/if_inet6";

/// The IP families verdict proxies on this node: IPv4 always, IPv6 when the kernel has it.
/// The Node's addresses play no part (they decide only NodePorts), as upstream.
pub fn kernel_families() -> Vec<IpFamily> {
    families(Path::new(IF_INET6).exists())
}

fn families(ipv6: bool) -> Vec<IpFamily> {
    if ipv6 { IpFamily::ALL.to_vec() } else { vec![IpFamily::V4] }
}

/// Upstream's start-up line, so operators find the mode where they look for it.
pub fn log_families(families: &[IpFamily]) {
    if families.len() > 1 {
        tracing::info!("verdict running in dual-stack mode (the kernel supports IPv4 and IPv6)");
    } else {
        tracing::info!(
            families = ?families.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
            "verdict running in single-stack mode: the kernel has no IPv6 ({IF_INET6} is absent)"
        );
    }
}

/// Whether `net.ipv4.conf.all.route_localnet` is on in this network namespace: kube-proxy's
/// iptables mode turns it on for localhost NodePorts and nothing turns it off. With it, the
/// kernel routes packets to 127.0.0.0/8 that arrive from the network to the node's loopback
/// sockets (CVE-2020-8558), so the table keeps the guard against them even where verdict serves
/// no localhost NodePort (one line says so).
pub fn route_localnet_on() -> bool {
    let on = std::fs::read_to_string("/proc/sys/net/ipv4/conf/all/route_localnet").is_ok_and(|v| v.trim() == "1");
    if on {
        tracing::info!(
            "net.ipv4.conf.all.route_localnet is 1 on this node (kube-proxy's iptables mode sets it): packets to 127.0.0.0/8 from the network are dropped (CVE-2020-8558)"
        );
    }
    on
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_follows_the_kernel_not_the_node() {
        assert_eq!(families(true), vec![IpFamily::V4, IpFamily::V6]);
        assert_eq!(families(false), vec![IpFamily::V4]);
    }
}
