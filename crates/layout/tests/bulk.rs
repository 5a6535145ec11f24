//! Issue 23's one big object: 50 ports x 20,000 externalIPs (about 313 KB of YAML). Ignored (it
//! is a measurement, not a check); run it alone, in release, under `/usr/bin/time -v` for the
//! peak memory:
//!
//! ```text
//! cargo test --release -p verdict-nft --test bulk -- --ignored --nocapture
//! ```
//!
//! `VERDICT_BULK_MAX` sets `max_elements_per_service` (default: the model's default, which
//! leaves this Service out); `VERDICT_BULK_PORTS` the number of ports (1 shows the cost of the
//! externalIP de-duplication alone).

use std::time::Instant;
use verdict_layout::{RenderOptions, render};
use verdict_model::source::{Service, ServicePortSpec};
use verdict_model::{ProxyConfig, build_model};

fn big_service(ports: i32) -> Service {
    Service {
        namespace: "attacker".into(),
        name: "big".into(),
        service_type: "ClusterIP".into(),
        cluster_ips: vec!["10.96.7.7".into()],
        ports: (0..ports)
            .map(|i| ServicePortSpec { name: format!("p{i}"), protocol: "TCP".into(), port: 1000 + i, node_port: None })
            .collect(),
        // 198.18.0.0/15 (benchmarking) holds 131,072 addresses.
        external_ips: (0..20_000u32).map(|i| format!("198.18.{}.{}", i / 256, i % 256)).collect(),
        ..Service::default()
    }
}

#[test]
#[ignore = "a measurement: run it alone, in release"]
fn fifty_ports_on_twenty_thousand_external_ips() {
    let mut config = ProxyConfig::default();
    if let Some(max) = std::env::var("VERDICT_BULK_MAX").ok().and_then(|m| m.parse().ok()) {
        config.max_elements_per_service = max;
    }
    let ports = std::env::var("VERDICT_BULK_PORTS").ok().and_then(|p| p.parse().ok()).unwrap_or(50);
    let services = [big_service(ports)];
    let started = Instant::now();
    let out = build_model(config, "n1", None, &[], &services, &[]);
    let built = started.elapsed();
    let started = Instant::now();
    let rs = render(&out.model, &RenderOptions::default());
    let rendered = started.elapsed();
    let elements: usize = rs.sets.values().map(|s| s.elements.len()).sum();
    let reasons: Vec<&str> = out.problems.iter().map(|p| p.reason).collect();
    println!(
        "build {built:?}, render {rendered:?}: {} ports, {elements} set elements, problems {reasons:?}",
        out.model.services.len()
    );
}
