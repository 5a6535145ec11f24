//! Two Services claiming one address: the incremental table must end where a full render of the
//! same model ends, whichever of them the change concerns.

use verdict_layout::{DesiredTable, RenderOptions};
use verdict_model::source::{Endpoint, EndpointPort, EndpointSlice, Node, Service, ServicePortSpec};
use verdict_model::{Cidr, ModelCache, ProxyConfig};

fn service(name: &str, ip: &str) -> Service {
    Service {
        namespace: "ns".into(),
        name: name.into(),
        cluster_ips: vec![ip.into()],
        ports: vec![ServicePortSpec { name: "http".into(), protocol: "TCP".into(), port: 80, node_port: None }],
        ..Service::default()
    }
}

fn slice(svc: &str, addr: &str) -> EndpointSlice {
    EndpointSlice {
        namespace: "ns".into(),
        name: format!("{svc}-1"),
        service_name: svc.into(),
        address_type: "IPv4".into(),
        ports: vec![EndpointPort { name: "http".into(), protocol: "TCP".into(), port: Some(8080) }],
        endpoints: vec![Endpoint { addresses: vec![addr.into()], ..Endpoint::default() }],
        trigger_time: None,
    }
}

fn cache() -> ModelCache {
    let config =
        ProxyConfig { cluster_cidrs: vec![Cidr::parse_tolerant("10.0.0.0/8").unwrap()], ..ProxyConfig::default() };
    let mut c = ModelCache::new(config, "n");
    c.set_node(Some(Node {
        name: "n".into(),
        addresses: vec![("InternalIP".into(), "192.168.0.2".into())],
        ..Node::default()
    }));
    c
}

/// Applies `step` to a cache whose table is up to date, then checks the incremental table
/// against a fresh one.
fn check(setup: impl Fn(&mut ModelCache), step: impl Fn(&mut ModelCache)) {
    let opts = RenderOptions::default();
    let mut c = cache();
    setup(&mut c);
    c.rebuild();
    let mut table = DesiredTable::new(c.model(), &opts);
    step(&mut c);
    for change in c.rebuild().changes {
        table.update(change.old.as_deref(), change.new.as_deref());
    }
    let fresh = DesiredTable::new(c.model(), &opts);
    assert!(
        table.ruleset().equivalent(fresh.ruleset()),
        "incremental:\n{}\nfull:\n{}",
        verdict_nft::text::listing(table.ruleset()),
        verdict_nft::text::listing(fresh.ruleset())
    );
}

#[test]
fn a_new_service_that_takes_an_address_over() {
    check(
        |c| {
            c.upsert_service(service("b", "172.30.0.1"));
            c.upsert_slice(slice("b", "10.1.0.2"));
        },
        |c| {
            c.upsert_service(service("a", "172.30.0.1"));
            c.upsert_slice(slice("a", "10.1.0.1"));
        },
    );
}

#[test]
fn a_new_service_that_loses_the_address_to_an_older_one() {
    check(
        |c| {
            c.upsert_service(service("a", "172.30.0.1"));
            c.upsert_slice(slice("a", "10.1.0.1"));
        },
        |c| {
            c.upsert_service(service("b", "172.30.0.1"));
            c.upsert_slice(slice("b", "10.1.0.2"));
        },
    );
}

#[test]
fn the_owner_goes_and_the_other_takes_the_address() {
    check(
        |c| {
            for (n, e) in [("a", "10.1.0.1"), ("b", "10.1.0.2")] {
                c.upsert_service(service(n, "172.30.0.1"));
                c.upsert_slice(slice(n, e));
            }
        },
        |c| c.remove_service("ns", "a"),
    );
}
