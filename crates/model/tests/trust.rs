//! Issue 23: no Service can take another's traffic by what it writes. Ownership follows trust
//! (ClusterIP, then load balancer IP, then externalIP; names only within a kind), special and
//! IPv4-mapped addresses are refused, a source range that cannot be applied closes the
//! firewall, and one object's size is capped. Each rule is checked in the batch build and in
//! the incremental cache, Services added in either order.

use std::net::IpAddr;
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, LoadBalancerIngress, Service, ServicePortSpec};
use verdict_model::{
    BuildOutput, ModelCache, Problem, Protocol, ProxyConfig, ServicePort, ServicePortName, build_model,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn service(ns: &str, name: &str, cluster_ip: &str, port: i32, protocol: &str) -> Service {
    Service {
        namespace: ns.into(),
        name: name.into(),
        cluster_ips: vec![cluster_ip.into()],
        ports: vec![ServicePortSpec { name: "p".into(), protocol: protocol.into(), port, node_port: None }],
        ..Service::default()
    }
}

fn load_balancer(mut svc: Service, ingress: &[&str]) -> Service {
    svc.service_type = "LoadBalancer".into();
    svc.ports[0].node_port = Some(30000 + svc.ports[0].port);
    svc.load_balancer_ingress =
        ingress.iter().map(|ip| LoadBalancerIngress { ip: ip.to_string(), ip_mode: None }).collect();
    svc
}

fn port_of<'a>(out: &'a BuildOutput, svc: &Service) -> &'a ServicePort {
    let protocol = Protocol::parse_k8s(&svc.ports[0].protocol).unwrap();
    let name = ServicePortName::new(&svc.namespace, &svc.name, "p", protocol);
    out.model.services.get(&name).unwrap_or_else(|| panic!("{name} is not in the model: {:#?}", out.problems))
}

fn problems_of<'a>(out: &'a BuildOutput, svc: &Service) -> Vec<&'a Problem> {
    out.problems.iter().filter(|p| p.object.namespace == svc.namespace && p.object.name == svc.name).collect()
}

/// The batch build, and the incremental cache fed the Services in the order given and in
/// reverse (each rebuilt after every Service, so that ownership settles one Service at a
/// time), then with the first removed and re-added: all must agree.
fn build(services: &[Service]) -> BuildOutput {
    build_with(ProxyConfig::default(), services, &[])
}

fn build_with(config: ProxyConfig, services: &[Service], slices: &[EndpointSlice]) -> BuildOutput {
    let batch = build_model(config.clone(), "n1", None, &[], services, slices);
    for order in [services.to_vec(), services.iter().rev().cloned().collect()] {
        let mut cache = ModelCache::new(config.clone(), "n1");
        for s in slices {
            cache.upsert_slice(s.clone());
        }
        for svc in &order {
            cache.upsert_service(svc.clone());
            cache.rebuild();
        }
        assert_eq!(cache.model().services, batch.model.services, "incremental, in order {order:?}");
        assert_eq!(cache.problems(), batch.problems);
        let first = &order[0];
        cache.remove_service(&first.namespace, &first.name);
        cache.rebuild();
        cache.upsert_service(first.clone());
        cache.rebuild();
        assert_eq!(
            cache.model().services,
            batch.model.services,
            "after {}/{} went and came back",
            first.namespace,
            first.name
        );
    }
    batch
}

/// The attack: `attacker/x` sorts before `kube-system/kube-dns` and lists kube-dns's
/// ClusterIP as an externalIP on 53/UDP. kube-dns keeps it, untold; the attacker is told.
#[test]
fn a_cluster_ip_beats_an_earlier_named_external_ip() {
    let dns = service("kube-system", "kube-dns", "10.96.0.10", 53, "UDP");
    let mut attacker = service("attacker", "x", "10.96.5.5", 53, "UDP");
    attacker.external_ips = vec!["10.96.0.10".into(), "192.0.2.9".into()];
    let out = build(&[attacker.clone(), dns.clone()]);
    assert_eq!(&*port_of(&out, &dns).cluster_ips, &[ip("10.96.0.10")]);
    assert!(problems_of(&out, &dns).is_empty(), "{:?}", out.problems);
    assert_eq!(port_of(&out, &attacker).external_ips(), &[ip("192.0.2.9")], "only the address it may have");
    let lost = problems_of(&out, &attacker);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].reason, "AddressConflict");
    assert!(lost[0].message.contains("kube-system/kube-dns") && lost[0].message.contains("its clusterIP"), "{lost:?}");
}

/// A load balancer IP (written by a controller through the status subresource) beats an
/// externalIP (written by any user), whatever the names.
#[test]
fn a_load_balancer_ip_beats_an_external_ip() {
    let lb = load_balancer(service("zz", "lb", "10.96.0.20", 443, "TCP"), &["198.51.100.7"]);
    let mut ext = service("aa", "ext", "10.96.0.21", 443, "TCP");
    ext.external_ips = vec!["198.51.100.7".into()];
    let out = build(&[ext.clone(), lb.clone()]);
    assert_eq!(port_of(&out, &lb).load_balancer_ips(), &[ip("198.51.100.7")]);
    assert!(port_of(&out, &ext).external_ips().is_empty());
    assert!(problems_of(&out, &lb).is_empty(), "{:?}", out.problems);
    assert!(problems_of(&out, &ext)[0].message.contains("its load balancer IP"), "{:?}", out.problems);
    // Nor can an externalIP nor a load balancer IP take a ClusterIP.
    let lb_on_cluster_ip = load_balancer(service("aa", "lb2", "10.96.0.22", 443, "TCP"), &["10.96.0.21"]);
    let out = build(&[lb_on_cluster_ip.clone(), ext.clone()]);
    assert_eq!(&*port_of(&out, &ext).cluster_ips, &[ip("10.96.0.21")]);
    assert!(port_of(&out, &lb_on_cluster_ip).load_balancer_ips().is_empty());
}

/// Within one kind, (namespace, name) order still decides, for externalIPs and load balancer
/// IPs alike; a port that lists its own ClusterIP as an externalIP contends as a ClusterIP.
#[test]
fn within_a_kind_the_first_name_wins() {
    let mut a = service("a", "one", "10.96.1.1", 80, "TCP");
    let mut b = service("b", "two", "10.96.1.2", 80, "TCP");
    a.external_ips = vec!["192.0.2.1".into()];
    b.external_ips = vec!["192.0.2.1".into()];
    let out = build(&[b.clone(), a.clone()]);
    assert_eq!(port_of(&out, &a).external_ips(), &[ip("192.0.2.1")]);
    assert!(port_of(&out, &b).external_ips().is_empty());

    let c = load_balancer(service("c", "three", "10.96.1.3", 80, "TCP"), &["198.51.100.1"]);
    let d = load_balancer(service("d", "four", "10.96.1.4", 81, "TCP"), &["198.51.100.1"]);
    let mut d80 = d.clone();
    d80.ports[0].port = 80;
    let out = build(&[d80.clone(), c.clone()]);
    assert_eq!(port_of(&out, &c).load_balancer_ips(), &[ip("198.51.100.1")]);
    assert!(port_of(&out, &d80).load_balancer_ips().is_empty());
    // Another port on the same address is another key: both keep it.
    let out = build(&[d.clone(), c.clone()]);
    assert_eq!(port_of(&out, &d).load_balancer_ips(), &[ip("198.51.100.1")]);

    // `e` lists its own ClusterIP as an externalIP too: `d0` (same kind, earlier name, the
    // address as an externalIP) does not take it from `e`.
    let mut e = service("e", "five", "10.96.1.5", 80, "TCP");
    e.external_ips = vec!["10.96.1.5".into()];
    let mut d0 = service("d", "zero", "10.96.1.6", 80, "TCP");
    d0.external_ips = vec!["10.96.1.5".into()];
    let out = build(&[d0.clone(), e.clone()]);
    assert_eq!(&*port_of(&out, &e).cluster_ips, &[ip("10.96.1.5")]);
    assert!(port_of(&out, &d0).external_ips().is_empty());
}

/// Addresses no Service may claim as an externalIP or load balancer IP are refused, each with
/// a problem; the rest of the Service is programmed.
#[test]
fn special_addresses_are_refused() {
    let special = [
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.5",
        "239.0.0.1",
        "127.0.0.1",
        "169.254.169.254",
        "::",
        "::1",
        "fe80::1",
        "ff02::1",
    ];
    let mut svc = load_balancer(service("ns", "web", "10.96.2.1", 80, "TCP"), &["0.0.0.0", "198.51.100.2", "ff05::2"]);
    svc.external_ips = special.iter().map(|s| s.to_string()).chain(["192.0.2.20".to_string()]).collect();
    let out = build(std::slice::from_ref(&svc));
    let port = port_of(&out, &svc);
    assert_eq!(port.external_ips(), &[ip("192.0.2.20")]);
    assert_eq!(port.load_balancer_ips(), &[ip("198.51.100.2")]);
    assert_eq!(&*port.cluster_ips, &[ip("10.96.2.1")]);
    let problems = problems_of(&out, &svc);
    let count = |reason: &str| problems.iter().filter(|p| p.reason == reason).count();
    assert_eq!(count("InvalidExternalIP"), special.len(), "{problems:#?}");
    assert_eq!(count("InvalidLoadBalancerIP"), 2, "{problems:#?}");
    assert!(problems.iter().all(|p| p.message.contains("no Service may claim it")), "{problems:#?}");
}

/// `::ffff:a.b.c.d` is refused with a problem wherever an address or network is read: it never
/// reaches the model as IPv6 (ownership, programming) while conntrack reads it as IPv4.
#[test]
fn ipv4_mapped_addresses_are_refused_everywhere() {
    let mut svc = load_balancer(service("ns", "web", "10.96.3.1", 80, "TCP"), &["::ffff:198.51.100.3"]);
    svc.external_ips = vec!["::ffff:10.96.0.10".into()];
    let mapped_cluster = service("ns", "mapped", "::ffff:10.96.3.2", 80, "TCP");
    let slice = |name: &str, family: &str, address: &str| EndpointSlice {
        namespace: "ns".into(),
        name: name.into(),
        service_name: "web".into(),
        address_type: family.into(),
        ports: vec![EndpointPort { name: "p".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: vec![Endpoint { addresses: vec![address.into()], ..Endpoint::default() }],
        trigger_time: None,
    };
    let slices = [
        slice("web-v6", "IPv6", "::ffff:10.244.0.5"),
        slice("web-v4", "IPv4", "::ffff:10.244.0.6"),
        slice("web-ok", "IPv4", "10.244.0.7"),
    ];
    let out = build_with(ProxyConfig::default(), &[svc.clone(), mapped_cluster.clone()], &slices);
    let port = port_of(&out, &svc);
    assert!(port.external_ips().is_empty() && port.load_balancer_ips().is_empty());
    let endpoints: Vec<IpAddr> = port.endpoints.iter().map(|e| e.target.addr).collect();
    assert_eq!(endpoints, [ip("10.244.0.7")]);
    let mapped =
        |reason: &str| out.problems.iter().filter(|p| p.reason == reason && p.message.contains("IPv4-mapped")).count();
    assert_eq!(mapped("InvalidExternalIP"), 1, "{:#?}", out.problems);
    assert_eq!(mapped("InvalidLoadBalancerIP"), 1);
    assert_eq!(mapped("InvalidEndpointAddress"), 2);
    assert_eq!(mapped("InvalidClusterIP"), 1);
    assert!(!out.model.services.keys().any(|n| &*n.name == "mapped"), "a mapped ClusterIP is no ClusterIP");
}

/// A source range that cannot be applied closes the load balancer's firewall (no source is
/// allowed) instead of leaving it out, which opened it to every source.
#[test]
fn a_source_range_that_cannot_be_applied_fails_closed() {
    for ranges in [vec!["::ffff:10.0.0.0/104"], vec!["10.0.0.0/8", "not-a-cidr"], vec!["203.0.113.0/33"]] {
        let mut svc = load_balancer(service("ns", "lb", "10.96.4.1", 80, "TCP"), &["198.51.100.4"]);
        svc.load_balancer_source_ranges = ranges.iter().map(|s| s.to_string()).collect();
        let out = build(std::slice::from_ref(&svc));
        let port = port_of(&out, &svc);
        assert!(port.firewall_closed(), "{ranges:?}");
        assert!(port.source_ranges().is_empty(), "{ranges:?}: nothing allowed");
        assert_eq!(port.load_balancer_ips(), &[ip("198.51.100.4")], "the Service is still programmed");
        let problems = problems_of(&out, &svc);
        assert!(
            problems.iter().any(|p| p.reason == "InvalidSourceRange" && p.message.contains("allow no source")),
            "{problems:#?}"
        );
    }
    let mut ok = load_balancer(service("ns", "lb", "10.96.4.1", 80, "TCP"), &["198.51.100.4"]);
    ok.load_balancer_source_ranges = vec!["10.0.0.0/8".into()];
    let out = build(std::slice::from_ref(&ok));
    assert!(!port_of(&out, &ok).firewall_closed());
}

/// A Service asking for more table objects than the cap is left out with a problem; the
/// others are not touched, and one at the cap is programmed.
#[test]
fn a_service_beyond_the_element_cap_is_left_out() {
    let mut big = service("ns", "big", "10.96.5.1", 80, "TCP");
    big.ports = (1..=3)
        .map(|i| ServicePortSpec { name: format!("p{i}"), protocol: "TCP".into(), port: 80 + i, node_port: None })
        .collect();
    // No endpoints: 3 ports x (its cluster-ips element + a no-endpoint element for the
    // ClusterIP and each of 4 externalIPs, one listed twice) = 18; the source ranges filter no
    // load balancer IP and write nothing.
    big.external_ips = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.4"].map(String::from).to_vec();
    big.load_balancer_source_ranges = vec!["10.0.0.0/8".into(), "fd00::/8".into()];
    let small = service("ns", "small", "10.96.5.2", 80, "TCP");
    let both = [big.clone(), small.clone()];
    let at = |max| ProxyConfig { max_elements_per_service: max, ..ProxyConfig::default() };

    let out = build_with(at(18), &both, &[]);
    assert_eq!(out.model.services.len(), 4, "at the cap: programmed");
    assert!(out.problems.is_empty(), "{:#?}", out.problems);

    let out = build_with(at(17), &both, &[]);
    assert!(
        out.model.services.keys().all(|n| &*n.name == "small"),
        "{:?}",
        out.model.services.keys().collect::<Vec<_>>()
    );
    port_of(&out, &small);
    let problems = problems_of(&out, &big);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].reason, "TooManyElements");
    assert!(problems[0].message.contains(" 18 objects") && problems[0].message.contains("the 17 one"), "{problems:#?}");
}

/// Issue 31: a Service programs an externalIP or load balancer IP only in a family it has a
/// ClusterIP of (as upstream's per-family proxiers), so a single-stack Service's address of
/// the other family is ignored before ownership is decided: it cannot take a dual-stack
/// Service's address that it would never program itself.
#[test]
fn a_single_stack_service_takes_no_address_of_the_other_family() {
    let mut victim = load_balancer(service("zz", "victim", "10.96.6.1", 53, "UDP"), &["2001:db8:1::53"]);
    victim.cluster_ips.push("fd00:96::61".into());
    victim.external_ips = vec!["2001:db8::53".into(), "192.0.2.53".into()];
    let mut contender = load_balancer(service("aa", "contender", "10.96.6.2", 53, "UDP"), &["2001:db8:1::53"]);
    contender.external_ips = vec!["2001:db8::53".into(), "192.0.2.54".into()];
    contender.ports[0].node_port = Some(30054);
    let out = build(&[contender.clone(), victim.clone()]);
    let kept = port_of(&out, &victim);
    assert_eq!(kept.external_ips(), &[ip("2001:db8::53"), ip("192.0.2.53")]);
    assert_eq!(kept.load_balancer_ips(), &[ip("2001:db8:1::53")]);
    assert!(problems_of(&out, &victim).is_empty(), "{:?}", out.problems);
    let ignored = port_of(&out, &contender);
    assert_eq!(ignored.external_ips(), &[ip("192.0.2.54")], "only its own family's");
    assert!(ignored.load_balancer_ips().is_empty());
    assert!(problems_of(&out, &contender).is_empty(), "ignored, as upstream does: {:?}", out.problems);
    // Alone, the single-stack Service has no other-family address either.
    let alone = build(std::slice::from_ref(&contender));
    assert_eq!(port_of(&alone, &contender).external_ips(), &[ip("192.0.2.54")]);
}

/// Issue 31: the API server's address, which the agent connects to, is never an externalIP
/// or load balancer IP, on any port; the rest of the Service is programmed. A ClusterIP equal
/// to it (the `kubernetes` Service's, the in-cluster address) is programmed as ever.
#[test]
fn the_api_servers_address_is_no_services_external_address() {
    let config = ProxyConfig { reserved_addresses: vec![ip("192.0.2.1"), ip("2001:db8::1")], ..ProxyConfig::default() };
    let mut capture =
        load_balancer(service("attacker", "capture", "10.96.7.1", 443, "TCP"), &["2001:db8::1", "198.51.100.9"]);
    capture.cluster_ips.push("fd00:96::71".into());
    capture.external_ips = vec!["192.0.2.1".into(), "192.0.2.9".into()];
    // On another port than the API server's too: the whole address is the node's to reach.
    let mut elsewhere = service("attacker", "elsewhere", "10.96.7.2", 80, "TCP");
    elsewhere.external_ips = vec!["192.0.2.1".into()];
    let kubernetes = service("default", "kubernetes", "192.0.2.1", 443, "TCP");
    let services = [capture.clone(), elsewhere.clone(), kubernetes.clone()];
    let out = build_with(config, &services, &[]);

    let port = port_of(&out, &capture);
    assert_eq!(port.external_ips(), &[ip("192.0.2.9")]);
    assert_eq!(port.load_balancer_ips(), &[ip("198.51.100.9")]);
    assert!(port_of(&out, &elsewhere).external_ips().is_empty());
    let reasons: Vec<_> = out.problems.iter().map(|p| (p.object.name.as_str(), p.reason)).collect();
    assert_eq!(
        reasons,
        [("capture", "ApiServerAddress"), ("capture", "ApiServerAddress"), ("elsewhere", "ApiServerAddress")],
        "{:#?}",
        out.problems
    );
    assert!(out.problems.iter().all(|p| p.message.contains("the API server's address")), "{:#?}", out.problems);
    assert_eq!(&*port_of(&out, &kubernetes).cluster_ips, &[ip("192.0.2.1")], "a ClusterIP is not checked");
}

/// Issue 31: endpoint addresses the API server refuses in an EndpointSlice (its
/// ValidateEndpointIP: unspecified, loopback, link-local, link-local multicast) are refused
/// here too, each with a problem, so that a manifests directory (which no API server
/// validated) cannot DNAT a Service to the node's own loopback or to a metadata server; the
/// rest of the slice is programmed. What the API server accepts stays accepted.
#[test]
fn endpoint_addresses_the_api_server_refuses_are_refused() {
    let svc = service("ns", "web", "10.96.8.1", 80, "TCP");
    let mut svc6 = service("ns", "web6", "fd00:96::81", 80, "TCP");
    svc6.ports[0].name = "p".into();
    let slice = |service: &str, family: &str, addresses: &[&str]| EndpointSlice {
        namespace: "ns".into(),
        name: format!("{service}-{family}"),
        service_name: service.into(),
        address_type: family.into(),
        ports: vec![EndpointPort { name: "p".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: addresses
            .iter()
            .map(|a| Endpoint { addresses: vec![a.to_string()], ..Endpoint::default() })
            .collect(),
        trigger_time: None,
    };
    let refused4 = ["0.0.0.0", "127.0.0.1", "127.5.5.5", "169.254.169.254", "224.0.0.5"];
    let refused6 = ["::", "::1", "fe80::1", "febf::1", "ff02::1", "ff12::2"];
    // Accepted by the API server (global multicast, broadcast, site-local), and so here.
    let kept4 = ["10.244.0.5", "239.1.2.3", "255.255.255.255"];
    let kept6 = ["fd00:244::5", "ff05::1", "fec0::1"];
    let slices = [
        slice("web", "IPv4", &[&refused4[..], &kept4[..]].concat()),
        slice("web6", "IPv6", &[&refused6[..], &kept6[..]].concat()),
    ];
    let out = build_with(ProxyConfig::default(), &[svc.clone(), svc6.clone()], &slices);
    let addresses = |s: &Service| -> Vec<IpAddr> { port_of(&out, s).endpoints.iter().map(|e| e.target.addr).collect() };
    let sorted = |a: &[&str]| {
        let mut v: Vec<IpAddr> = a.iter().map(|s| ip(s)).collect();
        v.sort();
        v
    };
    assert_eq!(addresses(&svc), sorted(&kept4));
    assert_eq!(addresses(&svc6), sorted(&kept6));
    let refusals: Vec<_> = out.problems.iter().filter(|p| p.reason == "InvalidEndpointAddress").collect();
    assert_eq!(refusals.len(), refused4.len() + refused6.len(), "{:#?}", out.problems);
    assert!(refusals.iter().all(|p| p.message.contains("the API server refuses")), "{refusals:#?}");
}
