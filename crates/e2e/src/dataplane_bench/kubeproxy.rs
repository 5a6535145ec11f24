//! kube-proxy's iptables-mode ruleset for the benchmark's Services, as `iptables-restore` input
//! shaped the way upstream's proxier (`pkg/proxy/iptables/proxier.go`) writes it: the same
//! chains, the same rule order and matches, chain names hashed the same way (SHA-256, base32,
//! 16 characters). Only what the benchmark's Services use is written: ClusterIP and NodePort
//! with `externalTrafficPolicy: Cluster`, no session affinity, no load balancers.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write;
use verdict_model::source::{EndpointSlice, Service};

/// One Service port as the proxier sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvcPort {
    /// `namespace/name:port` (upstream's ServicePortName).
    pub name: String,
    /// The ClusterIP.
    pub vip: String,
    /// `tcp` or `udp`.
    pub proto: String,
    /// The Service port.
    pub port: u16,
    /// The NodePort, if any.
    pub node_port: Option<u16>,
    /// Ready endpoints, `ip:port`.
    pub endpoints: Vec<String>,
}

/// The Service ports of these objects (IPv4, ready endpoints, as upstream's change tracker
/// would hand them to the proxier).
pub fn ports(services: &[Service], slices: &[EndpointSlice]) -> Vec<SvcPort> {
    let mut by_service: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
    for s in slices.iter().filter(|s| s.address_type == "IPv4") {
        by_service.entry((&s.namespace, &s.service_name)).or_default().push(s);
    }
    let mut out = Vec::new();
    for svc in services {
        let Some(vip) = svc.cluster_ips.first() else { continue };
        for p in &svc.ports {
            let mut endpoints = Vec::new();
            for slice in by_service.get(&(svc.namespace.as_str(), svc.name.as_str())).into_iter().flatten() {
                let Some(port) = slice.ports.iter().find(|sp| sp.name == p.name).and_then(|sp| sp.port) else {
                    continue;
                };
                for ep in slice.endpoints.iter().filter(|e| e.ready != Some(false)) {
                    if let Some(ip) = ep.addresses.first() {
                        endpoints.push(format!("{ip}:{port}"));
                    }
                }
            }
            out.push(SvcPort {
                name: format!("{}/{}:{}", svc.namespace, svc.name, p.name),
                vip: vip.clone(),
                proto: p.protocol.to_lowercase(),
                port: p.port as u16,
                node_port: p.node_port.map(|n| n as u16),
                endpoints,
            });
        }
    }
    out
}

/// Upstream's `portProtoHash`: base32 of SHA-256, first 16 characters.
fn hash(input: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(input.as_bytes());
    let (mut out, mut acc, mut bits) = (String::with_capacity(16), 0u32, 0u32);
    for byte in digest.iter() {
        acc = (acc << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 && out.len() < 16 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
        acc &= (1 << bits) - 1;
        if out.len() == 16 {
            break;
        }
    }
    out
}

fn svc_chain(p: &SvcPort) -> String {
    format!("KUBE-SVC-{}", hash(&format!("{}{}", p.name, p.proto)))
}

fn ext_chain(p: &SvcPort) -> String {
    format!("KUBE-EXT-{}", hash(&format!("{}{}", p.name, p.proto)))
}

fn sep_chain(p: &SvcPort, ep: &str) -> String {
    format!("KUBE-SEP-{}", hash(&format!("{}{}{}", p.name, p.proto, ep)))
}

/// The `iptables-restore` input for `ports`, with `cluster_cidr` as the local-traffic detector
/// (`--cluster-cidr`). Base-chain jumps are included, as kube-proxy ensures them.
pub fn restore_input(ports: &[SvcPort], cluster_cidr: &str) -> String {
    let mut s = String::with_capacity(ports.len() * 2048);
    filter_table(&mut s);
    s.push_str(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n",
    );
    for c in ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    for p in ports.iter().filter(|p| !p.endpoints.is_empty()) {
        if p.node_port.is_some() {
            let _ = writeln!(s, ":{} - [0:0]", ext_chain(p));
        }
        let _ = writeln!(s, ":{} - [0:0]", svc_chain(p));
        for ep in &p.endpoints {
            let _ = writeln!(s, ":{} - [0:0]", sep_chain(p, ep));
        }
    }
    s.push_str("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n");
    s.push_str("-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n");
    s.push_str("-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n");
    s.push_str("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n");
    s.push_str("-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n");
    s.push_str(
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
    );
    s.push_str("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n");
    for p in ports.iter().filter(|p| !p.endpoints.is_empty()) {
        let (svc, proto, name) = (svc_chain(p), &p.proto, &p.name);
        let _ = writeln!(
            s,
            "-A KUBE-SERVICES -m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {}/32 --dport {} -j {svc}",
            p.vip, p.port
        );
        if let Some(np) = p.node_port {
            let ext = ext_chain(p);
            let _ = writeln!(
                s,
                "-A KUBE-NODEPORTS -m comment --comment {name} -m {proto} -p {proto} --dport {np} -j {ext}"
            );
            let _ = writeln!(
                s,
                "-A {ext} -m comment --comment \"masquerade traffic for {name} external destinations\" -j KUBE-MARK-MASQ"
            );
            let _ = writeln!(s, "-A {ext} -j {svc}");
        }
        let _ = writeln!(
            s,
            "-A {svc} -m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {}/32 --dport {} ! -s {cluster_cidr} -j KUBE-MARK-MASQ",
            p.vip, p.port
        );
        let n = p.endpoints.len();
        for (i, ep) in p.endpoints.iter().enumerate() {
            let sep = sep_chain(p, ep);
            if i + 1 < n {
                let probability = 1.0 / (n - i) as f64;
                let _ = writeln!(
                    s,
                    "-A {svc} -m comment --comment \"{name} -> {ep}\" -m statistic --mode random --probability {probability:.10} -j {sep}"
                );
            } else {
                let _ = writeln!(s, "-A {svc} -m comment --comment \"{name} -> {ep}\" -j {sep}");
            }
        }
        for ep in &p.endpoints {
            let sep = sep_chain(p, ep);
            let ip = ep.rsplit_once(':').map_or(ep.as_str(), |(ip, _)| ip);
            let _ = writeln!(s, "-A {sep} -m comment --comment {name} -s {ip}/32 -j KUBE-MARK-MASQ");
            let _ =
                writeln!(s, "-A {sep} -m comment --comment {name} -m {proto} -p {proto} -j DNAT --to-destination {ep}");
        }
    }
    s.push_str(
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n",
    );
    s.push_str("COMMIT\n");
    s
}

/// The filter table: upstream's forwarding rules and base-chain jumps (the Service chains in
/// it only reject Services without endpoints, which the benchmark has none of).
fn filter_table(s: &mut String) {
    s.push_str("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for c in ["KUBE-NODEPORTS", "KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-PROXY-FIREWALL"] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    let new = "-m conntrack --ctstate NEW";
    for (chain, rule) in [
        ("INPUT", format!("{new} -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL")),
        ("INPUT", "-m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS".into()),
        ("INPUT", format!("{new} -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES")),
        ("FORWARD", format!("{new} -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL")),
        ("FORWARD", "-m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD".into()),
        ("FORWARD", format!("{new} -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")),
        ("FORWARD", format!("{new} -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES")),
        ("OUTPUT", format!("{new} -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL")),
        ("OUTPUT", format!("{new} -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")),
        ("KUBE-FORWARD", "-m conntrack --ctstate INVALID -j DROP".into()),
        ("KUBE-FORWARD", "-m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT".into()),
        (
            "KUBE-FORWARD",
            "-m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
                .into(),
        ),
    ] {
        let _ = writeln!(s, "-A {chain} {rule}");
    }
    s.push_str("COMMIT\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn two() -> Vec<SvcPort> {
        let ep = |a: &str| a.to_string();
        vec![
            SvcPort {
                name: "ns1/svc1:p80".into(),
                vip: "172.30.0.41".into(),
                proto: "tcp".into(),
                port: 80,
                node_port: None,
                endpoints: vec![ep("10.180.0.1:80"), ep("10.180.0.2:80"), ep("10.180.0.3:80")],
            },
            SvcPort {
                name: "ns2/svc2:p80".into(),
                vip: "172.30.0.42".into(),
                proto: "udp".into(),
                port: 53,
                node_port: Some(30053),
                endpoints: vec![ep("10.180.1.1:5353")],
            },
        ]
    }

    #[test]
    fn chain_names_are_upstreams() {
        // From upstream's proxier_test.go: ns1/svc1:p80 over TCP and its endpoint 10.180.0.1:80.
        let p = SvcPort { name: "ns1/svc1:p80".into(), proto: "tcp".into(), ..two()[0].clone() };
        assert_eq!(svc_chain(&p), "KUBE-SVC-XPGD46QRK7WJZT7O");
        assert_eq!(sep_chain(&p, "10.180.0.1:80"), "KUBE-SEP-SXIVWICOYRO3J4NJ");
    }

    /// Parsed back: every chain jumped to is declared and has rules, every declared chain is
    /// used, the probabilities make a uniform choice, and each endpoint is DNATed to once.
    #[test]
    fn two_services_parse_back() {
        let text = restore_input(&two(), "10.244.0.0/16");
        let nat = text.split("*nat\n").nth(1).expect("a nat table");
        let (mut declared, mut jumped, mut with_rules) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let mut dnat = Vec::new();
        let mut probabilities: HashMap<String, Vec<f64>> = HashMap::new();
        for line in nat.lines() {
            if let Some(decl) = line.strip_prefix(':') {
                declared.insert(decl.split(' ').next().unwrap().to_string());
            } else if let Some(rule) = line.strip_prefix("-A ") {
                let chain = rule.split(' ').next().unwrap().to_string();
                with_rules.insert(chain.clone());
                let target = rule.rsplit_once("-j ").unwrap().1.split(' ').next().unwrap();
                if target.starts_with("KUBE-") {
                    jumped.insert(target.to_string());
                }
                if let Some(to) = rule.split("--to-destination ").nth(1) {
                    dnat.push(to.to_string());
                }
                if chain.starts_with("KUBE-SVC-") && target.starts_with("KUBE-SEP-") {
                    let p = rule
                        .split("--probability ")
                        .nth(1)
                        .map_or(1.0, |p| p.split(' ').next().unwrap().parse().unwrap());
                    probabilities.entry(chain).or_default().push(p);
                }
            } else {
                assert!(line == "COMMIT" || line.is_empty(), "unexpected line {line:?}");
            }
        }
        let builtin: BTreeSet<String> = ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"].map(String::from).into();
        assert!(jumped.is_subset(&declared), "jumped to but not declared: {:?}", jumped.difference(&declared));
        assert!(jumped.is_subset(&with_rules), "jumped to but empty: {:?}", jumped.difference(&with_rules));
        let unused: Vec<_> = declared.difference(&jumped).filter(|c| !builtin.contains(*c)).collect();
        assert!(unused.is_empty(), "declared but never jumped to: {unused:?}");
        dnat.sort();
        assert_eq!(dnat, ["10.180.0.1:80", "10.180.0.2:80", "10.180.0.3:80", "10.180.1.1:5353"]);
        // 3 endpoints: 1/3, then 1/2 of the rest, then the rest: each gets 1/3.
        let mut chosen = Vec::new();
        for ps in probabilities.values().filter(|ps| ps.len() == 3) {
            let mut left = 1.0;
            for p in ps {
                chosen.push(left * p);
                left *= 1.0 - p;
            }
        }
        assert_eq!(chosen.len(), 3);
        assert!(chosen.iter().all(|c| (c - 1.0 / 3.0).abs() < 1e-9), "{chosen:?}");
        assert!(
            nat.contains(
                "-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m udp -p udp --dport 30053 -j KUBE-EXT-"
            )
        );
    }
}
