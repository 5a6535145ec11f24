//! The `verdict run` daemon against the test API server (root only): it programs what the API
//! says, publishes one Kubernetes Event per change of a Service it cannot program (or whose
//! health check port it cannot open), not one per sync, and serves healthCheckNodePorts.

use std::time::Duration;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent;
use verdict_e2e::require_kernel;

/// How many times Events about Service `name` were published: one per Event object, plus the
/// repeats a series counts.
fn publications(lab: &ApiLab, name: &str) -> (u64, Vec<String>) {
    let mut count = 0;
    let mut reasons = Vec::new();
    for e in lab.server.events() {
        let about = e.get("regarding").or_else(|| e.get("involvedObject")).cloned().unwrap_or_default();
        if about["kind"] != "Service" || about["name"] != name {
            continue;
        }
        let repeats = e["series"]["count"].as_u64().or(e["count"].as_u64()).unwrap_or(1).max(1);
        count += repeats;
        reasons.push(format!(
            "{} {}: {}",
            e["type"],
            e["reason"],
            e["note"].as_str().or(e["message"].as_str()).unwrap_or("")
        ));
    }
    (count, reasons)
}

fn bad(port: i32) -> k8s_openapi::api::core::v1::Service {
    service("ns1", "bad", "172.30.0.66", port)
}

#[test]
fn a_service_that_cannot_be_programmed_gets_one_event_per_change_not_per_sync() {
    require_kernel!();
    let lab = ApiLab::new("events").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    lab.server.apply(bad(70000));
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "api-events",
        &["--min-sync-period", "50ms", "--cleanup-leftovers=false"],
    )
    .unwrap();
    agent.wait("web programmed", || lab.table().contains("172.30.0.10 . tcp . 80"));
    agent.wait("an Event on the bad Service", || publications(&lab, "bad").0 >= 1);
    let (n, reasons) = publications(&lab, "bad");
    assert_eq!(n, 1, "{reasons:?}");
    assert!(
        reasons[0].contains("Warning") && reasons[0].contains("InvalidPort") && reasons[0].contains("70000"),
        "{reasons:?}"
    );
    assert!(!lab.table().contains("172.30.0.66"), "the bad Service is left out");

    // Other changes, other syncs: no new Event about the same problem.
    for k in 2..7 {
        let ip = format!("10.0.1.{k}");
        lab.server.apply(slice("ns1", "web", std::slice::from_ref(&ip), None));
        agent.wait("the change programmed", || lab.table().contains(&format!("{ip} . 8080")));
    }
    assert_eq!(publications(&lab, "bad").0, 1, "one Event per change, not per sync: {:?}", publications(&lab, "bad").1);

    // A different problem is a new change: one more Event.
    lab.server.apply(bad(70001));
    agent.wait("a second Event", || publications(&lab, "bad").0 >= 2);
    // Fixed: it is programmed, and nothing more is said.
    lab.server.apply(bad(8080));
    agent.wait("the fixed Service programmed", || lab.table().contains("172.30.0.66 . tcp . 8080"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(publications(&lab, "bad").0, 2, "{:?}", publications(&lab, "bad").1);
}

/// `GET /` on `addr` inside the lab's namespace: status, the weight header, the body.
fn health_check(lab: &ApiLab, addr: &str) -> Option<(u16, String, String)> {
    use std::io::{Read, Write};
    lab.ns.run(|| {
        let mut s = std::net::TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(s, "GET / HTTP/1.0\r\nHost: lb\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let weight = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("x-load-balancing-endpoint-weight:").map(|v| v.trim().to_string())
            })
            .unwrap_or_default();
        Some((code, weight, body.to_string()))
    })
}

#[test]
fn the_agent_serves_health_check_node_ports_of_external_local_services() {
    require_kernel!();
    let lab = ApiLab::new("hcnp").unwrap();
    // The node's address must exist in the namespace: health checks listen on it.
    lab.ns.ip(&["addr", "add", "192.168.0.2/32", "dev", "lo"]).unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    let mut lb = service("ns1", "shop", "172.30.0.20", 80);
    let spec = lb.spec.as_mut().unwrap();
    spec.type_ = Some("LoadBalancer".into());
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(30123);
    spec.ports.as_mut().unwrap()[0].node_port = Some(30080);
    lab.server.apply(lb);
    let mut local = slice("ns1", "shop", &["10.0.1.1".to_string(), "10.0.2.1".to_string()], None);
    local.endpoints[0].node_name = Some("n1".into());
    local.endpoints[1].node_name = Some("n2".into());
    lab.server.apply(local);
    // A second such Service, whose health check port some other process holds.
    let squatter = lab.ns.run(|| std::net::TcpListener::bind("192.168.0.2:30124")).unwrap();
    let mut squatted = service("ns1", "squatted", "172.30.0.21", 80);
    let spec = squatted.spec.as_mut().unwrap();
    spec.type_ = Some("LoadBalancer".into());
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(30124);
    spec.ports.as_mut().unwrap()[0].node_port = Some(30081);
    lab.server.apply(squatted);
    let mut squatted_local = slice("ns1", "squatted", &["10.0.1.9".to_string()], None);
    squatted_local.endpoints[0].node_name = Some("n1".into());
    lab.server.apply(squatted_local);

    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "api-hcnp",
        &["--min-sync-period", "50ms", "--cleanup-leftovers=false"],
    )
    .unwrap();
    agent.wait("the health check answers 200", || health_check(&lab, "192.168.0.2:30123").is_some_and(|r| r.0 == 200));
    agent.wait("an Event on the Service whose port is taken", || publications(&lab, "squatted").0 >= 1);
    let (n, said) = publications(&lab, "squatted");
    assert_eq!(n, 1, "{said:?}");
    assert!(
        said[0].contains("Warning")
            && said[0].contains("FailedToStartServiceHealthcheck")
            && said[0].contains(r#"node n1 failed to start healthcheck "ns1/squatted" on port 30124"#),
        "{said:?}"
    );
    let (_, weight, body) = health_check(&lab, "192.168.0.2:30123").unwrap();
    assert_eq!(weight, "1", "one local endpoint");
    assert_eq!(body, r#"{"service":{"namespace":"ns1","name":"shop"},"localEndpoints":1,"serviceProxyHealthy":true}"#);

    // The local endpoint goes away: 503 with weight 0.
    let mut remote_only = slice("ns1", "shop", &["10.0.2.1".to_string()], None);
    remote_only.endpoints[0].node_name = Some("n2".into());
    lab.server.apply(remote_only);
    agent.wait("the health check answers 503", || {
        health_check(&lab, "192.168.0.2:30123").is_some_and(|r| r.0 == 503 && r.1 == "0")
    });
    assert_eq!(publications(&lab, "squatted").0, 1, "a port that stays taken is announced once, not per sync");

    // The port is freed: the next sync opens it.
    drop(squatter);
    let mut back = slice("ns1", "shop", &["10.0.1.1".to_string()], None);
    back.endpoints[0].node_name = Some("n1".into());
    lab.server.apply(back);
    agent.wait("the freed health check port answers 200", || {
        health_check(&lab, "192.168.0.2:30124").is_some_and(|r| r.0 == 200 && r.1 == "1")
    });
}
