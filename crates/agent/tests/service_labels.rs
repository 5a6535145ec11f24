//! A Service labelled `service.kubernetes.io/headless` or `service.kubernetes.io/service-proxy-name`
//! (any value) is left to another proxy on every path, as kube-proxy's informer selector leaves
//! it: `render`, `explain --manifests`, `run --manifests` and `run` against an API server. The
//! same Service without the label is proxied (the control).

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tempfile::TempDir;
use verdict_e2e::agent_process::AgentLaunch;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent;
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

/// The labels each case puts on Service `web` and its slice: none (the control), then each
/// label that hands it away.
const CASES: &[Option<(&str, &str)>] = &[
    None,
    Some(("service.kubernetes.io/headless", "")),
    Some(("service.kubernetes.io/service-proxy-name", "other-proxy")),
    Some(("service.kubernetes.io/service-proxy-name", "")),
];

/// Node `node1`, Service `demo/sentinel` (always proxied: the table is programmed when it is
/// there) and Service `demo/web` 172.30.0.10:80 with `label`, each with a ready endpoint.
fn write_manifests(dir: &Path, label: Option<(&str, &str)>) {
    let extra = label.map(|(k, v)| format!(", {k}: {v:?}")).unwrap_or_default();
    let objects = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node1}}\nstatus: {{addresses: [{{type: InternalIP, address: 192.168.1.2}}]}}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {{name: sentinel, namespace: demo}}\n\
         spec: {{clusterIP: 172.30.0.9, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: sentinel-1, namespace: demo, labels: {{kubernetes.io/service-name: sentinel}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\n\
         endpoints: [{{addresses: [10.0.1.9], conditions: {{ready: true}}}}]\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: demo, labels: {{app: web{extra}}}}}\n\
         spec: {{clusterIP: 172.30.0.10, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: web-1, namespace: demo, labels: {{kubernetes.io/service-name: web{extra}}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\n\
         endpoints: [{{addresses: [10.0.1.1], conditions: {{ready: true}}}}]\n"
    );
    // Written whole, then renamed: the agent following the directory never reads half a file.
    let tmp = dir.join(".objects.tmp");
    std::fs::write(&tmp, objects).unwrap();
    std::fs::rename(&tmp, dir.join("objects.yaml")).unwrap();
}

fn verdict(args: &[&str], dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .args(["--hostname-override", "node1", "--manifests"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn render_and_explain_leave_a_labelled_service_out_and_proxy_it_without_the_label() {
    let scratch = TempDir::with_prefix("verdict-labels-").unwrap();
    for label in CASES {
        write_manifests(scratch.path(), *label);
        let table = verdict(&["render"], scratch.path());
        assert!(table.contains("172.30.0.9 . tcp . 80"), "{label:?}: the sentinel is proxied:\n{table}");
        assert_eq!(table.contains("172.30.0.10"), label.is_none(), "{label:?}:\n{table}");
        let explained = verdict(&["explain", "--src", "10.0.1.50", "--dst", "172.30.0.10:80"], scratch.path());
        let result = explained.lines().find_map(|l| l.strip_prefix("result: ")).unwrap_or_default();
        let want = match label {
            None => "DNAT to 10.0.1.1:8080 (source kept)",
            Some(_) => "not handled (passes unchanged)",
        };
        assert_eq!(result, want, "{label:?}:\n{explained}");
    }
}

/// `nft list table inet kube-proxy` in `ns`.
fn table(ns: &Netns) -> String {
    ns.exec(&["nft", "list", "table", "inet", "kube-proxy"])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[test]
fn run_with_manifests_leaves_a_labelled_service_out_and_follows_the_label_changing() {
    require_kernel!();
    let ns = Netns::new("labels-manifests").unwrap();
    let scratch = TempDir::with_prefix("verdict-labels-run-").unwrap();
    let dir = scratch.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    write_manifests(&dir, CASES[1]);
    let agent = AgentLaunch::new(&ns, env!("CARGO_BIN_EXE_verdict"), "labels")
        .unwrap()
        .arg("run")
        .arg("--manifests")
        .arg(&dir)
        .args(["--hostname-override", "node1", "--cleanup-leftovers=false", "--state-dir="])
        .args(["--metrics-bind-address=", "--healthz-bind-address=", "--min-sync-period=50ms"])
        .spawn()
        .unwrap();
    // From a labelled start, then through every case and back to the first.
    for label in CASES[1..].iter().chain(CASES).chain(&CASES[1..2]) {
        write_manifests(&dir, *label);
        agent.wait(&format!("{label:?} programmed"), || {
            let t = table(&ns);
            t.contains("172.30.0.9 . tcp . 80") && t.contains("172.30.0.10 . tcp . 80") == label.is_none()
        });
        // Settled, not passing through: the next syncs keep it so.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(table(&ns).contains("172.30.0.10"), label.is_none(), "{label:?}");
    }
}

#[test]
fn run_against_the_api_server_leaves_a_labelled_service_out() {
    require_kernel!();
    let lab = ApiLab::new("labels-api").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("demo", "sentinel", "172.30.0.9", 80));
    lab.server.apply(slice("demo", "sentinel", &["10.0.1.9".to_string()], None));
    let agent =
        lab_agent::start(&lab, env!("CARGO_BIN_EXE_verdict"), "labels-api", &["--min-sync-period=50ms"]).unwrap();
    for label in CASES[1..].iter().chain(CASES).chain(&CASES[1..2]) {
        let mut web = service("demo", "web", "172.30.0.10", 80);
        let mut web_slice = slice("demo", "web", &["10.0.1.1".to_string()], None);
        if let Some((k, v)) = label {
            web.metadata.labels.get_or_insert_default().insert(k.to_string(), v.to_string());
            web_slice.metadata.labels.get_or_insert_default().insert(k.to_string(), v.to_string());
        }
        lab.server.apply(web);
        lab.server.apply(web_slice);
        agent.wait(&format!("{label:?} programmed"), || {
            let t = lab.table();
            t.contains("172.30.0.9 . tcp . 80") && t.contains("172.30.0.10 . tcp . 80") == label.is_none()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(lab.table().contains("172.30.0.10"), label.is_none(), "{label:?}");
    }
}
