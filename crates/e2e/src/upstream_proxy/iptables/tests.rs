use super::*;
use crate::upstream_proxy::Ep;
use std::collections::HashMap;

fn ep(a: &str) -> Ep {
    let (ip, port) = a.rsplit_once(':').unwrap();
    Ep { ip: ip.trim_matches(['[', ']']).parse().unwrap(), port: port.parse().unwrap(), node: None }
}

fn port(name: &str, vip: &str, proto: &str, port: u16, node_port: Option<u16>, eps: &[&str]) -> SvcPort {
    let (ns, rest) = name.split_once('/').unwrap();
    let (svc, port_name) = rest.split_once(':').unwrap();
    SvcPort {
        namespace: ns.into(),
        service: svc.into(),
        port_name: port_name.into(),
        vip: vip.parse().unwrap(),
        proto: proto.into(),
        port,
        node_port,
        endpoints: eps.iter().map(|e| ep(e)).collect(),
    }
}

fn two() -> Vec<SvcPort> {
    vec![
        port("ns1/svc1:p80", "172.30.0.41", "tcp", 80, None, &["10.180.0.1:80", "10.180.0.2:80", "10.180.0.3:80"]),
        port("ns2/svc2:p80", "172.30.0.42", "udp", 53, Some(30053), &["10.180.1.1:5353"]),
        port("ns3/none:p80", "172.30.0.43", "tcp", 80, Some(30081), &[]),
    ]
}

#[test]
fn chain_names_are_upstreams() {
    // From upstream's proxier_test.go: ns1/svc1:p80 over TCP and its endpoint 10.180.0.1:80.
    let p = &two()[0];
    assert_eq!(svc_chain(p), "KUBE-SVC-XPGD46QRK7WJZT7O");
    assert_eq!(sep_chain(p, &ep("10.180.0.1:80")), "KUBE-SEP-SXIVWICOYRO3J4NJ");
}

/// A table of restore input: declared chains, and (chain, target, rule) of each `-A` line.
fn parse(text: &str, table: &str) -> (BTreeSet<String>, Vec<(String, String, String)>) {
    let body = text.split(&format!("*{table}\n")).nth(1).expect("the table").split("COMMIT").next().unwrap();
    let (mut declared, mut rules) = (BTreeSet::new(), Vec::new());
    for line in body.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            declared.insert(decl.split(' ').next().unwrap().to_string());
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let chain = rule.split(' ').next().unwrap().to_string();
            let target = rule.rsplit_once("-j ").unwrap().1.split(' ').next().unwrap().to_string();
            rules.push((chain, target, rule.to_string()));
        } else {
            assert!(line.is_empty(), "unexpected line {line:?}");
        }
    }
    (declared, rules)
}

/// Parsed back: every chain jumped to is declared and has rules, every declared chain is
/// used, the probabilities make a uniform choice, each endpoint is DNATed to once, and the
/// Service without endpoints is rejected in the filter table only.
#[test]
fn three_services_parse_back() {
    let text = restore_input(&two(), "10.244.0.0/16", Family::V4);
    let (declared, rules) = parse(&text, "nat");
    let with_rules: BTreeSet<String> = rules.iter().map(|r| r.0.clone()).collect();
    let jumped: BTreeSet<String> = rules.iter().map(|r| r.1.clone()).filter(|t| t.starts_with("KUBE-")).collect();
    assert!(jumped.is_subset(&declared), "jumped to but not declared: {:?}", jumped.difference(&declared));
    assert!(jumped.is_subset(&with_rules), "jumped to but empty: {:?}", jumped.difference(&with_rules));
    let top: BTreeSet<String> = ["KUBE-SERVICES", "KUBE-POSTROUTING"].map(String::from).into();
    let unused: Vec<_> = declared.difference(&jumped).filter(|c| !top.contains(*c)).collect();
    assert!(unused.is_empty(), "declared but never jumped to: {unused:?}");
    let mut dnat: Vec<&str> = rules.iter().filter_map(|r| r.2.split("--to-destination ").nth(1)).collect();
    dnat.sort();
    assert_eq!(dnat, ["10.180.0.1:80", "10.180.0.2:80", "10.180.0.3:80", "10.180.1.1:5353"]);
    let mut probabilities: HashMap<&str, Vec<f64>> = HashMap::new();
    for (chain, target, rule) in &rules {
        if chain.starts_with("KUBE-SVC-") && target.starts_with("KUBE-SEP-") {
            let p = rule.split("--probability ").nth(1).map_or(1.0, |p| p.split(' ').next().unwrap().parse().unwrap());
            probabilities.entry(chain).or_default().push(p);
        }
    }
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
        text.contains("-A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m udp -p udp --dport 30053 -j KUBE-EXT-")
    );
    assert!(!text.contains("ns3/none:p80 cluster IP"), "no nat rule for a Service without endpoints");
    let (_, filter) = parse(&text, "filter");
    let rejects: Vec<&String> = filter.iter().filter(|r| r.1 == "REJECT").map(|r| &r.2).collect();
    assert_eq!(rejects.len(), 2, "ClusterIP and NodePort of the Service without endpoints: {rejects:#?}");
    assert!(rejects[0].contains("\"ns3/none:p80 has no endpoints\"") && rejects[0].contains("-d 172.30.0.43/32"));
    assert!(rejects[1].starts_with("KUBE-EXTERNAL-SERVICES") && rejects[1].contains("--dport 30081"));
    // The localnet rule is kube-proxy's copy of kubelet's, IPv4 only; the mark is 0x4000.
    assert!(filter.iter().any(|r| r.0 == "KUBE-FIREWALL" && r.2.contains("block incoming localnet")));
    assert!(text.contains("-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000"));
    // No built-in chain is named: a --noflush restore keeps their rules.
    assert!(!text.contains(":INPUT") && !text.contains("-A PREROUTING"));
}

#[test]
fn ipv6_rules_use_ipv6_masks_and_brackets() {
    let p = vec![port("ns/web:http", "fd00:96::10", "tcp", 80, Some(30080), &["[fd00:10:244:1::10]:8080"])];
    let text = restore_input(&p, "fd00:10:244::/48", Family::V6);
    assert!(text.contains("-d fd00:96::10/128 --dport 80"), "{text}");
    assert!(text.contains("-j DNAT --to-destination [fd00:10:244:1::10]:8080"), "{text}");
    assert!(text.contains("-s fd00:10:244:1::10/128 -j KUBE-MARK-MASQ"), "{text}");
    assert!(text.contains("--dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS"), "{text}");
    assert!(!text.contains("KUBE-FIREWALL"), "no localnet rule for IPv6");
}

#[test]
fn the_standalone_input_has_the_jumps_before_the_first_rule_of_each_table() {
    let text = standalone_restore_input(&two(), "10.244.0.0/16");
    for table in ["filter", "nat"] {
        let body = text.split(&format!("*{table}\n")).nth(1).unwrap().split("COMMIT").next().unwrap();
        let first_rule = body.lines().position(|l| l.starts_with("-A ")).unwrap();
        let last_decl = body.lines().collect::<Vec<_>>().iter().rposition(|l| l.starts_with(':')).unwrap();
        assert!(last_decl < first_rule, "{table}: a declaration after a rule");
        let jumps: Vec<&str> = body.lines().filter(|l| l.starts_with("-A ") && !l.starts_with("-A KUBE-")).collect();
        let want = JUMPS.iter().filter(|j| j.0 == table).count();
        assert_eq!(jumps.len(), want, "{table}: {jumps:#?}");
    }
    assert!(text.contains("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"));
    assert!(text.contains(
        "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL"
    ));
}

#[test]
fn words_group_quoted_comments() {
    assert_eq!(
        words("-m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"),
        ["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]
    );
}
