//! Every kustomization under `deploy/` renders (`kubectl kustomize`, offline), every object it
//! yields parses as its Kubernetes type without losing a field (a typo fails here, not in a
//! cluster), and the DaemonSets say what a node agent must: host network, node-critical,
//! every taint tolerated, capabilities instead of privileged, probes on /livez and /healthz.
//! The KubeProxyConfiguration shipped is accepted by `verdict` itself.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Renders a kustomization directory with kubectl (or a standalone kustomize).
fn kustomize(dir: &Path) -> String {
    let attempts: [(&str, &[&str]); 2] = [("kubectl", &["kustomize"]), ("kustomize", &["build"])];
    for (program, args) in attempts {
        match Command::new(program).args(args).arg(dir).output() {
            Ok(out) if out.status.success() => return String::from_utf8(out.stdout).unwrap(),
            Ok(out) => panic!("{program} {args:?} {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr)),
            Err(_) => continue,
        }
    }
    panic!(
        "neither kubectl nor kustomize is installed: this test renders deploy/ with one of them (.ci/run installs kubectl)"
    )
}

/// Parses `doc` as `T` and checks that serializing it back gives the same document: a field
/// the type does not know (a typo) would be lost.
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value, what: &str) -> T {
    let object: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&object).unwrap();
    assert_eq!(&back, doc, "{what}: some field is not part of the Kubernetes type (typo?)");
    object
}

struct Rendered {
    daemonsets: Vec<DaemonSet>,
    config_maps: Vec<ConfigMap>,
    roles: Vec<ClusterRole>,
    bindings: Vec<ClusterRoleBinding>,
}

fn render(name: &str) -> Rendered {
    let text = kustomize(&deploy().join(name));
    let mut out = Rendered { daemonsets: vec![], config_maps: vec![], roles: vec![], bindings: vec![] };
    for doc in serde_norway::Deserializer::from_str(&text) {
        let doc: Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let what = format!("{name}: {kind} {}", doc["metadata"]["name"]);
        match kind.as_str() {
            "DaemonSet" => out.daemonsets.push(typed(&doc, &what)),
            "ConfigMap" => out.config_maps.push(typed(&doc, &what)),
            "ClusterRole" => out.roles.push(typed(&doc, &what)),
            "ClusterRoleBinding" => out.bindings.push(typed(&doc, &what)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(&doc, &what)),
            "Namespace" => drop(typed::<Namespace>(&doc, &what)),
            other => panic!("{what}: unexpected kind {other}"),
        }
    }
    out
}

fn check_agent(ds: &DaemonSet, what: &str) {
    let spec = ds.spec.as_ref().unwrap();
    let strategy = spec.update_strategy.as_ref().unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"), "{what}");
    let unavailable = strategy.rolling_update.as_ref().unwrap().max_unavailable.as_ref().unwrap();
    assert_eq!(*unavailable, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1), "{what}");
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.host_network, Some(true), "{what}: host network");
    let seccomp = pod.security_context.as_ref().and_then(|sc| sc.seccomp_profile.as_ref());
    assert_eq!(seccomp.map(|p| p.type_.as_str()), Some("RuntimeDefault"), "{what}: the pod's seccomp profile");
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"), "{what}");
    let tolerations = pod.tolerations.as_ref().unwrap();
    assert!(
        tolerations.iter().any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()),
        "{what}: tolerate all"
    );
    // The conntrack sysctls: a privileged init container runs `--init-only` and exits.
    let init = pod.init_containers.iter().flatten().find(|c| c.name == "conntrack-sysctls");
    let init = init.unwrap_or_else(|| panic!("{what}: no conntrack-sysctls init container"));
    assert!(init.command.iter().flatten().any(|a| a == "--init-only"), "{what}: {:?}", init.command);
    assert_eq!(
        init.security_context.as_ref().and_then(|s| s.privileged),
        Some(true),
        "{what}: /proc/sys is read-only otherwise"
    );
    // Cluster DNS is a Service: nothing proxies it before verdict runs.
    assert_ne!(pod.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"), "{what}: dnsPolicy");
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_ne!(sc.privileged, Some(true), "{what}: not privileged");
    let add = sc.capabilities.as_ref().unwrap().add.clone().unwrap();
    assert!(add.contains(&"NET_ADMIN".to_string()), "{what}: NET_ADMIN");
    let path =
        |p: &Option<k8s_openapi::api::core::v1::Probe>| p.as_ref().unwrap().http_get.as_ref().unwrap().path.clone();
    assert_eq!(path(&c.liveness_probe).as_deref(), Some("/livez"), "{what}");
    assert_eq!(path(&c.readiness_probe).as_deref(), Some("/healthz"), "{what}");
    let mounts = c.volume_mounts.as_ref().unwrap();
    assert!(
        mounts.iter().any(|m| m.mount_path == "/lib/modules" && m.read_only == Some(true)),
        "{what}: /lib/modules ro"
    );
}

/// Only reads, and Events: no wildcard, nothing else writable.
fn check_least_privilege(role: &ClusterRole) {
    for rule in role.rules.as_ref().unwrap() {
        let resources = rule.resources.clone().unwrap_or_default();
        assert!(!rule.verbs.iter().any(|v| v == "*") && !resources.iter().any(|r| r == "*"), "{rule:?}");
        let writes: Vec<&String> =
            rule.verbs.iter().filter(|v| !["get", "list", "watch"].contains(&v.as_str())).collect();
        if !writes.is_empty() {
            assert_eq!(resources, ["events"], "only Events may be written: {rule:?}");
            assert!(writes.iter().all(|v| ["create", "patch"].contains(&v.as_str())), "{rule:?}");
        }
    }
    let readable: Vec<String> =
        role.rules.as_ref().unwrap().iter().flat_map(|r| r.resources.clone().unwrap_or_default()).collect();
    for needed in ["services", "endpointslices", "nodes", "servicecidrs", "events"] {
        assert!(readable.iter().any(|r| r == needed), "the role must cover {needed}");
    }
}

/// `verdict render --config <the shipped config>` accepts it.
fn check_config_accepted(cm: &ConfigMap) {
    let text = &cm.data.as_ref().unwrap()["config.conf"];
    let dir = std::env::temp_dir().join(format!("verdict-deploy-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("config.conf"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["render", "--hostname-override", "n1", "--config"])
        .arg(dir.join("config.conf"))
        .arg("--manifests")
        .arg(dir.join("manifests"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "verdict refuses the shipped config: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_base_renders_and_parses() {
    let r = render("base");
    assert_eq!(r.daemonsets.len(), 1);
    check_agent(&r.daemonsets[0], "base DaemonSet");
    check_least_privilege(&r.roles[0]);
    assert_eq!(r.bindings[0].subjects.as_ref().unwrap()[0].name, "verdict");
    check_config_accepted(&r.config_maps[0]);
    check_real_api_server(&r.daemonsets[0], &r.config_maps[0], "");
}

/// The agent reaches the API server at the address in the ConfigMap's `api-server` key, not
/// through the `kubernetes` ClusterIP (left empty, in-cluster configuration is that ClusterIP,
/// with a warning); `want` is the value the overlay sets.
fn check_real_api_server(ds: &DaemonSet, cm: &ConfigMap, want: &str) {
    let c = &ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
    assert!(c.args.iter().flatten().any(|a| a == "--master=$(API_SERVER)"), "{:?}", c.args);
    let env = c.env.iter().flatten().find(|e| e.name == "API_SERVER").expect("API_SERVER");
    let key = env.value_from.as_ref().and_then(|v| v.config_map_key_ref.as_ref()).expect("from the ConfigMap");
    assert_eq!((key.name.as_str(), key.key.as_str()), ("verdict", "api-server"));
    assert_eq!(cm.data.as_ref().unwrap().get("api-server").map(String::as_str), Some(want));
}

#[test]
fn the_kind_overlay_uses_the_loaded_image_and_kinds_pod_network() {
    let r = render("overlays/kind");
    let c = &r.daemonsets[0].spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.image.as_deref(), Some("verdict:dev"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
    check_agent(&r.daemonsets[0], "kind DaemonSet");
    let config = &r.config_maps[0].data.as_ref().unwrap()["config.conf"];
    assert!(config.contains("clusterCIDR: 10.244.0.0/16"), "{config}");
    check_config_accepted(&r.config_maps[0]);
    check_real_api_server(&r.daemonsets[0], &r.config_maps[0], "https://verdict-e2e-control-plane:6443");
}

#[test]
fn the_kubeadm_overlay_replaces_kube_proxy_in_place() {
    let r = render("overlays/kubeadm");
    let ds = &r.daemonsets[0];
    assert_eq!(ds.metadata.name.as_deref(), Some("kube-proxy"));
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
    check_agent(ds, "kubeadm DaemonSet");
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("kube-proxy"));
    let command = pod.containers[0].command.clone().unwrap();
    assert!(command[0].ends_with("/kube-proxy"), "{command:?}");
    assert_eq!(command[1..], ["--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"]);
    let volumes = pod.volumes.as_ref().unwrap();
    assert!(
        volumes.iter().any(|v| v.config_map.as_ref().is_some_and(|c| c.name == "kube-proxy")),
        "kubeadm's ConfigMap"
    );
    assert!(r.config_maps.is_empty(), "kubeadm's own kube-proxy ConfigMap is used, not a new one");
    assert_eq!(r.bindings[0].subjects.as_ref().unwrap()[0].name, "kube-proxy");
    check_least_privilege(&r.roles[0]);
}

#[test]
fn the_kind_cluster_has_no_kube_proxy_and_two_workers() {
    let text = std::fs::read_to_string(deploy().join("kind/cluster.yaml")).unwrap();
    let doc: Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(doc["networking"]["kubeProxyMode"], "none");
    let roles: Vec<&str> = doc["nodes"].as_array().unwrap().iter().map(|n| n["role"].as_str().unwrap()).collect();
    assert_eq!(roles.iter().filter(|r| **r == "worker").count(), 2, "{roles:?}");
}

#[test]
fn the_rollback_hands_each_node_back_only_once_kube_proxy_serves() {
    let r = render("rollback");
    assert_eq!(r.daemonsets.len(), 1, "one DaemonSet, nothing else");
    assert!(r.roles.is_empty() && r.bindings.is_empty() && r.config_maps.is_empty());
    let ds = &r.daemonsets[0];
    assert_eq!(ds.metadata.name.as_deref(), Some("verdict-handback"));
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
    let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod.host_network, Some(true), "it reads the node's own rules");
    assert!(pod.tolerations.iter().flatten().any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()));
    let c = &pod.containers[0];
    let command = c.command.clone().unwrap();
    assert_eq!(command[1..], ["cleanup", "--after-kube-proxy", "--keep-running"]);
    let probe = c.readiness_probe.as_ref().and_then(|p| p.exec.as_ref()).and_then(|e| e.command.clone()).unwrap();
    assert_eq!(probe[1..], ["cleanup", "--check"]);
    let sc = c.security_context.as_ref().unwrap();
    assert_ne!(sc.privileged, Some(true));
    let add = sc.capabilities.as_ref().unwrap().add.clone().unwrap();
    assert_eq!(add, ["NET_ADMIN", "NET_RAW"]);
    // The commands it runs parse as the binary reads them.
    for args in [&command[1..], &probe[1..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_verdict")).args(args).arg("--help").output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The PodMonitor selects the pods of both DaemonSets verdict ships and scrapes a port their
/// agent container names; the dashboard ConfigMap holds the dashboard JSON as Grafana's sidecar
/// looks for it. (The rules themselves are checked by promtool in tests/monitoring.rs.)
#[test]
fn the_monitoring_objects_scrape_the_agents_verdict_ships() {
    let text = kustomize(&deploy().join("monitoring"));
    let docs: Vec<Value> =
        serde_norway::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
    let of_kind = |kind: &str| docs.iter().filter(|d| d["kind"] == kind).collect::<Vec<_>>();
    let [monitor] = of_kind("PodMonitor")[..] else { panic!("one PodMonitor: {text}") };
    assert_eq!(of_kind("PrometheusRule").len(), 1, "{text}");
    let [dashboard] = of_kind("ConfigMap")[..] else { panic!("one ConfigMap: {text}") };
    assert_eq!(docs.len(), 3, "nothing else: {text}");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(dashboard["data"]["verdict.json"].as_str().unwrap()).unwrap();
    assert!(json["panels"].as_array().is_some_and(|p| !p.is_empty()), "the dashboard has panels");

    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let relabelings = endpoint["relabelings"].as_array().unwrap();
    let rule = |target: &str| relabelings.iter().find(|r| r["targetLabel"] == target);
    assert_eq!(
        rule("job").map(|r| &r["replacement"]),
        Some(&Value::from("kube-proxy")),
        "kubernetes-mixin selects job=\"kube-proxy\""
    );
    let address = rule("__address__").expect("the address is set from the pod's");
    assert_eq!(address["sourceLabels"][0], "__meta_kubernetes_pod_ip");
    assert_eq!(address["replacement"], "$1:10249");
    let keep = relabelings.iter().find(|r| r["action"] == "keep").expect("one target per pod");
    assert_eq!(keep["sourceLabels"][0], "__meta_kubernetes_pod_container_port_name");
    let kept = |name: &str| keep["regex"].as_str().unwrap().split('|').any(|alternative| alternative == name);
    let selected = monitor["spec"]["selector"]["matchExpressions"][0]["values"].as_array().unwrap();
    for overlay in ["base", "overlays/kubeadm"] {
        let r = render(overlay);
        let pod = r.daemonsets[0].spec.as_ref().unwrap().template.clone();
        let app = pod.metadata.unwrap().labels.unwrap()["k8s-app"].clone();
        assert!(selected.iter().any(|v| v == &app), "{overlay}: pods labelled k8s-app={app} are not selected");
        // Prometheus makes a target per container port (one for a pod naming none): exactly
        // one of them is kept, and only the metrics port (or the pod) goes to 10249.
        let ports = pod.spec.unwrap().containers[0].ports.clone().unwrap_or_default();
        let names: Vec<String> = match ports.is_empty() {
            true => vec![String::new()],
            false => ports.iter().map(|p| p.name.clone().unwrap_or_default()).collect(),
        };
        let targets: Vec<&String> = names.iter().filter(|n| kept(n)).collect();
        assert_eq!(targets.len(), 1, "{overlay}: ports {names:?} give {} targets", targets.len());
        if let Some(metrics) = ports.iter().find(|p| p.name.as_deref() == Some(targets[0].as_str())) {
            assert_eq!(metrics.container_port, 10249, "{overlay}");
        }
    }
}
