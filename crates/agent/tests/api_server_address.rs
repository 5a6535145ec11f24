//! Issue 31: a tenant's Service cannot capture the agent's own connection to the API server
//! (CVE-2020-8554's class). The test API server listens on 192.0.2.1 in the lab's namespace,
//! the real `verdict run` connects there (its kubeconfig's server), and a Service of an
//! untrusted namespace lists 192.0.2.1 as an externalIP on the API server's port, with an
//! endpoint nobody answers on. The agent refuses that address (`ApiServerAddress`), programs
//! the rest of the Service, and still reaches the API server once its watches reconnect.

use k8s_openapi::api::core::v1::ServiceSpec;
use std::net::IpAddr;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent;
use verdict_e2e::require_kernel;

#[test]
fn a_service_cannot_capture_the_agents_connection_to_the_api_server() {
    require_kernel!();
    let api: IpAddr = "192.0.2.1".parse().unwrap();
    let lab = ApiLab::new_at("apiaddr", api).unwrap();
    let port = lab.server.addr().port();
    lab.server.apply(node("n1", "192.168.0.2"));
    let mut capture = service("attacker", "capture", "172.30.0.77", i32::from(port));
    capture.spec.get_or_insert_with(ServiceSpec::default).external_ips =
        Some(vec![api.to_string(), "192.0.2.9".into()]);
    lab.server.apply(capture);
    lab.server.apply(slice("attacker", "capture", &["10.0.1.99".to_string()], None));
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "api-address",
        &["--min-sync-period", "50ms", "--cleanup-leftovers=false"],
    )
    .unwrap();
    agent.wait("the capturing Service programmed", || lab.table().contains("172.30.0.77 . tcp"));
    let table = lab.table();
    assert!(table.contains(&format!("192.0.2.9 . tcp . {port}")), "the rest of the Service is programmed:\n{table}");
    assert!(!table.contains(&format!("{api} . tcp")), "the API server's address is not:\n{table}");
    assert!(agent.log().contains("ApiServerAddress"), "the problem is said:\n{}", agent.log_tail(40));

    // New connections to the API server: the watches reconnect and the agent still follows it.
    lab.server.break_watches();
    lab.server.apply(service("ns1", "later", "172.30.0.78", 80));
    agent.wait("a Service applied after the watches reconnected", || lab.table().contains("172.30.0.78 . tcp . 80"));
}
