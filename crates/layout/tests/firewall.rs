//! `loadBalancerSourceRanges` that cannot be applied fail closed (issue 23): the load balancer
//! IP still goes through the Service's firewall chain, which allows no source and drops.

use verdict_layout::{RenderOptions, render};
use verdict_model::source::{LoadBalancerIngress, Service, ServicePortSpec};
use verdict_model::{ProxyConfig, build_model};
use verdict_nft::text;

fn listing(ranges: &[&str]) -> String {
    let svc = Service {
        namespace: "ns".into(),
        name: "lb".into(),
        service_type: "LoadBalancer".into(),
        cluster_ips: vec!["172.30.0.1".into()],
        ports: vec![ServicePortSpec { name: "http".into(), protocol: "TCP".into(), port: 80, node_port: Some(30080) }],
        load_balancer_ingress: vec![LoadBalancerIngress { ip: "198.51.100.4".into(), ip_mode: None }],
        load_balancer_source_ranges: ranges.iter().map(|s| s.to_string()).collect(),
        ..Service::default()
    };
    let out = build_model(ProxyConfig::default(), "n", None, &[], &[svc], &[]);
    text::listing(&render(&out.model, &RenderOptions::default()))
}

/// The firewall chain of `ns/lb`, as listed (`firewall-check`, shared, is not it).
fn firewall_chain(listing: &str) -> Option<String> {
    let start = listing.find("chain firewall-")?;
    let start = start + listing[start..].find("ns/lb/")? - "chain firewall-XXXXXXXX-".len();
    let end = start + listing[start..].find("\n\t}")?;
    Some(listing[start..end].to_string())
}

#[test]
fn a_range_that_cannot_be_applied_drops_every_source() {
    for ranges in [&["::ffff:10.0.0.0/104"][..], &["10.0.0.0/8", "garbage"][..]] {
        let listing = listing(ranges);
        let chain = firewall_chain(&listing).unwrap_or_else(|| panic!("{ranges:?}: no firewall chain:\n{listing}"));
        assert!(chain.contains("drop"), "{chain}");
        assert!(!chain.contains("saddr"), "{ranges:?}: no source is allowed:\n{chain}");
        let filtered = listing.lines().any(|l| l.contains("198.51.100.4 . tcp . 80") && l.contains("goto firewall-"));
        assert!(filtered, "{ranges:?}: the LB IP is filtered:\n{listing}");
    }
}

#[test]
fn a_good_range_allows_its_sources_and_no_range_no_firewall() {
    let chain = firewall_chain(&listing(&["10.0.0.0/8"])).expect("a firewall chain");
    assert!(chain.contains("ip saddr 10.0.0.0/8 return"), "{chain}");
    assert!(firewall_chain(&listing(&[])).is_none());
}
