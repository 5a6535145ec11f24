//! The incremental table (`DesiredTable`) keeps the kernel exactly where a full render would
//! put it, step after step, and a step costs what it changes.

use verdict_e2e::netns::Netns;
use verdict_e2e::{require_kernel, synth};
use verdict_layout::{DesiredTable, RenderOptions, render};
use verdict_model::source::{EndpointSlice, Service};
use verdict_model::{ServiceCounters, ServicePortName};
use verdict_nft::netlink::Netlink;
use verdict_nft::observe::observe;
use verdict_nft::{diff, text};

/// A tiny deterministic generator (xorshift), so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn build(services: &[Service], slices: &[EndpointSlice]) -> verdict_model::ProxyModel {
    build_counted(services, slices, &ServiceCounters::Off)
}

fn build_counted(
    services: &[Service],
    slices: &[EndpointSlice],
    counters: &ServiceCounters,
) -> verdict_model::ProxyModel {
    let config = verdict_model::ProxyConfig { service_counters: counters.clone(), ..synth::config() };
    let out = verdict_model::build_model(config, "bench", Some(&synth::node()), &[], services, slices);
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    out.model
}

#[test]
fn random_changes_keep_the_kernel_equal_to_a_full_render() {
    require_kernel!();
    random_changes(ServiceCounters::Off);
}

/// The same with `--service-counters=all`: the counting sets and lookups follow every change
/// (layouts with own chains and firewalls included).
#[test]
fn random_changes_keep_a_counted_kernel_table_equal_to_a_full_render() {
    require_kernel!();
    random_changes(ServiceCounters::All);
}

fn random_changes(counters: ServiceCounters) {
    let build = |services: &[Service], slices: &[EndpointSlice]| build_counted(services, slices, &counters);
    let ns = Netns::new("incr").unwrap();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let (mut services, mut slices) = synth::cluster(300, 3, 2000);
    let mut model = build(&services, &slices);
    let mut table = DesiredTable::new(&model, &RenderOptions::default());
    let counting = table.ruleset().sets.get("accepted-ips").is_some_and(|s| !s.elements.is_empty());
    assert_eq!(counting, counters.enabled(), "counting sets present and filled iff counters are on");
    ns.run(|| {
        let mut nl = Netlink::open().unwrap();
        let plan = diff(None, table.ruleset());
        nl.commit(&plan.transaction).unwrap();
        table.adopt(plan.result);
    });

    let mut layout_changes = 0;
    for step in 0..60 {
        // A batch of changes per sync, as the controller coalesces them.
        for _ in 0..1 + rng.next(5) {
            let i = rng.next(services.len() + 40);
            match rng.next(7) {
                // A new Service (or one that was deleted comes back).
                0 if i >= services.len() => {
                    services.push(synth::service(i + 1000 * step));
                    slices.push(synth::slice(i + 1000 * step, 1 + rng.next(6), 2000, 0));
                }
                // Delete.
                1 if i < services.len() && services.len() > 10 => {
                    services.remove(i);
                    slices.remove(i);
                }
                // Scale to another endpoint count (moves between endpoint maps).
                2 if i < slices.len() => {
                    let idx: usize = slices[i].service_name.trim_start_matches("svc-").parse().unwrap();
                    slices[i] = synth::slice(idx, rng.next(12), 2000, 0);
                }
                // Switch the Service to another policy layout (Local policies, affinity,
                // load balancer with source ranges) and move an endpoint onto this node.
                3 if i < services.len() => {
                    featured(&mut services[i], &mut slices[i], &mut rng);
                    layout_changes += 1;
                }
                // Replace one endpoint.
                _ if i < slices.len() => {
                    let idx: usize = slices[i].service_name.trim_start_matches("svc-").parse().unwrap();
                    let n = slices[i].endpoints.len().max(1);
                    slices[i] = synth::slice(idx, n, 2000, 1 + rng.next(500));
                }
                _ => {}
            }
        }
        // Grow one set past its capacity once (1024 elements): it must be recreated.
        if step == 30 {
            for k in 0..400 {
                services.push(synth::service(100_000 + k));
                slices.push(synth::slice(100_000 + k, 3, 2000, 0));
            }
        }
        let new_model = build(&services, &slices);
        let names: std::collections::BTreeSet<&ServicePortName> =
            model.services.keys().chain(new_model.services.keys()).collect();
        for name in names {
            let (old, new) = (model.services.get(name).map(|p| &**p), new_model.services.get(name).map(|p| &**p));
            if old != new {
                table.update(old, new);
            }
        }
        model = new_model;
        let tx = table.plan();
        ns.run(|| {
            let mut nl = Netlink::open().unwrap();
            nl.commit(&tx).unwrap_or_else(|e| panic!("step {step}: {e}\n{tx}"));
            let kernel = observe(&mut nl, "kube-proxy").unwrap().unwrap();
            assert!(kernel.foreign.is_empty(), "{:?}", kernel.foreign);
            let full = render(&model, &RenderOptions::default());
            assert!(
                kernel.ruleset.equivalent(&full),
                "step {step}: kernel differs from a full render\n{}",
                first_difference(&text::listing(&full), &text::listing(&kernel.ruleset))
            );
            assert!(table.ruleset().equivalent(&full), "step {step}: the desired table drifted from a full render");
            assert!(
                diff(Some(&kernel.ruleset), table.ruleset()).transaction.is_empty(),
                "step {step}: table and kernel differ"
            );
        });
        table.committed();
    }
    assert!(layout_changes >= 10, "only {layout_changes} layout changes were exercised");
}

/// Gives Service `svc` one of the features that use chains of its own (or takes them away),
/// and puts one of its endpoints on this node (or takes it off).
fn featured(svc: &mut Service, slice: &mut EndpointSlice, rng: &mut Rng) {
    let idx: u32 = svc.name.trim_start_matches("svc-").parse().unwrap();
    let lb_ip = std::net::Ipv4Addr::from((100u32 << 24) | (64 << 16) | idx).to_string();
    let plain = synth::service(idx as usize);
    *svc = match rng.next(5) {
        0 => Service {
            service_type: "LoadBalancer".into(),
            load_balancer_ingress: vec![verdict_model::source::LoadBalancerIngress { ip: lb_ip, ip_mode: None }],
            external_traffic_policy: "Local".into(),
            ..plain
        },
        1 => Service { internal_traffic_policy: "Local".into(), ..plain },
        2 => Service { session_affinity: "ClientIP".into(), session_affinity_timeout_seconds: Some(60), ..plain },
        3 => Service {
            service_type: "LoadBalancer".into(),
            load_balancer_ingress: vec![verdict_model::source::LoadBalancerIngress { ip: lb_ip, ip_mode: None }],
            load_balancer_source_ranges: vec!["203.0.113.0/25".into()],
            session_affinity: "ClientIP".into(),
            ..plain
        },
        _ => plain,
    };
    if let Some(ep) = slice.endpoints.first_mut() {
        let local = rng.next(2) == 0;
        ep.node_name = Some(if local { "bench" } else { "other" }.into());
    }
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  full:   {x}\n  kernel: {y}", i + 1);
        }
    }
    format!("{} vs {} lines", a.lines().count(), b.lines().count())
}

#[test]
fn a_change_costs_the_same_with_10_or_10000_services() {
    let mut costs = Vec::new();
    for n in [10, 10_000] {
        let (services, mut slices) = synth::cluster(n, 10, 150_000);
        let model = build(&services, &slices);
        let mut table = DesiredTable::new(&model, &RenderOptions::default());
        slices[n / 2] = synth::slice(n / 2, 10, 150_000, 7);
        let new_model = build(&services, &slices);
        let name = new_model.services.keys().find(|k| *k.name == *format!("svc-{}", n / 2)).unwrap().clone();
        let started = std::time::Instant::now();
        table.update(model.services.get(&name).map(|p| &**p), new_model.services.get(&name).map(|p| &**p));
        let tx = table.plan();
        let took = started.elapsed();
        costs.push((tx.object_count(), took));
    }
    assert_eq!(costs[0].0, costs[1].0, "objects written must not depend on the number of Services: {costs:?}");
    // One slot swapped (delete + add) and the hairpin entries of the old and new pod.
    assert!(costs[0].0 <= 4, "{costs:?}");
    eprintln!("update+plan: {:?} with 10 Services, {:?} with 10,000", costs[0].1, costs[1].1);
}

#[test]
fn a_change_stays_cheap_at_100000_services() {
    // The controller rebuilds only the changed Service's ports, as here: the cost of one
    // update and plan must not grow with the table (no timing assertion; printed for the note).
    let mut report = Vec::new();
    for n in [10, 100_000] {
        let (services, slices) = synth::cluster(n, 10, 150_000);
        let model = build(&services, &slices);
        let mut table = DesiredTable::new(&model, &RenderOptions::default());
        let mut times = Vec::new();
        let mut objects = 0;
        for k in 0..20 {
            let i = (k * 7919) % n;
            let old = build(&services[i..=i], &slices[i..=i]);
            let new = build(&services[i..=i], &[synth::slice(i, 10, 150_000, 1 + k)]);
            let (old, new) = (old.services.values().next().unwrap(), new.services.values().next().unwrap());
            let t = std::time::Instant::now();
            table.update(Some(old), Some(new));
            let tx = table.plan();
            times.push(t.elapsed());
            objects = objects.max(tx.object_count());
            table.committed();
            // Put it back for the next round.
            table.update(Some(new), Some(old));
            table.committed();
        }
        times.sort();
        report.push((n, times[times.len() / 2], objects));
    }
    eprintln!("update + plan of one endpoint change (median of 20): {report:?}");
    // A slot swap, plus at most the hairpin entries of the old and the new pod.
    assert!(report.iter().all(|r| (2..=4).contains(&r.2)), "{report:?}");
}
