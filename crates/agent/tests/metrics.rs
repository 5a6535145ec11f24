//! `/metrics` as upstream's dashboards read it: the per-family series with `ip_family`,
//! histograms with upstream's buckets, pending changes that rise and fall, and the process
//! collector's families. The real binary and the test API server, in a network namespace of
//! its own (root only).

use std::time::SystemTime;
use verdict_e2e::apilab::{ApiLab, node, service, slice};
use verdict_e2e::lab_agent::{self, scrape};
use verdict_e2e::require_kernel;

/// The value of the series written exactly `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn families_buckets_pending_changes_and_process_metrics() {
    require_kernel!();
    let lab = ApiLab::new("metrics").unwrap();
    lab.server.apply(node("n1", "192.168.0.2"));
    lab.server.apply(service("ns1", "web", "172.30.0.10", 80));
    lab.server.apply(slice("ns1", "web", &["10.0.1.1".to_string()], None));
    let agent = lab_agent::start(
        &lab,
        env!("CARGO_BIN_EXE_verdict"),
        "metrics",
        &["--min-sync-period", "3s", "--cleanup-leftovers=false"],
    )
    .unwrap();
    agent.wait("web programmed", || lab.table().contains("172.30.0.10 . tcp . 80"));
    agent.wait("the first sync's metrics", || {
        value(&scrape(&lab), "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"}")
            .is_some_and(|t| t > 0.0)
    });
    let text = scrape(&lab);

    // One sync, both families of the (dual-stack) kernel: the same observation in each.
    for family in ["IPv4", "IPv6"] {
        let l = format!("{{ip_family=\"{family}\"}}");
        assert_eq!(value(&text, &format!("kubeproxy_sync_proxy_rules_duration_seconds_count{l}")), Some(1.0), "{text}");
        assert_eq!(value(&text, &format!("kubeproxy_sync_full_proxy_rules_duration_seconds_count{l}")), Some(1.0));
        assert!(value(&text, &format!("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{l}")).is_some());
        assert_eq!(value(&text, &format!("kubeproxy_sync_proxy_rules_nftables_sync_failures_total{l}")), Some(0.0));
        assert_eq!(value(&text, &format!("kubeproxy_conntrack_reconciler_deleted_entries_total{l}")), Some(0.0));
        let policy = format!(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{{traffic_policy=\"internal\",ip_family=\"{family}\"}}"
        );
        assert_eq!(value(&text, &policy), Some(0.0), "{text}");
        // Upstream's buckets: 1 ms doubling to 16.384 s; the conntrack reconciler's too.
        for h in ["kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_conntrack_reconciler_sync_duration_seconds"]
        {
            for le in ["0.001", "0.002", "16.384", "+Inf"] {
                let bucket = format!("{h}_bucket{{ip_family=\"{family}\",le=\"{le}\"}}");
                assert!(value(&text, &bucket).is_some(), "{bucket}:\n{text}");
            }
        }
        let bucket =
            format!("kubeproxy_network_programming_duration_seconds_bucket{{ip_family=\"{family}\",le=\"0.25\"}}");
        assert!(value(&text, &bucket).is_some(), "{bucket}:\n{text}");
    }
    assert!(text.contains("# TYPE kubeproxy_conntrack_reconciler_sync_duration_seconds histogram"), "{text}");
    // Upstream's shared series carry no family, and no per-family series is left without one.
    assert!(value(&text, "kubeproxy_sync_proxy_rules_service_changes_pending").is_some(), "{text}");
    for unlabelled in
        ["kubeproxy_sync_proxy_rules_last_timestamp_seconds ", "kubeproxy_sync_proxy_rules_duration_seconds_count "]
    {
        assert!(!text.contains(&format!("\n{unlabelled}")), "{unlabelled}without ip_family:\n{text}");
    }

    // Changes wait for the next sync (3 s after the last): two Services, one slice twice.
    lab.server.apply(service("ns1", "api", "172.30.0.11", 80));
    lab.server.apply(service("ns1", "db", "172.30.0.12", 5432));
    lab.server.apply(slice("ns1", "web", &["10.0.1.2".to_string()], None));
    lab.server.apply(slice("ns1", "web", &["10.0.1.3".to_string()], None));
    agent.wait("the changes pending", || {
        let text = scrape(&lab);
        value(&text, "kubeproxy_sync_proxy_rules_service_changes_pending") == Some(2.0)
            && value(&text, "kubeproxy_sync_proxy_rules_endpoint_changes_pending") == Some(1.0)
    });
    assert!(!lab.table().contains("172.30.0.12"), "still pending: the next sync has not run");
    agent.wait("the changes programmed", || lab.table().contains("172.30.0.12"));
    agent.wait("nothing pending after the sync", || {
        let text = scrape(&lab);
        value(&text, "kubeproxy_sync_proxy_rules_service_changes_pending") == Some(0.0)
            && value(&text, "kubeproxy_sync_proxy_rules_endpoint_changes_pending") == Some(0.0)
    });

    // The process collector's families, with plausible values.
    let text = scrape(&lab);
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name} {kind}:\n{text}");
    }
    let get = |name: &str| value(&text, name).unwrap_or_else(|| panic!("{name}:\n{text}"));
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
    let start = get("process_start_time_seconds");
    assert!(start <= now + 1.0 && start > now - 600.0, "started {start}, now {now}");
    assert!(get("process_resident_memory_bytes") > 1024.0 * 1024.0);
    assert!(get("process_virtual_memory_bytes") >= get("process_resident_memory_bytes"));
    let (open, max) = (get("process_open_fds"), get("process_max_fds"));
    assert!(open > 0.0 && open < max, "open {open}, max {max}");
    assert!(get("process_cpu_seconds_total") >= 0.0);
}
