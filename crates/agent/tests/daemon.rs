//! The agent as a daemon (root only): endpoints, metrics, health, signals, cleanup.

use nix::sys::signal::Signal;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;
use verdict_e2e::agent_process::{AgentLaunch, AgentProcess};
use verdict_e2e::netns::Netns;
use verdict_e2e::require_kernel;

/// The agent for node1 in manifests mode, its state beside the manifests.
fn start(ns: &Netns, manifests: &Path, extra: &[&str]) -> AgentProcess {
    AgentLaunch::new(ns, env!("CARGO_BIN_EXE_verdict"), "daemon")
        .unwrap()
        .arg("run")
        .arg("--manifests")
        .arg(manifests)
        .args(["--hostname-override", "node1", "--cluster-cidr", "10.244.0.0/16"])
        .args(["--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256"])
        .args(["--min-sync-period", "100ms", "--sync-period", "1s", "--state-dir"])
        .arg(manifests.with_extension("state"))
        .args(extra)
        .spawn()
        .unwrap()
}

fn get(ns: &Netns, port: u16, path: &str) -> Option<(u16, String)> {
    let path = path.to_string();
    ns.run(move || {
        let mut s =
            TcpStream::connect_timeout(&format!("127.0.0.1:{port}").parse().unwrap(), Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
        Some((code, body))
    })
}

/// A test's manifests directory, inside a scratch directory that also holds the agent's state
/// beside it (removed when the test ends, pass or fail).
fn manifests_dir(tag: &str) -> (TempDir, std::path::PathBuf) {
    let scratch = TempDir::with_prefix(format!("verdict-daemon-{tag}-")).unwrap();
    let dir = scratch.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("node.yaml"),
        "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\nstatus: {addresses: [{type: InternalIP, address: 192.168.50.11}]}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("svc.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\nspec: {clusterIP: 172.30.0.10, ports: [{name: http, port: 80}]}\n",
    )
    .unwrap();
    write_slice(&dir, "10.244.1.10", None);
    (scratch, dir)
}

fn write_slice(dir: &std::path::Path, ip: &str, trigger: Option<&str>) {
    let annotations = trigger
        .map(|t| format!(", annotations: {{endpoints.kubernetes.io/last-change-trigger-time: \"{t}\"}}"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("slice.yaml"),
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: demo, labels: {{kubernetes.io/service-name: web}}{annotations}}}\naddressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints: [{{addresses: [{ip}]}}]\n"
        ),
    )
    .unwrap();
}

fn now_rfc3339() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%S.%NZ"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn table_lists(ns: &Netns, needle: &str) -> bool {
    ns.exec(&["nft", "list", "table", "inet", "kube-proxy"])
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(needle))
        .unwrap_or(false)
}

#[test]
fn endpoints_metrics_signals_and_cleanup() {
    require_kernel!();
    let ns = Netns::new("daemon").unwrap();
    let (_scratch, dir) = manifests_dir("m");
    let agent = start(&ns, &dir, &[]);
    agent.wait("the first sync", || table_lists(&ns, "10.244.1.10"));
    assert_eq!(get(&ns, 10249, "/proxyMode"), Some((200, "nftables".into())));
    agent.wait("healthz 200", || get(&ns, 10256, "/healthz").is_some_and(|(c, _)| c == 200));
    let (code, body) = get(&ns, 10256, "/livez").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("\"healthy\":true") && body.contains("\"lastUpdated\""), "{body}");

    // A changed file is reloaded; the slice's trigger time feeds network programming latency.
    std::thread::sleep(Duration::from_millis(50));
    write_slice(&dir, "10.244.1.11", Some(&now_rfc3339()));
    agent.wait("the reload", || table_lists(&ns, "10.244.1.11"));
    let (_, metrics) = get(&ns, 10249, "/metrics").unwrap();
    for name in [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds_count",
        "kubeproxy_network_programming_duration_seconds_count",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "kubeproxy_sync_proxy_rules_service_changes_total",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
        "verdict_table_foreign_changes_total",
        "kubeproxy_proxy_healthz_total",
        "kubeproxy_proxy_livez_total",
        "verdict_sync_transaction_operations_count",
        "verdict_sync_transaction_bytes_count",
    ] {
        assert!(metrics.contains(name), "/metrics lacks {name}:\n{metrics}");
    }
    let count = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(count("kubeproxy_sync_partial_proxy_rules_duration_seconds_count") >= 1.0, "{metrics}");
    assert!(count("kubeproxy_network_programming_duration_seconds_count") >= 1.0, "{metrics}");
    assert!(metrics.contains("kubeproxy_proxy_healthz_total{code=\"200\"}"), "{metrics}");

    // SIGTERM: exit 0, rules stay.
    agent.signal(Signal::SIGTERM).unwrap();
    let status = agent.wait_exit(Duration::from_secs(20)).unwrap();
    assert!(status.success(), "SIGTERM must exit 0: {status:?}\n{}", agent.log());
    assert!(table_lists(&ns, "10.244.1.11"), "rules must stay after SIGTERM");

    // --cleanup removes them.
    let out = ns.exec(&[env!("CARGO_BIN_EXE_verdict"), "run", "--cleanup", "--hostname-override", "node1"]).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        !ns.exec(&["nft", "list", "table", "inet", "kube-proxy"]).unwrap().status.success(),
        "the table must be gone"
    );
}

#[test]
fn healthz_fails_while_the_table_cannot_be_written_and_recovers() {
    require_kernel!();
    let ns = Netns::new("stuck").unwrap();
    let (_scratch, dir) = manifests_dir("s");
    // Another program owns a table with our name: the kernel refuses our writes (EPERM).
    let mut owner = Command::new("ip")
        .args(["netns", "exec", ns.name(), "nft", "-i"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    owner.stdin.as_mut().unwrap().write_all(b"add table inet kube-proxy { flags owner; }\n").unwrap();
    owner.stdin.as_mut().unwrap().flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let agent = start(&ns, &dir, &[]);
    // Health timeout is 2 x sync period = 2 s.
    agent.wait("healthz 503 while stuck", || get(&ns, 10256, "/healthz").is_some_and(|(c, _)| c == 503));
    let (code, body) = get(&ns, 10256, "/livez").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"healthy\":false"), "{body}");
    let (_, metrics) = get(&ns, 10249, "/metrics").unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kubeproxy_sync_proxy_rules_nftables_sync_failures_total") && !l.ends_with(" 0")),
        "failures must be counted:\n{metrics}"
    );
    // The owner goes away (its table with it); the agent's retry succeeds.
    drop(owner.stdin.take());
    let _ = owner.wait();
    agent.wait("healthz 200 after recovery", || get(&ns, 10256, "/healthz").is_some_and(|(c, _)| c == 200));
    assert!(table_lists(&ns, "10.244.1.10"));
}

/// Waits (at most 20 s) for the agent to exit by itself.
fn wait_exit(agent: &AgentProcess, what: &str) -> std::process::ExitStatus {
    agent.wait_exit(Duration::from_secs(20)).unwrap_or_else(|e| panic!("{what}: {e:#}"))
}

/// Holds a TCP port inside the namespace (a listener bound from a thread that entered it).
fn hold_port(ns: &Netns, port: u16) -> std::net::TcpListener {
    ns.run(move || std::net::TcpListener::bind(("127.0.0.1", port))).unwrap()
}

#[test]
fn a_busy_health_port_is_retried_while_proxying_unless_bind_address_hard_fail() {
    require_kernel!();
    let ns = Netns::new("busyport").unwrap();
    let (_scratch, dir) = manifests_dir("busy");
    let holder = hold_port(&ns, 10256);
    let agent = start(&ns, &dir, &[]);
    // The table is programmed while the port is taken, and one line says why health is missing.
    agent.wait("the table programmed", || table_lists(&ns, "172.30.0.10"));
    agent.wait("the bind failure logged", || agent.log().contains("trying again every 5s"));
    assert!(agent.try_wait().unwrap().is_none(), "the agent keeps proxying:\n{}", agent.log());
    drop(holder);
    // Retried every 5 s: health answers once the port is free.
    agent.wait("/healthz on the freed port", || get(&ns, 10256, "/healthz").is_some_and(|(c, _)| c == 200));
    drop(agent);

    let _holder = hold_port(&ns, 10256);
    let agent = start(&ns, &dir, &["--bind-address-hard-fail"]);
    let status = wait_exit(&agent, "bindAddressHardFail: the agent must exit");
    assert_eq!(status.code(), Some(1), "{}", agent.log());
    assert!(agent.log().contains("bindAddressHardFail"), "{}", agent.log());
}

#[test]
fn a_changed_config_file_makes_the_agent_exit_so_that_its_pod_restarts_with_it() {
    require_kernel!();
    let ns = Netns::new("cfgchange").unwrap();
    let (scratch, dir) = manifests_dir("cfg");
    let config = scratch.path().join("config.conf");
    std::fs::write(&config, "kind: KubeProxyConfiguration\nmode: nftables\n").unwrap();
    let agent = start(&ns, &dir, &["--config", config.to_str().unwrap()]);
    agent.wait("the table programmed", || table_lists(&ns, "172.30.0.10"));
    std::thread::sleep(Duration::from_secs(3));
    assert!(agent.try_wait().unwrap().is_none(), "an unchanged file keeps the agent:\n{}", agent.log());
    // A ConfigMap update swaps the file's content.
    std::fs::write(&config, "kind: KubeProxyConfiguration\nmode: nftables\nclusterCIDR: 10.9.0.0/16\n").unwrap();
    let status = wait_exit(&agent, "the agent must exit on a changed config");
    assert_eq!(status.code(), Some(1), "{}", agent.log());
    assert!(agent.log().contains("the --config file changed"), "{}", agent.log());
    assert!(table_lists(&ns, "172.30.0.10"), "rules stay in place");
}

/// The agent's process id: `ip netns exec` runs it as its child or in its place.
fn agent_pid(agent: &AgentProcess) -> u32 {
    let ip = agent.pid();
    let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let verdict = std::path::PathBuf::from(env!("CARGO_BIN_EXE_verdict"));
    if exe(&ip.to_string()).as_ref() == Some(&verdict) {
        return ip;
    }
    let children = std::fs::read_to_string(format!("/proc/{ip}/task/{ip}/children")).unwrap_or_default();
    children.split_whitespace().find(|c| exe(c).as_ref() == Some(&verdict)).and_then(|c| c.parse().ok()).unwrap_or(ip)
}

/// A capability set of a thread's status (`CapEff`, ...), as its bits.
fn cap_field(status: &str, name: &str) -> u64 {
    let hex = status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim).unwrap();
    u64::from_str_radix(hex, 16).unwrap()
}

#[test]
fn a_run_as_root_keeps_only_net_admin_and_net_bind_service_in_every_thread() {
    require_kernel!();
    const NET_BIND_SERVICE: u64 = 1 << 10;
    const NET_ADMIN: u64 = 1 << 12;
    let ns = Netns::new("caps").unwrap();
    let (_scratch, dir) = manifests_dir("caps");
    let agent = start(&ns, &dir, &[]);
    agent.wait("the table programmed", || table_lists(&ns, "172.30.0.10"));
    agent.wait("/healthz", || get(&ns, 10256, "/healthz").is_some_and(|(c, _)| c == 200));
    let pid = agent_pid(&agent);
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten().collect();
    assert!(tasks.len() > 2, "the agent runs several threads (tokio, sync): {}", tasks.len());
    for task in tasks {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap();
        let name = status.lines().next().unwrap_or_default().to_string();
        for set in ["CapEff", "CapPrm", "CapBnd"] {
            let bits = cap_field(&status, set);
            assert_eq!(bits, NET_ADMIN | NET_BIND_SERVICE, "{name}: {set} = {bits:#x}\n{}", agent.log());
        }
        assert_eq!(cap_field(&status, "CapInh") | cap_field(&status, "CapAmb"), 0, "{name}");
        assert!(status.contains("NoNewPrivs:\t1"), "{name}: no_new_privs");
    }
    assert!(agent.log().contains("capabilities dropped after start"), "{}", agent.log());
    assert!(!agent.log().contains("with other threads running"), "{}", agent.log());
    // Still able to do its job: a change is programmed after the drop.
    write_slice(&dir, "10.244.1.77", None);
    agent.wait("a change programmed after the drop", || table_lists(&ns, "10.244.1.77"));
}
