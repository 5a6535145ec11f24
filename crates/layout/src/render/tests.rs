use super::*;
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{Cidr, ProxyConfig, build_model};

/// Services (a third dual-stack, so that the split falls among the IPv4 ports), some with
/// NodePorts and external IPs, whose endpoints share pods (so that shared elements cross the
/// split), and a few without endpoints.
fn model(n: usize) -> ProxyModel {
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for i in 0..n {
        let name = format!("svc-{i}");
        services.push(Service {
            namespace: "ns".into(),
            name: name.clone(),
            service_type: if i % 7 == 0 { "NodePort".into() } else { String::new() },
            cluster_ips: std::iter::once(format!("172.30.{}.{}", i / 250, i % 250 + 1))
                .chain((i % 3 == 0).then(|| format!("fd00::{:x}", i + 1)))
                .collect(),
            external_ips: if i % 11 == 0 { vec![format!("192.0.2.{}", i % 200 + 1)] } else { Vec::new() },
            ports: vec![ServicePortSpec {
                name: "http".into(),
                protocol: if i % 5 == 0 { "UDP".into() } else { "TCP".into() },
                port: 80,
                node_port: (i % 7 == 0).then_some(30000 + (i % 2000) as i32),
            }],
            ..Service::default()
        });
        if i % 13 == 0 {
            continue;
        }
        for family in ["IPv4", "IPv6"] {
            let addr = |k: usize| match family {
                "IPv4" => format!("10.1.{}.{}", (i * 3 + k) % 40, k + 1),
                _ => format!("fd01::{:x}", (i * 3 + k) % 2000 + 1),
            };
            slices.push(EndpointSlice {
                namespace: "ns".into(),
                name: format!("{name}-{family}"),
                service_name: name.clone(),
                address_type: family.into(),
                ports: vec![EndpointPort {
                    name: "http".into(),
                    protocol: services[i].ports[0].protocol.clone(),
                    port: Some(8080),
                }],
                endpoints: (0..1 + i % 4)
                    .map(|k| Endpoint { addresses: vec![addr(k)], ..Endpoint::default() })
                    .collect(),
                trigger_time: None,
            });
        }
    }
    let node = Node {
        name: "n".into(),
        addresses: vec![("InternalIP".into(), "192.168.0.2".into()), ("InternalIP".into(), "fd02::2".into())],
        ..Node::default()
    };
    let config = ProxyConfig {
        cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap(), Cidr::parse_tolerant("fd01::/64").unwrap()],
        ..ProxyConfig::default()
    };
    let out = build_model(config, "n", Some(&node), &[], &services, &slices);
    out.model
}

#[test]
fn two_threads_render_what_one_renders() {
    let model = model(3000);
    let opts = RenderOptions::default();
    let (one, one_counts) = render_split(&model, &opts, true, false);
    let (two, two_counts) = render_split(&model, &opts, true, true);
    assert_eq!(one, two);
    assert_eq!(one_counts.shared, two_counts.shared);
    assert_eq!(one_counts.classes, two_counts.classes);
    assert_eq!(one_counts.maps, two_counts.maps);
    assert!(one_counts.shared.values().any(|m| m.len() > 0), "the model shares elements");
    assert!(one.sets.values().map(|s| s.elements.len()).sum::<usize>() > 10_000);
}

#[test]
fn the_fast_path_adds_a_bare_flowtable_and_one_rule_that_reads_back_unchanged() {
    let m = model(20);
    let plain = render(&m, &RenderOptions::default());
    assert!(plain.flowtables.is_empty());
    let rs = render(&m, &RenderOptions { fast_path: true, ..RenderOptions::default() });
    let listing = verdict_nft::text::listing(&rs);
    assert!(listing.contains("\tflowtable fastpath {\n\t\thook ingress priority filter\n\t}\n"), "{listing}");
    let forward = &rs.chains[names::FILTER_FORWARD];
    let offload = forward.rules.last().expect("the offload rule");
    assert_eq!(
        verdict_nft::text::rule_text(offload),
        "ct state established ct status dnat meta l4proto { tcp, udp } flow add @fastpath comment \"offload established Service connections\""
    );
    assert_eq!(forward.rules.len(), plain.chains[names::FILTER_FORWARD].rules.len() + 1, "one rule more, last");
    assert_eq!(verdict_nft::round_trip(offload).unwrap(), *offload);
    // Everything else is the same table.
    let mut without = rs.clone();
    without.flowtables.clear();
    without.chains.get_mut(names::FILTER_FORWARD).unwrap().rules.pop();
    assert!(without.equivalent(&plain));
}

#[test]
fn a_flowtable_is_created_bare_keeps_the_kernels_devices_and_goes_with_its_rule() {
    let m = model(5);
    let fast = render(&m, &RenderOptions { fast_path: true, ..RenderOptions::default() });
    let plain = render(&m, &RenderOptions::default());
    let on = verdict_nft::diff(Some(&plain), &fast);
    let ops: Vec<String> = on.transaction.ops.iter().map(|o| o.describe()).collect();
    let add = ops.iter().position(|o| o == "add flowtable fastpath").expect("created");
    let rule = ops.iter().position(|o| o.contains("flow add @fastpath")).expect("the rule");
    assert!(add < rule, "the flowtable before the rule that names it: {ops:?}");

    let mut kernel = fast.clone();
    kernel.flowtables.get_mut("fastpath").unwrap().devices = ["eth0".to_string()].into_iter().collect();
    let again = verdict_nft::diff(Some(&kernel), &fast);
    assert!(again.transaction.is_empty(), "devices are not the diff's: {}", again.transaction);
    assert_eq!(again.result.flowtables["fastpath"].devices.len(), 1, "the result keeps what the kernel holds");

    let off = verdict_nft::diff(Some(&kernel), &plain);
    let ops: Vec<String> = off.transaction.ops.iter().map(|o| o.describe()).collect();
    let flush = ops.iter().position(|o| o == "flush chain filter-forward").expect("the rule goes");
    let delete = ops.iter().position(|o| o == "delete flowtable fastpath").expect("deleted");
    assert!(flush < delete, "the rule that names it goes first: {ops:?}");
}

/// The rules iptables mode's kept behaviours add, as nft prints them.
const KEPT_RULES: [(&str, &str); 4] = [
    (
        names::FILTER_PREROUTING_PRE_DNAT,
        "iifname != \"lo\" ip daddr 127.0.0.0/8 drop comment \"127.0.0.0/8 only from the node itself (CVE-2020-8558)\"",
    ),
    (
        names::NAT_OUTPUT,
        "ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports comment \"localhost NodePorts\"",
    ),
    (names::FILTER_FORWARD, "ct state invalid drop comment \"conntrack INVALID (iptables mode's KUBE-FORWARD)\""),
    (names::NODEPORT_ENDPOINTS_CHECK, "ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports"),
];

fn kept(m: &ProxyModel) -> ProxyModel {
    let mut m = m.clone();
    m.config.localhost_nodeports = true;
    m.config.drop_ct_invalid = true;
    m
}

#[test]
fn kept_behaviours_add_their_rules_which_read_back_unchanged() {
    let plain_model = model(50);
    let plain = render(&plain_model, &RenderOptions::default());
    let rs = render(&kept(&plain_model), &RenderOptions::default());
    for (chain, rule) in KEPT_RULES {
        let texts: Vec<String> = rs.chains[chain].rules.iter().map(verdict_nft::text::rule_text).collect();
        assert!(texts.iter().any(|t| t == rule), "{chain} lacks {rule}: {texts:?}");
        let plain_texts: Vec<String> = plain.chains[chain].rules.iter().map(verdict_nft::text::rule_text).collect();
        assert!(!plain_texts.iter().any(|t| t == rule), "{chain} has {rule} without the options");
    }
    // Before anything else: the guard before the firewall, the INVALID drop before the checks.
    for chain in [names::FILTER_PREROUTING_PRE_DNAT, names::FILTER_FORWARD] {
        assert_eq!(rs.chains[chain].rules.len(), plain.chains[chain].rules.len() + 1);
        assert_eq!(rs.chains[chain].rules[1..], plain.chains[chain].rules[..], "{chain}: first, the rest unchanged");
    }
    for chain in rs.chains.values() {
        for rule in &chain.rules {
            assert_eq!(verdict_nft::round_trip(rule).unwrap(), *rule, "{}", verdict_nft::text::rule_text(rule));
        }
    }
    // Switching them on is a handful of rules, not a rewrite.
    let plan = verdict_nft::diff(Some(&plain), &rs);
    let ops: Vec<String> = plan.transaction.ops.iter().map(|o| o.describe()).collect();
    assert!(ops.iter().all(|o| !o.contains("element")), "no element changes: {ops:?}");
}

#[test]
fn localhost_nodeports_are_ipv4_only_and_counted_like_other_nodeports() {
    let mut m = kept(&model(50));
    m.config.service_counters = verdict_model::ServiceCounters::All;
    let rs = render(&m, &RenderOptions::default());
    let listing = verdict_nft::text::listing(&rs);
    assert!(!listing.contains("daddr ::1"), "nothing for IPv6 loopback:\n{listing}");
    let reject: Vec<String> = rs.chains[names::REJECT_CHAIN].rules.iter().map(verdict_nft::text::rule_text).collect();
    assert!(
        reject.iter().any(|r| r == "ip daddr 127.0.0.0/8 meta l4proto . th dport @rejected-nodeports"),
        "a localhost NodePort without endpoints is counted as rejected: {reject:?}"
    );
    // Only the node's own connections are DNATed to 127.0.0.0/8: prerouting's dispatch keeps
    // its loopback exclusion.
    let services: Vec<String> = rs.chains[names::SERVICES].rules.iter().map(verdict_nft::text::rule_text).collect();
    assert!(services.iter().all(|r| !r.contains("ip daddr 127.0.0.0/8 ")), "{services:?}");
}

#[test]
fn the_loopback_guard_comes_alone_where_route_localnet_was_left_on() {
    let plain_model = model(5);
    let mut guarded = plain_model.clone();
    guarded.config.loopback_guard = true;
    let rs = render(&guarded, &RenderOptions::default());
    let plain = render(&plain_model, &RenderOptions::default());
    let texts = |rs: &Ruleset, chain: &str| -> Vec<String> {
        rs.chains[chain].rules.iter().map(verdict_nft::text::rule_text).collect()
    };
    let (guard_chain, guard) = KEPT_RULES[0];
    assert_eq!(texts(&rs, guard_chain)[0], guard, "the guard first");
    assert!(!texts(&plain, guard_chain).contains(&guard.to_string()));
    // The guard only: no localhost NodePorts.
    for (chain, rule) in &KEPT_RULES[1..] {
        assert!(!texts(&rs, chain).contains(&rule.to_string()), "{chain} has {rule}");
    }
}
