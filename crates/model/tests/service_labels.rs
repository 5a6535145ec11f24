//! The labels that take a Service away from the default proxy, as kube-proxy's informer
//! selects (`!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`), whatever
//! their value: applied by the model itself, so that every source (the API's watch, a manifests
//! directory, `render`, `explain`) leaves the same Services out, in the batch build and in the
//! incremental cache alike.

use std::collections::BTreeMap;
use verdict_model::source::{Service, ServicePortSpec};
use verdict_model::{HEADLESS_LABEL, ModelCache, ProxyConfig, SERVICE_PROXY_NAME_LABEL, build_model};

fn service(name: &str, cluster_ip: &str, labels: &[(&str, &str)]) -> Service {
    Service {
        namespace: "ns".into(),
        name: name.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        cluster_ips: vec![cluster_ip.into()],
        ports: vec![ServicePortSpec { name: "p".into(), protocol: "TCP".into(), port: 80, node_port: None }],
        ..Service::default()
    }
}

fn proxied(services: &[Service]) -> Vec<String> {
    let batch = build_model(ProxyConfig::default(), "n1", None, &[], services, &[]);
    let mut names: Vec<String> = batch.model.services.keys().map(|k| k.name.to_string()).collect();
    let mut cache = ModelCache::new(ProxyConfig::default(), "n1");
    for svc in services {
        cache.upsert_service(svc.clone());
    }
    cache.rebuild();
    let incremental: Vec<String> = cache.model().services.keys().map(|k| k.name.to_string()).collect();
    assert_eq!(incremental, names, "the cache and the batch build agree");
    assert!(batch.problems.is_empty(), "left out silently, as upstream: {:?}", batch.problems);
    names.dedup();
    names
}

#[test]
fn a_service_labelled_headless_or_for_another_proxy_is_left_out_whatever_the_value() {
    let services = [
        service("plain", "10.96.0.10", &[("app", "web")]),
        service("headless-empty", "10.96.0.11", &[(HEADLESS_LABEL, "")]),
        service("headless-any", "10.96.0.12", &[(HEADLESS_LABEL, "yes")]),
        service("other-proxy", "10.96.0.13", &[(SERVICE_PROXY_NAME_LABEL, "other")]),
        service("empty-proxy-name", "10.96.0.14", &[(SERVICE_PROXY_NAME_LABEL, "")]),
    ];
    assert_eq!(proxied(&services), ["plain"]);
}

#[test]
fn removing_the_label_brings_the_service_in_and_adding_it_takes_it_out() {
    let mut cache = ModelCache::new(ProxyConfig::default(), "n1");
    cache.upsert_service(service("web", "10.96.0.10", &[(HEADLESS_LABEL, "")]));
    cache.rebuild();
    assert!(cache.model().services.is_empty());
    cache.upsert_service(service("web", "10.96.0.10", &[]));
    cache.rebuild();
    assert_eq!(cache.model().services.len(), 1);
    cache.upsert_service(service("web", "10.96.0.10", &[(SERVICE_PROXY_NAME_LABEL, "x")]));
    cache.rebuild();
    assert!(cache.model().services.is_empty());
}

#[test]
fn the_rule_and_the_watchs_selector_are_one() {
    assert_eq!(
        verdict_model::proxied_services_selector(),
        "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless",
        "kube-proxy's labelSelector (cmd/kube-proxy/app/server.go)"
    );
    for labels in [&[][..], &[(HEADLESS_LABEL, "")], &[(SERVICE_PROXY_NAME_LABEL, "a")], &[("other", "x")]] {
        let map: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let selected = !labels.iter().any(|(k, _)| [HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL].contains(k));
        assert_eq!(verdict_model::proxied_by_labels(&map), selected, "{labels:?}");
    }
}
