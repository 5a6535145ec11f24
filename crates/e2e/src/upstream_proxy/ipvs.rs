//! kube-proxy's IPVS mode (`pkg/proxy/ipvs/proxier.go`, `ipset.go`), IPv4: what a sync
//! leaves in the kernel.
//!
//! - sysctls: `net.ipv4.vs.conntrack=1`, `expire_nodest_conn=1`, `expire_quiescent_template=1`,
//!   `ip_forward=1` (`conn_reuse_mode` is left alone from kernel 5.9 on, as upstream does);
//! - the `kube-ipvs0` dummy link (left down, as upstream leaves it) holding every ClusterIP as a
//!   /32, so that they are local addresses;
//! - a virtual server (scheduler `rr`) for every ClusterIP:port and for every node address
//!   (every local address but `kube-ipvs0`'s, loopback and link-local ones left out) with every
//!   NodePort, each with the Service's ready endpoints as masquerading real servers of weight 1;
//! - the ipsets, all 17 created, filled: `KUBE-CLUSTER-IP` (ClusterIP,proto:port),
//!   `KUBE-LOOP-BACK` (this node's endpoints, for hairpin masquerade), `KUBE-NODE-PORT-TCP` /
//!   `-UDP` (bitmaps of NodePorts), `KUBE-IPVS-IPS` (the addresses on `kube-ipvs0`);
//! - its iptables rules through `iptables-nft` (`iptables-restore --noflush`): `KUBE-SERVICES`
//!   matching the sets, `KUBE-NODE-PORT`, `KUBE-POSTROUTING` masquerading marked and hairpin
//!   traffic, `KUBE-MARK-MASQ`, `KUBE-FORWARD`, `KUBE-IPVS-FILTER` and the rest, with the jumps
//!   from the built-in chains ensured one by one; and kubelet's chains.
//!
//! A sync reconciles like upstream's: missing servers, entries and addresses are added, ones no
//! Service has any more removed, the rest left alone (existing connections keep their real
//! servers).

use super::iptables::{ensure_chain, ensure_rule, kubelet, words};
use super::{Backend, Family, KubeProxy, MASQ_MARK, SvcPort, feed};
use crate::netns::Netns;
use anyhow::{Result, bail};
use std::collections::BTreeSet;
use std::fmt::Write;
use std::net::Ipv4Addr;

/// The dummy link holding the ClusterIPs.
pub const DUMMY: &str = "kube-ipvs0";

/// Every ipset the proxier creates: (name, type, comment used in its iptables rules).
pub const SETS: &[(&str, &str, &str)] = &[
    ("KUBE-LOOP-BACK", "hash:ip,port,ip", "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"),
    ("KUBE-CLUSTER-IP", "hash:ip,port", "Kubernetes service cluster ip + port for masquerade purpose"),
    ("KUBE-EXTERNAL-IP", "hash:ip,port", "Kubernetes service external ip + port for masquerade and filter purpose"),
    (
        "KUBE-EXTERNAL-IP-LOCAL",
        "hash:ip,port",
        "Kubernetes service external ip + port with externalTrafficPolicy=local",
    ),
    ("KUBE-LOAD-BALANCER", "hash:ip,port", "Kubernetes service lb portal"),
    (
        "KUBE-LOAD-BALANCER-FW",
        "hash:ip,port",
        "Kubernetes service load balancer ip + port for load balancer with sourceRange",
    ),
    (
        "KUBE-LOAD-BALANCER-LOCAL",
        "hash:ip,port",
        "Kubernetes service load balancer ip + port with externalTrafficPolicy=local",
    ),
    (
        "KUBE-LOAD-BALANCER-SOURCE-IP",
        "hash:ip,port,ip",
        "Kubernetes service load balancer ip + port + source IP for packet filter purpose",
    ),
    (
        "KUBE-LOAD-BALANCER-SOURCE-CIDR",
        "hash:ip,port,net",
        "Kubernetes service load balancer ip + port + source cidr for packet filter purpose",
    ),
    ("KUBE-NODE-PORT-TCP", "bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"),
    ("KUBE-NODE-PORT-LOCAL-TCP", "bitmap:port", "Kubernetes nodeport TCP port with externalTrafficPolicy=local"),
    ("KUBE-NODE-PORT-UDP", "bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"),
    ("KUBE-NODE-PORT-LOCAL-UDP", "bitmap:port", "Kubernetes nodeport UDP port with externalTrafficPolicy=local"),
    (
        "KUBE-NODE-PORT-SCTP-HASH",
        "hash:ip,port",
        "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
    ),
    (
        "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
        "hash:ip,port",
        "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
    ),
    ("KUBE-HEALTH-CHECK-NODE-PORT", "bitmap:port", "Kubernetes health check node port"),
    ("KUBE-IPVS-IPS", "hash:ip", "Addresses on the ipvs interface"),
];

/// The jumps from built-in chains: (table, from, to, comment), each ensured at the top.
pub const JUMPS: &[(&str, &str, &str, &str)] = &[
    ("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),
    ("nat", "PREROUTING", "KUBE-SERVICES", "kubernetes service portals"),
    ("nat", "POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules"),
    ("filter", "FORWARD", "KUBE-FORWARD", "kubernetes forwarding rules"),
    ("filter", "INPUT", "KUBE-NODE-PORT", "kubernetes health check rules"),
    ("filter", "INPUT", "KUBE-PROXY-FIREWALL", "kube-proxy firewall rules"),
    ("filter", "FORWARD", "KUBE-PROXY-FIREWALL", "kube-proxy firewall rules"),
    ("filter", "INPUT", "KUBE-IPVS-FILTER", "kubernetes ipvs access filter"),
    ("filter", "OUTPUT", "KUBE-IPVS-OUT-FILTER", "kubernetes ipvs access filter"),
];

fn comment(set: &str) -> &'static str {
    SETS.iter().find(|s| s.0 == set).map_or("", |s| s.2)
}

/// What a sync wants in the sets: `(set, entry)`, as `ipset save` writes entries.
pub fn set_entries(ports: &[SvcPort], node_name: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut add = |set: &str, entry: String| out.insert((set.to_string(), entry));
    for p in ports.iter().filter(|p| p.vip.is_ipv4()) {
        let proto = &p.proto;
        add("KUBE-CLUSTER-IP", format!("{},{proto}:{}", p.vip, p.port));
        add("KUBE-IPVS-IPS", p.vip.to_string());
        for ep in p.endpoints.iter().filter(|ep| ep.node.as_deref() == Some(node_name)) {
            add("KUBE-LOOP-BACK", format!("{},{proto}:{},{}", ep.ip, ep.port, ep.ip));
        }
        match (p.node_port, proto.as_str()) {
            (Some(np), "tcp") => add("KUBE-NODE-PORT-TCP", np.to_string()),
            (Some(np), "udp") => add("KUBE-NODE-PORT-UDP", np.to_string()),
            _ => false,
        };
    }
    out
}

/// What a sync wants in IPVS, as `ipvsadm -Sn` writes it: `-A` lines for virtual servers and
/// `-a` lines for real servers.
pub fn servers(ports: &[SvcPort], node_ips: &[Ipv4Addr]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in ports.iter().filter(|p| p.vip.is_ipv4()) {
        let flag = if p.proto == "udp" { "-u" } else { "-t" };
        let mut addrs = vec![format!("{}:{}", p.vip, p.port)];
        if let Some(np) = p.node_port {
            addrs.extend(node_ips.iter().map(|ip| format!("{ip}:{np}")));
        }
        for vs in addrs {
            out.insert(format!("-A {flag} {vs} -s rr"));
            for ep in &p.endpoints {
                out.insert(format!("-a {flag} {vs} -r {ep} -m -w 1"));
            }
        }
    }
    out
}

/// The `iptables-restore --noflush` input the proxier writes: nat, then filter. `sets` are the
/// sets with entries (rules matching an empty set are left out, as upstream leaves them).
pub fn restore_input(cluster_cidr: &str, sets: &BTreeSet<&str>) -> String {
    let mut s = String::from("*nat\n");
    for c in ["KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-MARK-MASQ"] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    s.push_str("-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN\n");
    let matching = |s: &mut String, set: &str, chain: &str, proto: &str, how: &str, to: &str| {
        if sets.contains(set) {
            let proto = if proto.is_empty() { String::new() } else { format!("-p {proto} ") };
            let _ = writeln!(
                s,
                "-A {chain} {proto}-m comment --comment \"{}\" -m set --match-set {set} {how} -j {to}",
                comment(set)
            );
        }
    };
    matching(&mut s, "KUBE-LOOP-BACK", "KUBE-POSTROUTING", "", "dst,dst,src", "MASQUERADE");
    matching(&mut s, "KUBE-LOAD-BALANCER", "KUBE-SERVICES", "", "dst,dst", "KUBE-LOAD-BALANCER");
    matching(&mut s, "KUBE-NODE-PORT-TCP", "KUBE-NODE-PORT", "tcp", "dst", "KUBE-MARK-MASQ");
    matching(&mut s, "KUBE-NODE-PORT-UDP", "KUBE-NODE-PORT", "udp", "dst", "KUBE-MARK-MASQ");
    if sets.contains("KUBE-CLUSTER-IP") {
        let _ = writeln!(
            s,
            "-A KUBE-SERVICES -m comment --comment \"{}\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s {cluster_cidr} -j KUBE-MARK-MASQ",
            comment("KUBE-CLUSTER-IP")
        );
    }
    s.push_str("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT\n");
    s.push_str("-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ\n");
    if sets.contains("KUBE-CLUSTER-IP") {
        s.push_str("-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n");
    }
    let _ = writeln!(s, "-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN");
    let _ = writeln!(s, "-A KUBE-POSTROUTING -j MARK --xor-mark {MASQ_MARK}");
    s.push_str(
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
    );
    let _ = writeln!(s, "-A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}");
    s.push_str("COMMIT\n*filter\n");
    for c in [
        "KUBE-FORWARD",
        "KUBE-NODE-PORT",
        "KUBE-PROXY-FIREWALL",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "KUBE-IPVS-FILTER",
        "KUBE-IPVS-OUT-FILTER",
    ] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    s.push_str("-A KUBE-SOURCE-RANGES-FIREWALL -j DROP\n");
    let _ = writeln!(
        s,
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT"
    );
    s.push_str("-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n");
    let _ = writeln!(
        s,
        "-A KUBE-NODE-PORT -m comment --comment \"{}\" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT",
        comment("KUBE-HEALTH-CHECK-NODE-PORT")
    );
    for (set, how) in [
        ("KUBE-LOAD-BALANCER", "dst,dst"),
        ("KUBE-CLUSTER-IP", "dst,dst"),
        ("KUBE-EXTERNAL-IP", "dst,dst"),
        ("KUBE-EXTERNAL-IP-LOCAL", "dst,dst"),
        ("KUBE-HEALTH-CHECK-NODE-PORT", "dst"),
    ] {
        let _ = writeln!(s, "-A KUBE-IPVS-FILTER -m set --match-set {set} {how} -j RETURN");
    }
    s.push_str(
        "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT\nCOMMIT\n",
    );
    s
}

/// Whether IPVS works in `ns` (this kernel has `ip_vs`, `ipvsadm` is installed).
pub fn available(ns: &Netns) -> Result<()> {
    let out = ns.exec(&["ipvsadm", "-Ln"]);
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => bail!("ipvsadm -Ln fails: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => bail!("ipvsadm cannot run (apt-get install ipvsadm): {e:#}"),
    }
}

/// The node's addresses for NodePorts: every local IPv4 address but `kube-ipvs0`'s, loopback
/// and link-local ones left out (upstream's `GetAllLocalAddressesExcept`).
pub fn node_addresses(ns: &Netns) -> Result<Vec<Ipv4Addr>> {
    let text = ns.check(&["ip", "-4", "-o", "addr", "show"])?;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let dev = w.nth(1).unwrap_or("");
        let Some(addr) = w.skip_while(|x| *x != "inet").nth(1) else { continue };
        let Ok(ip) = addr.split('/').next().unwrap_or("").parse::<Ipv4Addr>() else { continue };
        if dev != DUMMY && !ip.is_loopback() && !ip.is_link_local() {
            out.insert(ip);
        }
    }
    Ok(out.into_iter().collect())
}

fn sysctls(ns: &Netns) -> Result<()> {
    super::conntrack_sysctls(ns)?;
    ns.sysctl("net.ipv4.vs.conntrack", "1")?;
    ns.sysctl("net.ipv4.vs.expire_nodest_conn", "1")?;
    ns.sysctl("net.ipv4.vs.expire_quiescent_template", "1")?;
    ns.sysctl("net.ipv4.ip_forward", "1")
}

/// The addresses (`ip/len`) in `ip -o addr show` output.
fn inet_addresses(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.split_whitespace().skip_while(|w| *w != "inet").nth(1)).collect()
}

/// `kube-ipvs0` holding exactly `vips`, each as a /32.
fn dummy(ns: &Netns, vips: &BTreeSet<String>) -> Result<()> {
    if !ns.exec(&["ip", "link", "show", "dev", DUMMY])?.status.success() {
        ns.ip(&["link", "add", DUMMY, "type", "dummy"])?;
    }
    let text = ns.check(&["ip", "-4", "-o", "addr", "show", "dev", DUMMY])?;
    let bound = inet_addresses(&text);
    for addr in &bound {
        if !addr.strip_suffix("/32").is_some_and(|ip| vips.contains(ip)) {
            ns.ip(&["addr", "del", addr, "dev", DUMMY])?;
        }
    }
    for vip in vips {
        let addr = format!("{vip}/32");
        if !bound.contains(&addr.as_str()) {
            ns.ip(&["addr", "add", &addr, "dev", DUMMY])?;
        }
    }
    Ok(())
}

/// The sets created (kept when they exist) and their entries made exactly `wanted`.
fn ipsets(ns: &Netns, wanted: &BTreeSet<(String, String)>) -> Result<()> {
    let mut script = String::new();
    for (name, ty, _) in SETS {
        let opts = if ty.starts_with("bitmap") { "range 0-65535" } else { "family inet hashsize 1024 maxelem 65536" };
        let _ = writeln!(script, "create {name} {ty} {opts} -exist");
    }
    feed(ns, &["ipset", "restore"], &script)?;
    let saved = ns.check(&["ipset", "save"])?;
    let have: BTreeSet<(String, String)> = saved
        .lines()
        .filter_map(|l| l.strip_prefix("add "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(set, _)| SETS.iter().any(|s| s.0 == *set))
        .map(|(set, entry)| (set.to_string(), entry.to_string()))
        .collect();
    let mut script = String::new();
    for (set, entry) in have.difference(wanted) {
        let _ = writeln!(script, "del {set} {entry}");
    }
    for (set, entry) in wanted.difference(&have) {
        let _ = writeln!(script, "add {set} {entry} -exist");
    }
    if !script.is_empty() {
        feed(ns, &["ipset", "restore"], &script)?;
    }
    Ok(())
}

/// A real server's key in an `-a` line: (protocol flag, virtual server, real server).
fn real_server(line: &str) -> Option<(&str, &str, &str)> {
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["-a", flag, vs, "-r", rs, ..] => Some((flag, vs, rs)),
        _ => None,
    }
}

/// The `ipvsadm -R` script that makes IPVS's `have` (`ipvsadm -Sn` lines) exactly `wanted`,
/// leaving what matches alone: servers no Service has any more deleted, missing ones added, a
/// real server with other options edited.
pub fn reconcile(have: &BTreeSet<String>, wanted: &BTreeSet<String>) -> String {
    let mut script = String::new();
    let mut deleted_vs = BTreeSet::new();
    for line in have.difference(wanted).filter(|l| l.starts_with("-A ")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        deleted_vs.insert((w[1], w[2]));
        let _ = writeln!(script, "-D {} {}", w[1], w[2]);
    }
    let wanted_rs: BTreeSet<_> = wanted.iter().filter_map(|l| real_server(l)).collect();
    let have_rs: BTreeSet<_> = have.iter().filter_map(|l| real_server(l)).collect();
    for (flag, vs, rs) in have_rs.difference(&wanted_rs) {
        if !deleted_vs.contains(&(*flag, *vs)) {
            let _ = writeln!(script, "-d {flag} {vs} -r {rs}");
        }
    }
    // Virtual servers first: their real servers need them.
    for line in wanted.difference(have).filter(|l| l.starts_with("-A ")) {
        let _ = writeln!(script, "{line}");
    }
    for line in wanted.difference(have).filter(|l| l.starts_with("-a ")) {
        let key = real_server(line).expect("an -a line");
        let edit = have_rs.contains(&key) && !deleted_vs.contains(&(key.0, key.1));
        let _ = writeln!(script, "{}{}", if edit { "-e" } else { "-a" }, &line[2..]);
    }
    script
}

/// IPVS made exactly `wanted` (`ipvsadm -Sn` lines).
fn ipvs(ns: &Netns, wanted: &BTreeSet<String>) -> Result<()> {
    let have: BTreeSet<String> = ns.check(&["ipvsadm", "-Sn"])?.lines().map(|l| l.trim().to_string()).collect();
    let script = reconcile(&have, wanted);
    if !script.is_empty() {
        feed(ns, &["ipvsadm", "-R"], &script)?;
    }
    Ok(())
}

/// kube-proxy's IPVS mode (and kubelet) starting on `ns`, or resyncing there.
pub fn apply(ns: &Netns, kp: &KubeProxy) -> Result<()> {
    available(ns)?;
    sysctls(ns)?;
    let ports = &kp.ports_v4;
    let vips: BTreeSet<String> = ports.iter().map(|p| p.vip.to_string()).collect();
    dummy(ns, &vips)?;
    let entries = set_entries(ports, &kp.node.name);
    ipsets(ns, &entries)?;
    ipvs(ns, &servers(ports, &node_addresses(ns)?))?;
    let (backend, family) = (Backend::Nft, Family::V4);
    kubelet(ns, backend, family)?;
    for (table, from, to, comment) in JUMPS {
        ensure_chain(ns, backend, family, table, to)?;
        let rule = words(&format!("-m comment --comment \"{comment}\" -j {to}"));
        let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
        ensure_rule(ns, backend, family, table, from, true, &rule)?;
    }
    let filled: BTreeSet<&str> = entries.iter().map(|(set, _)| set.as_str()).collect();
    let input = restore_input(&kp.node.cluster_cidr_v4, &filled);
    feed(ns, &[&backend.program(family, "iptables-restore"), "--noflush", "--counters"], &input)?;
    Ok(())
}

/// IPVS's servers, the ipsets, `kube-ipvs0`'s addresses and the iptables rules in `ns`, in an
/// order and form that do not depend on how they were made: servers and set entries sorted
/// (both are listed in hash order), the sets' random hash seeds left out.
pub fn state(ns: &Netns) -> Result<String> {
    let mut servers: Vec<String> = ns.check(&["ipvsadm", "-Sn"])?.lines().map(str::to_string).collect();
    servers.sort();
    let mut out = format!("# ipvsadm -Sn\n{}\n# ipset save\n", servers.join("\n"));
    out.push_str(&normalized_ipsets(&ns.check(&["ipset", "save"])?));
    let text = ns.exec(&["ip", "-4", "-o", "addr", "show", "dev", DUMMY])?;
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let mut addrs = inet_addresses(&text);
    addrs.sort();
    let _ = writeln!(out, "# {DUMMY}: {}", addrs.join(" "));
    out.push_str(&super::iptables::saved(ns, Backend::Nft)?);
    Ok(out)
}

/// `ipset save` with each set's entries sorted and its `bucketsize` and `initval` (a random
/// seed) left out.
fn normalized_ipsets(saved: &str) -> String {
    let mut out = String::new();
    let mut entries: Vec<&str> = Vec::new();
    let flush = |out: &mut String, entries: &mut Vec<&str>| {
        entries.sort();
        for e in entries.drain(..) {
            out.push_str(e);
            out.push('\n');
        }
    };
    for line in saved.lines() {
        if line.starts_with("add ") {
            entries.push(line);
            continue;
        }
        flush(&mut out, &mut entries);
        let mut words = line.split_whitespace().peekable();
        let mut kept = Vec::new();
        while let Some(w) = words.next() {
            if matches!(w, "bucketsize" | "initval") {
                words.next();
            } else {
                kept.push(w);
            }
        }
        out.push_str(&kept.join(" "));
        out.push('\n');
    }
    flush(&mut out, &mut entries);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream_proxy::Ep;

    fn web() -> Vec<SvcPort> {
        let ep = |ip: &str, node: &str| Ep { ip: ip.parse().unwrap(), port: 8080, node: Some(node.into()) };
        vec![
            SvcPort {
                namespace: "default".into(),
                service: "web".into(),
                port_name: "http".into(),
                vip: "172.30.0.10".parse().unwrap(),
                proto: "tcp".into(),
                port: 80,
                node_port: Some(30080),
                endpoints: vec![ep("10.244.1.10", "node1"), ep("10.244.2.10", "node2")],
            },
            SvcPort {
                namespace: "default".into(),
                service: "dns".into(),
                port_name: "dns".into(),
                vip: "172.30.0.20".parse().unwrap(),
                proto: "udp".into(),
                port: 53,
                node_port: None,
                endpoints: vec![],
            },
        ]
    }

    #[test]
    fn sets_hold_clusterips_nodeports_and_local_endpoints() {
        let got = set_entries(&web(), "node1");
        let want: BTreeSet<(String, String)> = [
            ("KUBE-CLUSTER-IP", "172.30.0.10,tcp:80"),
            ("KUBE-CLUSTER-IP", "172.30.0.20,udp:53"),
            ("KUBE-IPVS-IPS", "172.30.0.10"),
            ("KUBE-IPVS-IPS", "172.30.0.20"),
            ("KUBE-LOOP-BACK", "10.244.1.10,tcp:8080,10.244.1.10"),
            ("KUBE-NODE-PORT-TCP", "30080"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_virtual_server_per_clusterip_and_per_node_address_and_nodeport() {
        let ips: Vec<Ipv4Addr> = vec!["10.244.1.1".parse().unwrap(), "192.168.50.11".parse().unwrap()];
        let got = servers(&web(), &ips);
        let vs: Vec<&String> = got.iter().filter(|l| l.starts_with("-A")).collect();
        assert_eq!(
            vs,
            [
                "-A -t 10.244.1.1:30080 -s rr",
                "-A -t 172.30.0.10:80 -s rr",
                "-A -t 192.168.50.11:30080 -s rr",
                "-A -u 172.30.0.20:53 -s rr"
            ]
        );
        assert_eq!(got.iter().filter(|l| l.starts_with("-a")).count(), 6, "two real servers on each of three");
        assert!(got.contains("-a -t 192.168.50.11:30080 -r 10.244.2.10:8080 -m -w 1"));
    }

    #[test]
    fn iptables_rules_match_only_filled_sets() {
        let entries = set_entries(&web(), "node1");
        let filled: BTreeSet<&str> = entries.iter().map(|(s, _)| s.as_str()).collect();
        let text = restore_input("10.244.0.0/16", &filled);
        assert!(text.contains("-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ"));
        assert!(text.contains("-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ"));
        assert!(text.contains("--match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE"));
        assert!(!text.contains("KUBE-NODE-PORT-UDP"), "no UDP NodePort, no rule");
        assert!(!text.contains("-j KUBE-LOAD-BALANCER\n"), "no load balancer, no rule");
        assert!(text.find("*nat").unwrap() < text.find("*filter").unwrap(), "nat first, as upstream writes it");
    }

    fn lines(ls: &[&str]) -> BTreeSet<String> {
        ls.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn reconciling_leaves_what_matches_and_fixes_the_rest() {
        let wanted = lines(&[
            "-A -t 172.30.0.10:80 -s rr",
            "-a -t 172.30.0.10:80 -r 10.244.1.10:8080 -m -w 1",
            "-a -t 172.30.0.10:80 -r 10.244.2.10:8080 -m -w 1",
            "-A -u 172.30.0.20:53 -s rr",
        ]);
        assert_eq!(reconcile(&wanted, &wanted), "", "a resync of the same state writes nothing");
        let have = lines(&[
            "-A -t 172.30.0.10:80 -s rr",
            "-a -t 172.30.0.10:80 -r 10.244.1.10:8080 -m -w 0",
            "-a -t 172.30.0.10:80 -r 10.244.9.9:8080 -m -w 1",
            "-A -t 172.30.0.99:80 -s rr",
            "-a -t 172.30.0.99:80 -r 10.244.1.10:8080 -m -w 1",
        ]);
        let script = reconcile(&have, &wanted);
        assert_eq!(
            script.lines().collect::<Vec<_>>(),
            [
                "-D -t 172.30.0.99:80",
                "-d -t 172.30.0.10:80 -r 10.244.9.9:8080",
                "-A -u 172.30.0.20:53 -s rr",
                "-e -t 172.30.0.10:80 -r 10.244.1.10:8080 -m -w 1",
                "-a -t 172.30.0.10:80 -r 10.244.2.10:8080 -m -w 1",
            ]
        );
        assert_eq!(reconcile(&have, &BTreeSet::new()).lines().count(), 2, "deleting a server takes its real servers");
    }

    #[test]
    fn ipsets_normalized_leave_out_seeds_and_sort_entries() {
        let saved = "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x8e099af9\n\
                     add KUBE-CLUSTER-IP 172.30.0.20,udp:53\nadd KUBE-CLUSTER-IP 172.30.0.10,tcp:80\n\
                     create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-TCP 30080\n";
        assert_eq!(
            normalized_ipsets(saved),
            "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n\
             add KUBE-CLUSTER-IP 172.30.0.10,tcp:80\nadd KUBE-CLUSTER-IP 172.30.0.20,udp:53\n\
             create KUBE-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-NODE-PORT-TCP 30080\n"
        );
    }

    #[test]
    fn addresses_of_ip_addr_show() {
        let text = "5: kube-ipvs0    inet 172.30.0.10/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever\n5: kube-ipvs0    inet 172.30.0.20/32 scope global kube-ipvs0\n";
        assert_eq!(inet_addresses(text), ["172.30.0.10/32", "172.30.0.20/32"]);
    }
}
