//! kube-proxy's nftables mode (`pkg/proxy/nftables/proxier.go`, v1.33+ layout): the
//! `ip kube-proxy` table (and `ip6 kube-proxy`), written as knftables writes it, `add` by
//! `add`.
//!
//! Base chains: `filter-prerouting-pre-dnat` and `filter-output-pre-dnat` at -110 (firewall
//! checks), `filter-input`, `filter-forward` and `filter-output` at 0 (no-endpoint rejects,
//! unallocated ClusterIPs), `nat-prerouting` and `nat-output` at -100 (the `services` dispatch),
//! `nat-postrouting` at 100 (masquerading). The `services` chain looks up `@service-ips`
//! (address . protocol . port) and, for addresses in `@nodeport-ips` (the node's primary IP,
//! upstream's default `nodePortAddresses: primary`), `@service-nodeports`; each Service port
//! has a `service-HASH-ns/name/proto/port` chain choosing an `endpoint-HASH-...` chain with
//! `numgen random mod N`, and a NodePort an `external-` chain marking for masquerade.
//!
//! A full sync (kube-proxy's first, or a restarted one's) in one transaction: every set and map
//! flushed and filled again, every chain it writes created if missing and flushed; per-Service
//! chains no Service uses any more are flushed then, and deleted in a second transaction (as
//! upstream defers their deletion).

use super::{Family, KubeProxy, MASQ_MARK, NodeInfo, SvcPort, feed, hash};
use crate::netns::Netns;
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::fmt::Write;

/// `ip` or `ip6`: the table's family and the address match.
fn ipx(family: Family) -> &'static str {
    match family {
        Family::V4 => "ip",
        Family::V6 => "ip6",
    }
}

/// `HASH-rest`: upstream's `hashAndTruncate`.
fn hashed(rest: &str) -> String {
    let name = format!("{}-{rest}", hash(rest, 8));
    if name.len() > 112 { format!("{}...", &name[..109]) } else { name }
}

fn base(p: &SvcPort) -> String {
    hashed(&format!("{}/{}/{}/{}", p.namespace, p.service, p.proto, p.port_name))
}

fn service_chain(p: &SvcPort) -> String {
    format!("service-{}", base(p))
}

fn external_chain(p: &SvcPort) -> String {
    format!("external-{}", base(p))
}

fn endpoint_chain(p: &SvcPort, ep: &super::Ep) -> String {
    let ip = ep.ip.to_string().replace(':', ".");
    format!(
        "endpoint-{}",
        hashed(&format!("{}/{}/{}/{}__{ip}/{}", p.namespace, p.service, p.proto, p.port_name, ep.port))
    )
}

/// The sets and maps: (kind, name, type, comment).
const SETS: &[(&str, &str, &str, &str)] = &[
    ("set", "cluster-ips", "ADDR", "Active ClusterIPs"),
    ("set", "nodeport-ips", "ADDR", "IPs that accept NodePort traffic"),
    (
        "map",
        "firewall-ips",
        "ADDR . inet_proto . inet_service : verdict",
        "destinations that are subject to LoadBalancerSourceRanges",
    ),
    (
        "map",
        "no-endpoint-nodeports",
        "inet_proto . inet_service : verdict",
        "vmap to drop or reject packets to service nodeports with no endpoints",
    ),
    (
        "map",
        "no-endpoint-services",
        "ADDR . inet_proto . inet_service : verdict",
        "vmap to drop or reject packets to services with no endpoints",
    ),
    (
        "map",
        "service-ips",
        "ADDR . inet_proto . inet_service : verdict",
        "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    ),
    ("map", "service-nodeports", "inet_proto . inet_service : verdict", "NodePort traffic"),
];

/// The base chains: (name, type, hook, priority).
const BASE_CHAINS: &[(&str, &str, &str, i32)] = &[
    ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
    ("filter-output-pre-dnat", "filter", "output", -110),
    ("filter-forward", "filter", "forward", 0),
    ("filter-input", "filter", "input", 0),
    ("filter-output", "filter", "output", 0),
    ("nat-output", "nat", "output", -100),
    ("nat-postrouting", "nat", "postrouting", 100),
    ("nat-prerouting", "nat", "prerouting", -100),
];

/// The regular chains every sync writes.
const CHAINS: &[&str] = &[
    "cluster-ips-check",
    "firewall-check",
    "mark-for-masquerade",
    "masquerading",
    "nodeport-endpoints-check",
    "reject-chain",
    "services",
    "service-endpoints-check",
];

/// The chains `ports` need, per-Service ones included.
pub fn chains(ports: &[SvcPort]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = BASE_CHAINS.iter().map(|c| c.0.to_string()).collect();
    out.extend(CHAINS.iter().map(|c| c.to_string()));
    for p in ports.iter().filter(|p| !p.endpoints.is_empty()) {
        out.insert(service_chain(p));
        if p.node_port.is_some() {
            out.insert(external_chain(p));
        }
        out.extend(p.endpoints.iter().map(|ep| endpoint_chain(p, ep)));
    }
    out
}

/// One full sync's transaction for `ports` (all of `family`) on `node`, flushing `stale`
/// per-Service chains.
pub fn transaction(ports: &[SvcPort], node: &NodeInfo, family: Family, stale: &[String]) -> String {
    let (ip, addr_type) = (ipx(family), if family == Family::V4 { "ipv4_addr" } else { "ipv6_addr" });
    let t = format!("{ip} kube-proxy");
    let mut s = String::with_capacity(ports.len() * 1500 + 6000);
    let _ = writeln!(s, "add table {t} {{ comment \"rules for kube-proxy\" ; }}");
    for (kind, name, ty, comment) in SETS {
        let ty = ty.replace("ADDR", addr_type);
        let _ = writeln!(s, "add {kind} {t} {name} {{ type {ty} ; comment \"{comment}\" ; }}");
        let _ = writeln!(s, "flush {kind} {t} {name}");
    }
    for (name, ty, hook, prio) in BASE_CHAINS {
        let _ = writeln!(s, "add chain {t} {name} {{ type {ty} hook {hook} priority {prio} ; }}");
        let _ = writeln!(s, "flush chain {t} {name}");
    }
    for name in CHAINS {
        match *name {
            "reject-chain" => {
                let _ = writeln!(
                    s,
                    "add chain {t} {name} {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}"
                );
            }
            _ => {
                let _ = writeln!(s, "add chain {t} {name}");
            }
        }
        let _ = writeln!(s, "flush chain {t} {name}");
    }
    for c in stale {
        let _ = writeln!(s, "flush chain {t} {c}");
    }
    let rule = |s: &mut String, chain: &str, body: &str| {
        let _ = writeln!(s, "add rule {t} {chain} {body}");
    };
    rule(
        &mut s,
        "cluster-ips-check",
        &format!("{ip} daddr @cluster-ips reject comment \"Reject traffic to invalid ports of ClusterIPs\""),
    );
    let service_cidr = if family == Family::V4 { &node.service_cidr_v4 } else { &node.service_cidr_v6 };
    if let Some(cidr) = service_cidr {
        rule(
            &mut s,
            "cluster-ips-check",
            &format!("{ip} daddr {{ {cidr} }} drop comment \"Drop traffic to unallocated ClusterIPs\""),
        );
    }
    for (chain, target) in [
        ("filter-prerouting-pre-dnat", "firewall-check"),
        ("filter-forward", "service-endpoints-check"),
        ("filter-forward", "cluster-ips-check"),
        ("filter-input", "nodeport-endpoints-check"),
        ("filter-input", "service-endpoints-check"),
        ("filter-output", "service-endpoints-check"),
        ("filter-output-pre-dnat", "firewall-check"),
        ("filter-output", "cluster-ips-check"),
    ] {
        rule(&mut s, chain, &format!("ct state new jump {target}"));
    }
    rule(&mut s, "firewall-check", &format!("{ip} daddr . meta l4proto . th dport vmap @firewall-ips"));
    rule(&mut s, "mark-for-masquerade", &format!("mark set mark or {MASQ_MARK}"));
    rule(&mut s, "masquerading", &format!("mark and {MASQ_MARK} == 0 return"));
    rule(&mut s, "masquerading", &format!("mark set mark xor {MASQ_MARK}"));
    rule(&mut s, "masquerading", "masquerade fully-random");
    rule(&mut s, "nat-output", "jump services");
    rule(&mut s, "nat-postrouting", "jump masquerading");
    rule(&mut s, "nat-prerouting", "jump services");
    let nodeport_ips = format!("{ip} daddr @nodeport-ips meta l4proto . th dport");
    rule(&mut s, "nodeport-endpoints-check", &format!("{nodeport_ips} vmap @no-endpoint-nodeports"));
    rule(&mut s, "reject-chain", "reject");
    rule(&mut s, "services", &format!("{ip} daddr . meta l4proto . th dport vmap @service-ips"));
    rule(&mut s, "services", &format!("{nodeport_ips} vmap @service-nodeports"));
    let node_ip = match family {
        Family::V4 => Some(node.ipv4.to_string()),
        Family::V6 => node.ipv6.map(|ip| ip.to_string()),
    };
    if let Some(node_ip) = node_ip {
        let _ = writeln!(s, "add element {t} nodeport-ips {{ {node_ip} }}");
    }
    rule(
        &mut s,
        "service-endpoints-check",
        &format!("{ip} daddr . meta l4proto . th dport vmap @no-endpoint-services"),
    );
    let cluster_cidr = node.cluster_cidr(family);
    for p in ports {
        service(&mut s, &t, ip, p, cluster_cidr);
    }
    s
}

fn service(s: &mut String, t: &str, ip: &str, p: &SvcPort, cluster_cidr: Option<&str>) {
    let (name, proto, vip) = (p.name(), &p.proto, p.vip);
    let _ = writeln!(s, "add element {t} cluster-ips {{ {vip} }}");
    if p.endpoints.is_empty() {
        let _ = writeln!(
            s,
            "add element {t} no-endpoint-services {{ {vip} . {proto} . {} comment \"{name}\" : goto reject-chain }}",
            p.port
        );
        if let Some(np) = p.node_port {
            let _ = writeln!(
                s,
                "add element {t} no-endpoint-nodeports {{ {proto} . {np} comment \"{name}\" : goto reject-chain }}"
            );
        }
        return;
    }
    let svc = service_chain(p);
    // Chains (created, or emptied when they exist) before the rules that jump to them.
    let mut chains = vec![svc.clone()];
    chains.extend(p.node_port.map(|_| external_chain(p)));
    chains.extend(p.endpoints.iter().map(|ep| endpoint_chain(p, ep)));
    for chain in &chains {
        let _ = writeln!(s, "add chain {t} {chain}");
        let _ = writeln!(s, "flush chain {t} {chain}");
    }
    if let Some(cidr) = cluster_cidr {
        let _ = writeln!(s, "add rule {t} {svc} {ip} daddr {vip} {ip} saddr != {cidr} jump mark-for-masquerade");
    }
    let picks: Vec<String> =
        p.endpoints.iter().enumerate().map(|(i, ep)| format!("{i} : goto {}", endpoint_chain(p, ep))).collect();
    let _ = writeln!(s, "add rule {t} {svc} numgen random mod {} vmap {{ {} }}", picks.len(), picks.join(" , "));
    if p.node_port.is_some() {
        let ext = external_chain(p);
        let _ = writeln!(s, "add rule {t} {ext} jump mark-for-masquerade");
        let _ = writeln!(s, "add rule {t} {ext} goto {svc}");
    }
    for ep in &p.endpoints {
        let chain = endpoint_chain(p, ep);
        let _ = writeln!(s, "add rule {t} {chain} {ip} saddr {} jump mark-for-masquerade", ep.ip);
        let _ = writeln!(s, "add rule {t} {chain} meta l4proto {proto} dnat to {ep}");
    }
    let _ = writeln!(s, "add element {t} service-ips {{ {vip} . {proto} . {} : goto {svc} }}", p.port);
    if let Some(np) = p.node_port {
        let _ = writeln!(s, "add element {t} service-nodeports {{ {proto} . {np} : goto {} }}", external_chain(p));
    }
}

/// The chains of the `family` table in `ns`, if it exists.
fn existing_chains(ns: &Netns, family: Family) -> Result<BTreeSet<String>> {
    let out = ns.exec(&["nft", "-j", "list", "chains", ipx(family)])?;
    if !out.status.success() {
        return Ok(BTreeSet::new());
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).context("nft -j list chains")?;
    let items = json.get("nftables").and_then(|v| v.as_array()).cloned().unwrap_or_default();
    Ok(items
        .iter()
        .filter_map(|i| i.get("chain"))
        .filter(|c| c.get("table").and_then(|t| t.as_str()) == Some("kube-proxy"))
        .filter_map(|c| c.get("name").and_then(|n| n.as_str()).map(str::to_string))
        .collect())
}

/// kube-proxy's nftables mode starting on `ns`, or resyncing there; kubelet's iptables chains
/// (through `iptables-nft`) beside it, as on any node.
pub fn apply(ns: &Netns, kp: &KubeProxy) -> Result<()> {
    super::conntrack_sysctls(ns)?;
    super::iptables::kubelet(ns, super::Backend::Nft, Family::V4)?;
    if kp.node.ipv6.is_some() {
        super::iptables::kubelet(ns, super::Backend::Nft, Family::V6)?;
    }
    let families: &[(Family, &[SvcPort])] = if kp.node.ipv6.is_some() {
        &[(Family::V4, &kp.ports_v4), (Family::V6, &kp.ports_v6)]
    } else {
        &[(Family::V4, &kp.ports_v4)]
    };
    for &(family, ports) in families {
        let wanted = chains(ports);
        let stale: Vec<String> = existing_chains(ns, family)?.difference(&wanted).cloned().collect();
        feed(ns, &["nft", "-f", "-"], &transaction(ports, &kp.node, family, &stale))?;
        if !stale.is_empty() {
            let t = format!("{} kube-proxy", ipx(family));
            let deletions: String = stale.iter().map(|c| format!("delete chain {t} {c}\n")).collect();
            feed(ns, &["nft", "-f", "-"], &deletions)?;
        }
    }
    Ok(())
}

/// `nft list table` of both families' tables in `ns` (counters are never written here), then
/// kubelet's iptables chains.
pub fn listed(ns: &Netns) -> Result<String> {
    let mut out = String::new();
    for family in [Family::V4, Family::V6] {
        let got = ns.exec(&["nft", "list", "table", ipx(family), "kube-proxy"])?;
        out.push_str(&String::from_utf8_lossy(&got.stdout));
    }
    out.push_str(&super::iptables::saved(ns, super::Backend::Nft)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream_proxy::Ep;

    fn node() -> NodeInfo {
        NodeInfo {
            name: "test-node".into(),
            ipv4: "192.168.0.2".parse().unwrap(),
            ipv6: None,
            cluster_cidr_v4: "10.0.0.0/8".into(),
            cluster_cidr_v6: None,
            service_cidr_v4: Some("172.30.0.0/16".into()),
            service_cidr_v6: None,
        }
    }

    fn svc(name: &str, vip: &str, node_port: Option<u16>, eps: &[&str]) -> SvcPort {
        SvcPort {
            namespace: name.split('/').next().unwrap().into(),
            service: name.split('/').nth(1).unwrap().into(),
            port_name: "p80".into(),
            vip: vip.parse().unwrap(),
            proto: "tcp".into(),
            port: 80,
            node_port,
            endpoints: eps.iter().map(|e| Ep { ip: e.parse().unwrap(), port: 80, node: None }).collect(),
        }
    }

    /// Upstream's `TestOverallNFTablesRules`: svc1 (ClusterIP), svc3 (NodePort 3003), svc4 (two
    /// endpoints) and svc6 (no endpoints), line for line as upstream's test expects them.
    #[test]
    fn the_rules_of_upstreams_overall_test() {
        let ports = vec![
            svc("ns1/svc1", "172.30.0.41", None, &["10.180.0.1"]),
            svc("ns3/svc3", "172.30.0.43", Some(3003), &["10.180.0.3"]),
            svc("ns4/svc4", "172.30.0.44", None, &["10.180.0.4", "10.180.0.5"]),
            svc("ns6/svc6", "172.30.0.46", None, &[]),
        ];
        let text = transaction(&ports, &node(), Family::V4, &[]);
        for want in [
            "add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
            "add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 }",
            "add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 ip saddr 10.180.0.1 jump mark-for-masquerade",
            "add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 meta l4proto tcp dnat to 10.180.0.1:80",
            "add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }",
            "add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 jump mark-for-masquerade",
            "add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 goto service-4AT6LBPK-ns3/svc3/tcp/p80",
            "add element ip kube-proxy service-nodeports { tcp . 3003 : goto external-4AT6LBPK-ns3/svc3/tcp/p80 }",
            "add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 numgen random mod 2 vmap { 0 : goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 , 1 : goto endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 }",
            "add element ip kube-proxy cluster-ips { 172.30.0.46 }",
            "add element ip kube-proxy no-endpoint-services { 172.30.0.46 . tcp . 80 comment \"ns6/svc6:p80\" : goto reject-chain }",
            "add chain ip kube-proxy filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }",
            "add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16 } drop comment \"Drop traffic to unallocated ClusterIPs\"",
            "add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
            "add element ip kube-proxy nodeport-ips { 192.168.0.2 }",
            "add rule ip kube-proxy masquerading masquerade fully-random",
        ] {
            assert!(text.lines().any(|l| l == want), "missing:\n{want}\nin:\n{text}");
        }
        assert!(
            !text.contains("service-") || !text.contains("ns6/svc6/tcp"),
            "no chain for a Service without endpoints"
        );
        let wanted = chains(&ports);
        assert!(wanted.contains("endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80"));
        assert_eq!(wanted.iter().filter(|c| c.starts_with("endpoint-")).count(), 4);
    }

    #[test]
    fn ipv6_endpoint_chains_write_colons_as_dots() {
        let mut p = svc("ns/web", "fd00:96::10", None, &[]);
        p.endpoints = vec![Ep { ip: "fd00:10::5".parse().unwrap(), port: 8080, node: None }];
        assert!(endpoint_chain(&p, &p.endpoints[0]).ends_with("-ns/web/tcp/p80__fd00.10..5/8080"));
        let text = transaction(&[p], &node(), Family::V6, &[]);
        assert!(text.contains("add table ip6 kube-proxy"));
        assert!(text.contains("meta l4proto tcp dnat to [fd00:10::5]:8080"), "{text}");
        assert!(!text.contains("add element ip6 kube-proxy nodeport-ips"), "no IPv6 node address, no element");
    }
}
