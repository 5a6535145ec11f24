//! verdict as the monitoring operators already run sees it (issue 33): the real binary against
//! the test API server in a network namespace of its own (root only), and, where Debian's
//! `prometheus` package is installed (`cargo xtask test` installs it), a real Prometheus
//! scraping it as job `kube-proxy` every second, asked every query of kubernetes-mixin's
//! "Kubernetes / Proxy" dashboard, every panel of verdict's dashboard and every alert of
//! verdict's rules through its HTTP API; `promtool` checks the rules, runs their unit tests and
//! lints a scrape.

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent::{self, scrape};
use verdict_e2e::require_kernel;

/// `GET path` on the lab's 127.0.0.1:`port`: status and body.
fn get(lab: &ApiLab, port: u16, path: &str) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    lab.ns.run(move || {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(request.as_bytes()).ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
        Some((code, body))
    })
}

/// The value of the series written exactly `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lab_with_a_service(tag: &str) -> ApiLab {
    let lab = ApiLab::new(tag).unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    lab
}

#[test]
fn health_configz_slis_periodic_syncs_api_metrics_and_node_deletion() {
    require_kernel!();
    let lab = lab_with_a_service("monhealth");
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "monhealth",
        &["--iptables-sync-period", "1s", "--cleanup-leftovers=false"],
    )
    .unwrap();
    agent.wait("web programmed", || lab.table().contains("172.30.0.10 . tcp . 80"));

    // The metrics port's /healthz is component-base's, counted in /metrics/slis.
    assert_eq!(get(&lab, 10249, "/healthz"), Some((200, "ok".to_string())));
    let (code, slis) = get(&lab, 10249, "/metrics/slis").unwrap();
    assert_eq!(code, 200);
    let pings = value(&slis, "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"}");
    assert!(pings.is_some_and(|n| n >= 1.0), "{slis}");
    // /configz: the configuration in effect, under upstream's group.
    let (code, configz) = get(&lab, 10249, "/configz").unwrap();
    assert_eq!(code, 200);
    let configz: Value = serde_json::from_str(&configz).unwrap();
    let config = &configz["kubeproxy.config.k8s.io"];
    assert_eq!(config["kind"], "KubeProxyConfiguration", "{configz}");
    assert_eq!(config["clusterCIDR"], "10.0.0.0/8", "{configz}");
    assert_eq!(config["hostnameOverride"], "n1", "{configz}");
    assert_eq!(config["iptables"]["syncPeriod"], "1s", "{configz}");

    // The health port: a healthy answer's lastUpdated is the current time, as upstream's.
    std::thread::sleep(Duration::from_millis(1500));
    let (code, health) = get(&lab, 10256, "/healthz").unwrap();
    assert_eq!(code, 200, "{health}");
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["lastUpdated"], health["currentTime"], "{health}");

    // A quiet table is synced every second, and nothing is written.
    let synced = "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"}";
    let text = scrape(&lab);
    let (count, written) = (value(&text, synced).unwrap(), value(&text, "verdict_sync_transaction_operations_sum"));
    std::thread::sleep(Duration::from_millis(3500));
    let text = scrape(&lab);
    assert!(value(&text, synced).unwrap() >= count + 2.0, "{count} then:\n{text}");
    assert_eq!(value(&text, "verdict_sync_transaction_operations_sum"), written, "a periodic sync wrote:\n{text}");
    let stamp = value(&text, "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}").unwrap();
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(now - stamp < 3.0, "the last sync {:.1} s ago on a quiet table", now - stamp);

    // client-go's families for the API traffic, and component-base's build information.
    let host = lab.server.addr().to_string();
    let lists = format!("rest_client_requests_total{{code=\"200\",method=\"GET\",host=\"{host}\"}}");
    assert!(value(&text, &lists).is_some_and(|n| n >= 4.0), "{lists}:\n{text}");
    let latency = format!("rest_client_request_duration_seconds_bucket{{verb=\"GET\",host=\"{host}\",le=\"60\"}}");
    assert!(value(&text, &latency).is_some_and(|n| n >= 4.0), "{latency}:\n{text}");
    let waited = format!("rest_client_rate_limiter_duration_seconds_count{{verb=\"GET\",host=\"{host}\"}}");
    assert!(value(&text, &waited).is_some_and(|n| n >= 4.0), "{waited}:\n{text}");
    assert!(text.lines().any(|l| l.starts_with("kubernetes_build_info{") && l.ends_with(" 1")), "{text}");

    // The Node deleted: the agent exits (as kube-proxy 1.36), and leaves its rules.
    lab.server.delete::<Node>(None, "n1");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = agent.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running 15 s after its Node was deleted:\n{}", agent.log_tail(20));
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(1), "{}", agent.log_tail(20));
    assert!(agent.log().contains("the Node n1 was deleted"), "{}", agent.log_tail(20));
    assert!(lab.table().contains("172.30.0.10 . tcp . 80"), "the rules stay in place");
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const PROMETHEUS_PORT: u16 = 19090;

/// Asks the lab's Prometheus `expr`: the API's answer (status "success" or the error).
fn query(lab: &ApiLab, expr: &str) -> Value {
    let (_, body) = get(lab, PROMETHEUS_PORT, &format!("/api/v1/query?query={}", encode(expr)))
        .unwrap_or_else(|| panic!("Prometheus did not answer {expr}"));
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{expr}: {e}: {body}"))
}

/// Whether an answer holds at least one sample that is a number.
fn has_numbers(answer: &Value) -> bool {
    let result = answer["data"]["result"].as_array().cloned().unwrap_or_default();
    result.iter().any(|r| r["value"][1].as_str().is_some_and(|v| v.parse::<f64>().is_ok_and(|v| !v.is_nan())))
}

/// Grafana's variables, as a dashboard showing every instance of cluster "test" sends them.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$cluster", "test").replace("$instance", ".+").replace("$__rate_interval", "30s")
}

/// The queries of the fixture file (comments and blank lines left out).
fn mixin_queries() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo().join("crates/agent/tests/fixtures/monitoring/kubernetes-mixin-proxy.txt"))
            .unwrap();
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(str::to_string).collect()
}

/// Every target of verdict's dashboard, after checking the JSON's shape.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/monitoring/dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard.json is JSON");
    assert_eq!(dashboard["uid"], "verdict-proxy");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().expect("a panel id")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let mut out = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("a title").to_string();
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("{title}: targets"));
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            out.push((title.clone(), t["expr"].as_str().unwrap_or_else(|| panic!("{title}: expr")).to_string()));
        }
    }
    out
}

/// The rules file in the PrometheusRule's `spec`, written to `dir/rules.yaml`; the alerts.
fn write_rules(dir: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/monitoring/prometheusrule.yaml")).unwrap();
    let rule: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    std::fs::write(dir.join("rules.yaml"), serde_norway::to_string(&rule["spec"]).unwrap()).unwrap();
    let mut alerts = Vec::new();
    for group in rule["spec"]["groups"].as_sequence().unwrap() {
        for r in group["rules"].as_sequence().unwrap() {
            alerts.push((r["alert"].as_str().unwrap().to_string(), r["expr"].as_str().unwrap().to_string()));
        }
    }
    alerts
}

fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool").args(args).current_dir(dir).output().expect("running promtool");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Queries the mixin leaves empty on a healthy node, as it does for kube-proxy: API answers
/// no API server gives a healthy client (redirects, client and server errors), and the Go
/// runtime's goroutines (verdict has none).
fn empty_by_nature(expr: &str) -> bool {
    ["code=~\"3..\"", "code=~\"4..\"", "code=~\"5..\"", "go_goroutines"].iter().any(|m| expr.contains(m))
}

#[test]
fn prometheus_reads_kubernetes_mixins_proxy_dashboard_verdicts_dashboard_and_alerts() {
    require_kernel!();
    let installed = Command::new("prometheus").arg("--version").output().is_ok_and(|o| o.status.success())
        && Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("********************************************************************************");
        eprintln!("*** SKIPPED: prometheus/promtool are not installed (Debian's `prometheus` package;");
        eprintln!("*** `cargo xtask test` installs it as root): the dashboards and alerts are not checked");
        eprintln!("********************************************************************************");
        return;
    }
    let scratch = tempfile::TempDir::with_prefix("verdict-prometheus-").unwrap();
    let dir = scratch.path();
    // The rules and their unit tests, offline.
    let alerts = write_rules(dir);
    assert_eq!(alerts.len(), 6, "{alerts:?}");
    let (ok, out) = promtool(dir, &["check", "rules", "rules.yaml"]);
    assert!(ok && out.contains("SUCCESS: 6 rules found"), "{out}");
    std::fs::copy(repo().join("crates/agent/tests/fixtures/monitoring/alerts.test.yaml"), dir.join("alerts.test.yaml"))
        .unwrap();
    let (ok, out) = promtool(dir, &["test", "rules", "alerts.test.yaml"]);
    assert!(ok && out.contains("SUCCESS"), "{out}");

    let mut lab = lab_with_a_service("monprom");
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "monprom",
        &["--sync-period", "2s", "--cleanup-leftovers=false", "--service-counters=all"],
    )
    .unwrap();
    agent.wait("web programmed", || lab.table().contains("172.30.0.10 . tcp . 80"));
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         rule_files: [{}/rules.yaml]\n\
         scrape_configs:\n\
         - job_name: kube-proxy\n  static_configs:\n  - targets: ['127.0.0.1:10249']\n    labels: {{cluster: test}}\n",
        dir.display()
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let (config_arg, data_arg) = (
        format!("--config.file={}/prometheus.yml", dir.display()),
        format!("--storage.tsdb.path={}/data", dir.display()),
    );
    let listen = format!("--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}");
    lab.ns.spawn(&["prometheus", &config_arg, &data_arg, &listen, "--log.level=warn"]).unwrap();

    // 40 s of a node's life: Services and endpoints change now and then (with trigger times,
    // for network programming latency), and the table is otherwise quiet.
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(40) {
        round += 1;
        let ip = format!("10.0.1.{}", 1 + round % 200);
        lab.server.apply(slice("ns1", "web", &[ip], Some(SystemTime::now())));
        if round % 3 == 0 {
            lab.server.apply(service("ns1", &format!("svc{round}"), &format!("172.30.1.{round}"), 80));
        }
        // A Service verdict cannot program (its port out of range): a problem Event, POSTed.
        lab.server.apply(service("ns1", "bad", "172.30.0.66", 70000 + round));
        // Watches end and start again, as API servers end them every few minutes.
        lab.server.break_watches();
        std::thread::sleep(Duration::from_secs(4));
    }
    let up = query(&lab, "count_over_time(up{job=\"kube-proxy\"}[1m])");
    assert!(has_numbers(&up), "Prometheus scraped nothing: {up}");
    assert_eq!(query(&lab, "up{job=\"kube-proxy\"}")["data"]["result"][0]["value"][1], "1", "the scrape fails");

    let mut failures = Vec::new();
    let mixin = mixin_queries();
    assert_eq!(mixin.len(), 14, "{mixin:?}");
    for expr in &mixin {
        let answer = query(&lab, &as_grafana_sends(expr));
        match (answer["status"] == "success", empty_by_nature(expr), has_numbers(&answer)) {
            (false, _, _) => failures.push(format!("mixin: {expr}: {answer}")),
            (true, false, false) => failures.push(format!("mixin, no data: {expr}: {answer}")),
            _ => {}
        }
    }
    for (title, expr) in dashboard_queries() {
        let answer = query(&lab, &as_grafana_sends(&expr));
        if answer["status"] != "success" || !has_numbers(&answer) {
            failures.push(format!("verdict's dashboard, {title}: {expr}: {answer}"));
        }
    }
    // Every alert's expression evaluates; on this healthy node none is pending or firing.
    for (alert, expr) in &alerts {
        let answer = query(&lab, expr);
        if answer["status"] != "success" {
            failures.push(format!("alert {alert}: {expr}: {answer}"));
        }
    }
    let (_, active) = get(&lab, PROMETHEUS_PORT, "/api/v1/alerts").unwrap();
    let active: Value = serde_json::from_str(&active).unwrap();
    let rules_loaded = get(&lab, PROMETHEUS_PORT, "/api/v1/rules").unwrap().1;
    assert!(rules_loaded.contains("VerdictTableUnsynced"), "Prometheus did not load the rules: {rules_loaded}");
    if !active["data"]["alerts"].as_array().is_some_and(Vec::is_empty) {
        failures.push(format!("alerts active on a healthy node: {active}"));
    }
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));

    // promtool's lint of a scrape: clean but for the name upstream has too.
    let (code, metrics) = get(&lab, 10249, "/metrics").unwrap();
    assert_eq!(code, 200);
    std::fs::write(dir.join("scrape.txt"), metrics).unwrap();
    let out =
        Command::new("sh").arg("-c").arg("promtool check metrics < scrape.txt").current_dir(dir).output().unwrap();
    let lint = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let problems: Vec<&str> = lint
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !l.starts_with("kubeproxy_sync_proxy_rules_no_local_endpoints_total "))
        .collect();
    assert!(problems.is_empty(), "promtool check metrics:\n{lint}");
    drop(agent);
}
