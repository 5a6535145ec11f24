//! Object names: upstream kube-proxy's, with an `-v6` suffix for the IPv6 twin of each set.

use data_encoding::BASE32;
use sha2::{Digest, Sha256};
use verdict_model::{IpFamily, ServicePortName};

/// Active ClusterIPs.
pub const CLUSTER_IPS: &str = "cluster-ips";
/// Node addresses that accept NodePort traffic.
pub const NODEPORT_IPS: &str = "nodeport-ips";
/// ClusterIP, external IP and load balancer IP dispatch.
pub const SERVICE_IPS: &str = "service-ips";
/// NodePort dispatch.
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
/// Service addresses with no usable endpoint.
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
/// NodePorts with no usable endpoint.
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// Endpoint addresses, as `source . destination` pairs, for hairpin masquerading.
pub const HAIRPIN_ENDPOINTS: &str = "hairpin-endpoints";
/// Load balancer addresses subject to `loadBalancerSourceRanges`.
pub const FIREWALL_IPS: &str = "firewall-ips";

/// Base chains, by upstream's names.
pub const NAT_PREROUTING: &str = "nat-prerouting";
/// nat output.
pub const NAT_OUTPUT: &str = "nat-output";
/// nat postrouting.
pub const NAT_POSTROUTING: &str = "nat-postrouting";
/// filter input.
pub const FILTER_INPUT: &str = "filter-input";
/// filter forward.
pub const FILTER_FORWARD: &str = "filter-forward";
/// filter output.
pub const FILTER_OUTPUT: &str = "filter-output";
/// filter prerouting before DNAT (the source-range firewall).
pub const FILTER_PREROUTING_PRE_DNAT: &str = "filter-prerouting-pre-dnat";
/// filter output before DNAT (the source-range firewall).
pub const FILTER_OUTPUT_PRE_DNAT: &str = "filter-output-pre-dnat";

/// The fast path's flowtable: established connections to Service endpoints are offloaded to
/// it (`--flowtable-interfaces`), and their later packets skip routing and the netfilter
/// hooks on the interfaces it holds.
pub const FAST_PATH: &str = "fastpath";

/// Regular chains shared by all Services.
pub const SERVICES: &str = "services";
/// Masquerading at postrouting.
pub const MASQUERADING: &str = "masquerading";
/// Reject or drop traffic to Service addresses without endpoints.
pub const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
/// Reject or drop NodePort traffic without endpoints.
pub const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
/// Reject unknown ports of ClusterIPs.
pub const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
/// `reject` cannot be vmap data, so no-endpoint elements go here.
pub const REJECT_CHAIN: &str = "reject-chain";
/// Dispatch to the source-range firewall chains.
pub const FIREWALL_CHECK: &str = "firewall-check";

/// A per-family object name: the IPv4 object keeps upstream's name.
pub fn family_name(base: &str, family: IpFamily) -> std::borrow::Cow<'_, str> {
    match family {
        IpFamily::V4 => std::borrow::Cow::Borrowed(base),
        IpFamily::V6 => std::borrow::Cow::Owned(format!("{base}-v6")),
    }
}

/// The longest comment `nft` reads back (libnftnl's `NFTNL_UDATA_COMMENT_MAXLEN`, in bytes):
/// the kernel stores up to 256, but a listing with a longer one does not reload with `nft -f`.
pub const MAX_COMMENT: usize = 128;

/// The comment of a Service port's elements: `namespace/name:port`, cut to [`MAX_COMMENT`]
/// bytes on a character boundary, as upstream cuts it (kubernetes #139516). Names at
/// Kubernetes' longest (63, 63 and 15 characters) make 143.
pub fn port_comment(spn: &ServicePortName) -> String {
    let mut comment = spn.to_string();
    if comment.len() > MAX_COMMENT {
        let mut cut = MAX_COMMENT;
        while !comment.is_char_boundary(cut) {
            cut -= 1;
        }
        comment.truncate(cut);
    }
    comment
}

/// The map of Service addresses with `n` endpoints, and the chain that DNATs through it.
pub fn endpoints(n: usize, family: IpFamily) -> String {
    family_name(&format!("endpoints-{n}"), family).into_owned()
}

/// The map of NodePorts with `n` endpoints, and the chain that DNATs through it.
pub fn nodeport_endpoints(n: usize, family: IpFamily) -> String {
    family_name(&format!("nodeport-endpoints-{n}"), family).into_owned()
}

/// The chain that masquerades, then DNATs through the `n`-endpoint map.
pub fn masq(map_base: &str, n: usize, family: IpFamily) -> String {
    family_name(&format!("{map_base}-{n}-masq"), family).into_owned()
}

/// A per-Service chain: `<prefix>-HASH-namespace/name/protocol/port` (upstream's naming).
pub fn service_chain(prefix: &str, spn: &ServicePortName) -> String {
    format!("{prefix}-{}", chain_name_base(spn))
}

/// The name base of an endpoint's chain and affinity set: the Service port's, then
/// `__address/port` (with the colons of IPv6 addresses written as dots, as upstream does).
pub fn endpoint_base(spn: &ServicePortName, addr: &std::net::IpAddr, port: u16) -> String {
    let rest = format!(
        "{}/{}/{}/{}__{}/{port}",
        spn.namespace,
        spn.name,
        spn.protocol.lower(),
        spn.port,
        addr.to_string().replace(':', ".")
    );
    hashed(&rest)
}

/// Upstream's chain-name base: `HASH-namespace/name/protocol/port`, where HASH is the first
/// eight characters of base32(sha256(rest)). The hash keeps names unique when they are cut.
pub fn chain_name_base(spn: &ServicePortName) -> String {
    let rest = format!("{}/{}/{}/{}", spn.namespace, spn.name, spn.protocol.lower(), spn.port);
    hashed(&rest)
}

/// `HASH-rest`, cut to fit nft's 256-byte chain names as upstream does.
pub fn hashed(rest: &str) -> String {
    let digest = Sha256::digest(rest.as_bytes());
    let hash = &BASE32.encode(&digest)[..8];
    let mut name = format!("{hash}-{rest}");
    if name.len() > 240 {
        let mut cut = 237;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        name.push_str("...");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_model::Protocol;

    #[test]
    fn chain_hashes_match_upstream() {
        // Values from upstream kube-proxy's nftables tests.
        let spn = ServicePortName::new("ns1", "svc1", "p80", Protocol::Tcp);
        assert_eq!(chain_name_base(&spn), "ULMVA6XW-ns1/svc1/tcp/p80");
        assert_eq!(hashed("ns1/svc1/tcp/p80__10.180.0.1/80"), "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80");
        assert_eq!(hashed("default/web/tcp/http"), "SUSTUHLJ-default/web/tcp/http");
        let ep = endpoint_base(&spn, &"10.180.0.1".parse().unwrap(), 80);
        assert_eq!(ep, "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80");
    }

    #[test]
    fn port_comments_are_cut_to_what_nft_reads_back() {
        let short = ServicePortName::new("ns1", "svc1", "p80", Protocol::Tcp);
        assert_eq!(port_comment(&short), "ns1/svc1:p80");
        let longest = ServicePortName::new(&"n".repeat(63), &"s".repeat(63), &"p".repeat(15), Protocol::Tcp);
        let cut = port_comment(&longest);
        assert_eq!(cut.len(), MAX_COMMENT);
        assert!(longest.to_string().starts_with(&cut));
        // A cut inside a character keeps the whole characters before it.
        let wide = ServicePortName::new(&"n".repeat(63), &format!("{}é", "s".repeat(63)), "", Protocol::Tcp);
        let cut = port_comment(&wide);
        assert!(cut.len() <= MAX_COMMENT && cut.is_char_boundary(cut.len()));
    }

    #[test]
    fn long_names_are_cut_with_an_ellipsis() {
        let long = "x".repeat(300);
        let name = hashed(&long);
        assert_eq!(name.len(), 240);
        assert!(name.ends_with("..."));
    }
}
