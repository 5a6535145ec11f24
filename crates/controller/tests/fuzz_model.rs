//! Fuzzing the model and the renderer (issue 10): arbitrary Services, EndpointSlices, Nodes and
//! ServiceCIDRs, as k8s-openapi objects with hostile values, go through the controller's
//! translation, `build_model`, `render`, `diff` and the text printers.
//!
//! Properties: nothing panics; every object left out is named in a problem (or is skipped by a
//! documented rule); hostile objects never change what good ones get; the text parses with
//! `nft -c` (as root, in a throwaway network namespace). `PROPTEST_CASES` sets the number of
//! cases (256 by default); docs/testing.md ("Fuzzing") has the long run.

mod fuzz;

use fuzz::*;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;
use std::cell::RefCell;
use verdict_controller::translate;
use verdict_layout::{RenderOptions, render};
use verdict_model::{
    BuildOutput, Cidr, ObjectKind, Protocol, ProxyConfig, ServicePortName, ServicePorts, build_model,
    parse_ip_tolerant, proxied_by_labels, refused_endpoint_address, source,
};
use verdict_nft::{Ruleset, diff, text};

/// Source records, as the controller hands them to the model.
#[derive(Clone, Debug, Default)]
struct Input {
    services: Vec<source::Service>,
    slices: Vec<source::EndpointSlice>,
    node: Option<source::Node>,
    service_cidrs: Vec<source::ServiceCidr>,
}

impl Input {
    fn new(services: &[Service], slices: &[EndpointSlice], node: Option<&Node>, cidrs: &[ServiceCIDR]) -> Input {
        Input {
            services: services.iter().map(translate::service).collect(),
            slices: slices.iter().map(translate::endpoint_slice).collect(),
            node: node.map(translate::node),
            service_cidrs: cidrs.iter().map(translate::service_cidr).collect(),
        }
    }

    /// Builds the model as `verdict render` does (ServiceCIDR objects widen the configured range).
    fn build(&self) -> BuildOutput {
        self.build_capped(ProxyConfig::default().max_elements_per_service)
    }

    /// [`Input::build`] with `--max-elements-per-service` at `cap`.
    fn build_capped(&self, cap: usize) -> BuildOutput {
        let mut config = ProxyConfig { max_elements_per_service: cap, ..ProxyConfig::default() };
        for object in &self.service_cidrs {
            config.service_cidrs.extend(object.cidrs.iter().filter_map(|c| Cidr::parse_tolerant(c)));
        }
        build_model(config, NODE, self.node.as_ref(), &[], &self.services, &self.slices)
    }
}

thread_local! {
    /// The previous case's table, to diff against: a sync from any table to any other.
    static PREVIOUS: RefCell<Option<Ruleset>> = const { RefCell::new(None) };
}

/// Renders, diffs (from nothing and from the previous case) and prints: none of it may panic.
fn render_diff_print(built: &BuildOutput) -> Ruleset {
    let rs = render(&built.model, &RenderOptions::default());
    let listing = text::listing(&rs);
    assert!(listing.starts_with("table inet kube-proxy {"), "{listing}");
    let fresh = diff(None, &rs);
    assert!(fresh.result.equivalent(&rs), "a plan from nothing must end at the rendered table");
    let _ = text::script(&fresh.transaction);
    PREVIOUS.with(|prev| {
        let mut prev = prev.borrow_mut();
        if let Some(before) = prev.as_ref() {
            let step = diff(Some(before), &rs);
            assert!(step.result.equivalent(&rs), "a plan from the previous table must end at the rendered one");
            let _ = text::script(&step.transaction);
        }
        *prev = Some(rs.clone());
    });
    for p in &built.problems {
        let line = p.to_string();
        assert!(!line.is_empty());
    }
    rs
}

/// The objects (and parts) the model left out without naming them in a problem. "Left out"
/// follows build.rs's rules; what those rules skip on purpose is not counted:
/// - Services of type ExternalName, with the service-proxy-name or headless label, or headless
///   (no clusterIP, or `None`): nothing to proxy, as upstream;
/// - slices without the service-name label, of addressType FQDN, or whose Service has no port
///   in the model (not created yet, or itself left out and named), and slice ports whose
///   (name, protocol) matches no Service port;
/// - an endpoint's addresses after the first (kube-proxy uses the first), and the second of
///   two endpoints with the same address and port (it is in the model once);
/// - (named, not silent) an endpoint address the API server refuses (loopback, link-local, ...);
/// - Node addresses of types other than InternalIP and ExternalIP.
///
/// ServiceCIDR objects are not checked: the model receives only their parsable CIDRs and
/// nothing reports the others (see docs/testing.md, "Fuzzing").
fn left_out_silently(input: &Input, out: &BuildOutput) -> Vec<String> {
    let named = |kind: ObjectKind, ns: &str, name: &str| {
        out.problems.iter().any(|p| p.object.kind == kind && p.object.namespace == ns && p.object.name == name)
    };
    let mut silent = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for svc in &input.services {
        let (ns, name) = (svc.namespace.as_str(), svc.name.as_str());
        let service_named = named(ObjectKind::Service, ns, name);
        if !seen.insert((ns, name)) {
            // Only one object of a name can be programmed: the others must be reported.
            if !service_named {
                silent.push(format!("duplicate Service {ns}/{name}"));
            }
            continue;
        }
        let ty = if svc.service_type.is_empty() { "ClusterIP" } else { svc.service_type.as_str() };
        if ty == "ExternalName" || !proxied_by_labels(&svc.labels) {
            continue;
        }
        let valid_type = matches!(ty, "ClusterIP" | "NodePort" | "LoadBalancer");
        if valid_type && svc.cluster_ips.iter().all(|ip| ip.is_empty() || ip == "None") {
            continue;
        }
        for spec in &svc.ports {
            let programmed = Protocol::parse_k8s(&spec.protocol)
                .is_some_and(|p| out.model.services.contains_key(&ServicePortName::new(ns, name, &spec.name, p)));
            if !programmed && !service_named {
                silent.push(format!("Service {ns}/{name} port {:?}/{:?}", spec.name, spec.protocol));
            }
        }
    }
    for slice in &input.slices {
        if slice.service_name.is_empty() || slice.address_type == "FQDN" {
            continue;
        }
        let slice_named = named(ObjectKind::EndpointSlice, &slice.namespace, &slice.name);
        let ports = out
            .model
            .services
            .values()
            .filter(|p| *p.name.namespace == *slice.namespace && *p.name.name == *slice.service_name);
        for port in ports {
            let Some(v4) = (match slice.address_type.as_str() {
                "IPv4" => Some(true),
                "IPv6" => Some(false),
                _ => None,
            }) else {
                if !slice_named {
                    silent
                        .push(format!("slice {}/{} addressType {:?}", slice.namespace, slice.name, slice.address_type));
                }
                continue;
            };
            let matching = slice.ports.iter().filter(|sp| {
                *sp.name == *port.name.port && Protocol::parse_k8s(&sp.protocol) == Some(port.name.protocol)
            });
            for sp in matching {
                let Some(number) = sp.port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0) else {
                    if !slice_named {
                        silent.push(format!("slice {}/{} port {:?}", slice.namespace, slice.name, sp.port));
                    }
                    continue;
                };
                for ep in &slice.endpoints {
                    let addr = ep.addresses.first().and_then(|a| parse_ip_tolerant(a)).filter(|a| a.is_ipv4() == v4);
                    match addr {
                        // Refused as the API server refuses it: must be named.
                        Some(addr) if refused_endpoint_address(&addr).is_some() && !slice_named => {
                            silent.push(format!("slice {}/{} endpoint {addr}", slice.namespace, slice.name));
                        }
                        Some(addr) if refused_endpoint_address(&addr).is_some() => {}
                        Some(addr) => {
                            let kept = port.endpoints.iter().any(|e| e.target.addr == addr && e.target.port == number);
                            if !kept {
                                silent.push(format!(
                                    "valid endpoint {addr} of {}/{} dropped",
                                    slice.namespace, slice.name
                                ));
                            }
                        }
                        None if !slice_named => {
                            silent.push(format!("slice {}/{} endpoint {:?}", slice.namespace, slice.name, ep.addresses))
                        }
                        None => {}
                    }
                }
            }
        }
    }
    if let Some(node) = &input.node {
        let node_named = named(ObjectKind::Node, "", &node.name);
        let bad_address = node
            .addresses
            .iter()
            .any(|(kind, addr)| (kind == "InternalIP" || kind == "ExternalIP") && parse_ip_tolerant(addr).is_none());
        let bad_cidr = node.pod_cidrs.iter().any(|c| Cidr::parse_tolerant(c).is_none());
        if (bad_address || bad_cidr) && !node_named {
            silent.push(format!("Node {} address or podCIDR", node.name));
        }
    }
    silent
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(default)
}

/// Namespaces of hostile objects in the isolation property: some sort after every `good-*`
/// namespace, some before (`aa-bad-*`), so that ownership cannot rest on name order alone: a
/// hostile externalIP or load balancer IP on a good ClusterIP loses it because a ClusterIP is
/// allocated by the API server and wins over what users write (issue 23), whatever the names.
/// A hostile object may still use addresses no good port claims, e.g. a good ClusterIP on
/// another port as an externalIP: Kubernetes allows that (CVE-2020-8554 is an API-server
/// admission matter), and it changes nothing of the good ports.
fn bad_namespace() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u8..3).prop_map(|k| format!("zz-bad-{k}")),
        (0u8..3).prop_map(|k| format!("aa-bad-{k}")),
        hostile_string().prop_map(|s| format!("zz-bad-{s}")),
        hostile_string().prop_map(|s| format!("aa-bad-{s}")),
    ]
}

/// What the API server and the load balancer controller allocate, and never give twice:
/// ClusterIPs, NodePorts and ingress IPs. A hostile Service cannot hold a good one's, so one
/// that would is given another (these are not written by the untrusted user). A hostile
/// ingress IP on a good ClusterIP is kept: the ClusterIP must win it.
fn without_allocated_collisions(bad: &mut Service, good: &[Service]) {
    use std::net::IpAddr;
    let parsed =
        |ips: Vec<&String>| -> Vec<IpAddr> { ips.into_iter().filter_map(|ip| parse_ip_tolerant(ip)).collect() };
    let cluster_ips = parsed(
        good.iter().filter_map(|s| s.spec.as_ref()).flat_map(|spec| spec.cluster_ips.iter().flatten()).collect(),
    );
    let lb_ips = parsed(
        good.iter()
            .filter_map(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
            .flatten()
            .filter_map(|i| i.ip.as_ref())
            .collect(),
    );
    let node_ports: Vec<i32> =
        good.iter().filter_map(|s| s.spec.as_ref()?.ports.as_ref()).flatten().filter_map(|p| p.node_port).collect();
    let fix = |taken: &[IpAddr], ip: &mut String| {
        if parse_ip_tolerant(ip).is_some_and(|a| taken.contains(&a)) {
            *ip = "10.95.0.1".into();
        }
    };
    let allocated: Vec<IpAddr> = cluster_ips.iter().chain(&lb_ips).copied().collect();
    if let Some(spec) = bad.spec.as_mut() {
        spec.cluster_ip.iter_mut().for_each(|ip| fix(&allocated, ip));
        spec.cluster_ips.iter_mut().flatten().for_each(|ip| fix(&allocated, ip));
        for port in spec.ports.iter_mut().flatten() {
            if port.node_port.is_some_and(|np| node_ports.contains(&np)) {
                port.node_port = Some(31999);
            }
        }
    }
    if let Some(ingress) = bad.status.as_mut().and_then(|s| s.load_balancer.as_mut()?.ingress.as_mut()) {
        ingress.iter_mut().filter_map(|i| i.ip.as_mut()).for_each(|ip| fix(&lb_ips, ip));
    }
}

fn any_namespace() -> impl Strategy<Value = String> {
    prop_oneof![3 => prop::sample::select(vec!["default", "ns"]).prop_map(str::to_string), 1 => hostile_string()]
}

fn is_good(namespace: &str) -> bool {
    namespace.starts_with("good-")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn hostile_objects_never_change_what_good_ones_get(
        good in good_objects(4),
        mut bad_services in vec(hostile_service(bad_namespace()), 0..4),
        bad_slices in vec(hostile_slice(bad_namespace()), 0..4),
    ) {
        let (good_services, good_slices) = split(good);
        for bad in &mut bad_services {
            without_allocated_collisions(bad, &good_services);
        }
        isolated(&good_services, &good_slices, &bad_services, &bad_slices, DEFAULT_CAP)?;
    }

    /// Issue 23: Services named before the good ones claim the good ClusterIPs and load
    /// balancer IPs on the good ports, in every spelling: the good ones keep them all.
    #[test]
    fn squatters_named_first_never_take_good_addresses(
        good in good_objects(4),
        mut squatters in vec(squatter_service(), 1..4),
    ) {
        let (good_services, good_slices) = split(good);
        for bad in &mut squatters {
            without_allocated_collisions(bad, &good_services);
        }
        isolated(&good_services, &good_slices, &squatters, &[], DEFAULT_CAP)?;
    }

    /// Issue 31: single-stack Services named before the good (some dual-stack) ones list the
    /// good externalIPs and load balancer IPs of the family they have no ClusterIP of: the
    /// good ones keep them all (upstream ignores such addresses).
    #[test]
    fn single_stack_contenders_take_no_address_of_the_other_family(
        good in good_objects(4),
        contenders in vec(single_stack_contender(), 1..4),
    ) {
        let (good_services, good_slices) = split(good);
        let (services, slices): (Vec<_>, Vec<_>) = contenders.into_iter().unzip();
        isolated(&good_services, &good_slices, &services, &slices, DEFAULT_CAP)?;
    }

    /// Issue 31: Services with many addresses and many endpoints, under a cap drawn for the
    /// case: none costs more than the cap (those that would are left out whole, named), and
    /// none changes what the good ones get.
    #[test]
    fn big_services_cost_at_most_the_cap_and_change_nothing_else(
        good in good_objects(3),
        big in vec(big_service_and_slices(), 1..3),
        cap in 1_000usize..30_000,
    ) {
        let (good_services, good_slices) = split(good);
        let (services, slices) = split(big);
        isolated(&good_services, &good_slices, &services, &slices, cap)?;
    }

    #[test]
    fn every_object_left_out_is_named_in_a_problem(
        services in vec(hostile_service(any_namespace()), 0..6),
        slices in vec(hostile_slice(any_namespace()), 0..6),
        node in of(hostile_node()),
        cidrs in vec(hostile_service_cidr(), 0..2),
    ) {
        let input = Input::new(&services, &slices, node.as_ref(), &cidrs);
        let built = input.build();
        render_diff_print(&built);
        let silent = left_out_silently(&input, &built);
        prop_assert!(silent.is_empty(), "left out without a problem: {:?}\nproblems: {:#?}", silent, built.problems);
    }
}

/// The default `--max-elements-per-service`.
const DEFAULT_CAP: usize = verdict_model::DEFAULT_MAX_ELEMENTS_PER_SERVICE;

/// Services and their slices, apart.
fn split(objects: Vec<(Service, Vec<EndpointSlice>)>) -> (Vec<Service>, Vec<EndpointSlice>) {
    let (services, slices): (Vec<_>, Vec<_>) = objects.into_iter().unzip();
    (services, slices.into_iter().flatten().collect())
}

/// The isolation property: the good objects' ports, problems and per-Service chains are the
/// same with the hostile objects as without them; and no Service costs the table more than
/// `cap`, a Service over it being left out whole and named.
fn isolated(
    good_services: &[Service],
    good_slices: &[EndpointSlice],
    bad_services: &[Service],
    bad_slices: &[EndpointSlice],
    cap: usize,
) -> Result<(), TestCaseError> {
    let node = good_node();
    let alone = Input::new(good_services, good_slices, Some(&node), &[]).build_capped(cap);
    let all_services: Vec<Service> = good_services.iter().chain(bad_services).cloned().collect();
    let all_slices: Vec<EndpointSlice> = good_slices.iter().chain(bad_slices).cloned().collect();
    let full = Input::new(&all_services, &all_slices, Some(&node), &[]).build_capped(cap);
    within_the_cap(&full, cap)?;

    let good_ports: ServicePorts =
        full.model.services.values().filter(|p| is_good(&p.name.namespace)).cloned().collect();
    prop_assert_eq!(&good_ports, &alone.model.services);
    let good_problems: Vec<_> = full.problems.iter().filter(|p| is_good(&p.object.namespace)).cloned().collect();
    prop_assert_eq!(&good_problems, &alone.problems);
    prop_assert_eq!(&full.model.node, &alone.model.node);

    // The table: with the hostile ports taken out of the full model it is the good objects'
    // table exactly, and every per-Service chain of a good port is the same in both.
    let rs_full = render_diff_print(&full);
    let rs_alone = render_diff_print(&alone);
    let mut trimmed = full.model.clone();
    trimmed.services.retain(|p| is_good(&p.name.namespace));
    prop_assert_eq!(render(&trimmed, &RenderOptions::default()), rs_alone.clone());
    for (name, chain) in rs_alone.chains.iter().filter(|(n, _)| n.contains("-good-") && !n.contains("-bad-")) {
        prop_assert_eq!(rs_full.chains.get(name), Some(chain), "chain {}", name);
    }
    Ok(())
}

/// No Service costs the table more than `cap` ([`verdict_model::ProxyModel::table_objects`],
/// all its ports together); a Service refused as too costly has no port in the model.
fn within_the_cap(out: &BuildOutput, cap: usize) -> Result<(), TestCaseError> {
    let mut cost: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for port in out.model.services.values() {
        *cost.entry((&port.name.namespace, &port.name.name)).or_default() += out.model.table_objects(port);
    }
    for ((ns, name), spent) in &cost {
        prop_assert!(*spent <= cap, "{}/{} costs {} objects, over the cap of {}", ns, name, spent, cap);
    }
    for p in out.problems.iter().filter(|p| p.reason == "TooManyElements") {
        let key = (p.object.namespace.as_str(), p.object.name.as_str());
        prop_assert!(!cost.contains_key(&key), "{} is refused but programmed", p.object);
        prop_assert!(p.message.contains(&format!("the {cap} one Service may add")), "{}", p.message);
    }
    Ok(())
}

/// The big Services' generator reaches both sides of a cap: Services that fit, and Services
/// refused as too costly.
#[test]
fn big_services_are_both_under_and_over_a_cap() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut fit, mut refused) = (0, 0);
    for _ in 0..60 {
        let (services, slices) = split(vec(big_service_and_slices(), 1..3).new_tree(&mut runner).unwrap().current());
        let out = Input::new(&services, &slices, Some(&good_node()), &[]).build_capped(10_000);
        refused += out.problems.iter().filter(|p| p.reason == "TooManyElements").count();
        fit += out
            .model
            .services
            .values()
            .map(|p| (p.name.namespace.clone(), p.name.name.clone()))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
    }
    assert!(fit >= 10 && refused >= 10, "{fit} Services fit, {refused} refused");
}

/// `nft -c -f -` inside a network namespace of its own (`unshare -n`: created for the command
/// and gone with it). `None` when the check cannot run here, after saying why.
fn nft_check(script: &str) -> Option<Result<(), String>> {
    use std::io::Write;
    let mut child = std::process::Command::new("unshare")
        .args(["-n", "nft", "-c", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(script.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    Some(if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) })
}

/// The project's skip rule (crates/e2e's `require_kernel!`): without CAP_NET_ADMIN (`nft -c`
/// asks the kernel; root without the capability, as under `capsh --drop`, cannot) or nft, skip
/// loudly; with `VERDICT_REQUIRE_KERNEL=1` a skip fails.
fn kernel_checks_enabled() -> bool {
    let net_admin = caps::has_cap(None, caps::CapSet::Effective, caps::Capability::CAP_NET_ADMIN).unwrap_or(false);
    let nft = std::process::Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success());
    if net_admin && nft {
        return true;
    }
    let msg = "SKIPPED fuzz_model::rendered_text_parses_with_nft_check: needs CAP_NET_ADMIN (root) and nft \
               (run it with `sudo -E cargo xtask test`)";
    if std::env::var("VERDICT_REQUIRE_KERNEL").as_deref() == Ok("1") {
        panic!("{msg} (VERDICT_REQUIRE_KERNEL=1 forbids skipping)");
    }
    eprintln!("\n*** {msg} ***\n");
    false
}

/// A sample of cases (one in a thousand of `PROPTEST_CASES`, at least 16): the listing and the
/// transaction script from nothing both pass `nft -c`.
#[test]
fn rendered_text_parses_with_nft_check() {
    if !kernel_checks_enabled() {
        return;
    }
    // The source file lets proptest keep failures beside this file, as `proptest!` does.
    let config =
        ProptestConfig { cases: (cases(256) / 1000).max(16), source_file: Some(file!()), ..ProptestConfig::default() };
    let strategy =
        (vec(hostile_service(any_namespace()), 0..6), vec(hostile_slice(any_namespace()), 0..6), of(hostile_node()));
    proptest::test_runner::TestRunner::new(config)
        .run(&strategy, |(services, slices, node)| {
            let built = Input::new(&services, &slices, node.as_ref(), &[]).build();
            let rs = render(&built.model, &RenderOptions::default());
            for (what, script) in
                [("listing", text::listing(&rs)), ("script", text::script(&diff(None, &rs).transaction))]
            {
                match nft_check(&script) {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        return Err(TestCaseError::fail(format!("nft -c rejects the {what}: {e}\n{script}")));
                    }
                    None => return Err(TestCaseError::fail("cannot run `unshare -n nft`")),
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Reproducers of what the fuzzing found, kept as plain tests.
mod found {
    use super::*;

    fn service(ns: &str, name: &str, ip: &str) -> source::Service {
        let port = source::ServicePortSpec { name: "p".into(), port: 80, ..Default::default() };
        source::Service {
            namespace: ns.into(),
            name: name.into(),
            cluster_ips: vec![ip.into()],
            ports: vec![port],
            ..Default::default()
        }
    }

    fn build(services: &[source::Service], slices: &[source::EndpointSlice]) -> BuildOutput {
        build_model(ProxyConfig::default(), NODE, None, &[], services, slices)
    }

    #[test]
    fn a_second_service_of_the_same_name_is_reported_and_the_first_kept() {
        let out = build(&[service("ns", "b", "10.96.0.1"), service("ns", "b", "10.96.0.2")], &[]);
        assert!(out.problems.iter().any(|p| p.reason == "DuplicateObject"), "{:?}", out.problems);
        let port = out.model.services.values().next().unwrap();
        assert_eq!(*port.cluster_ips, ["10.96.0.1".parse::<std::net::IpAddr>().unwrap()]);
    }

    #[test]
    fn names_nft_cannot_read_back_are_reported() {
        // A quote in a namespace ended up in a set element's comment and broke `nft -f`.
        let out = build(&[service("a\"b", "svc", "10.96.0.1"), service("ns", "svc", "10.96.0.2")], &[]);
        assert!(out.problems.iter().any(|p| p.reason == "InvalidName"), "{:?}", out.problems);
        assert_eq!(out.model.services.len(), 1);
        let mut bad_port = service("ns", "x", "10.96.0.3");
        bad_port.ports[0].name = "Web Port".into();
        let out = build(&[bad_port], &[]);
        assert!(out.model.services.is_empty() && out.problems.iter().any(|p| p.reason == "InvalidPort"));
    }

    #[test]
    fn an_endpoint_without_an_address_is_reported() {
        let slice = source::EndpointSlice {
            namespace: "ns".into(),
            name: "s".into(),
            service_name: "svc".into(),
            address_type: "IPv4".into(),
            ports: vec![source::EndpointPort { name: "p".into(), port: Some(8080), ..Default::default() }],
            endpoints: vec![source::Endpoint::default()],
            ..Default::default()
        };
        let out = build(&[service("ns", "svc", "10.96.0.1")], &[slice]);
        assert!(
            out.problems.iter().any(|p| p.object.kind == ObjectKind::EndpointSlice && p.object.name == "s"),
            "{:?}",
            out.problems
        );
    }
}
