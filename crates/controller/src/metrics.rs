//! Metric names: upstream kube-proxy's (`kubeproxy_` prefix), plus verdict's own.
//! Recorded through the `metrics` facade; the agent installs the Prometheus exporter.
//!
//! Upstream runs one proxier per IP family and labels what each one records with `ip_family`
//! ("IPv4", "IPv6"; kubernetes #129173): [`PER_FAMILY`] lists those metrics. verdict programs
//! both families in one `inet` table and one transaction, so it records each observation once
//! per family the node runs (see [`crate::family_metrics`]). Dashboards written for upstream
//! that sum over `ip_family` count a dual-stack sync twice, as they do for upstream's two
//! proxiers; those that select one family see what they expect.

/// Sync duration, every sync (histogram, seconds).
pub const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
/// Full syncs (histogram, seconds).
pub const SYNC_FULL_DURATION: &str = "kubeproxy_sync_full_proxy_rules_duration_seconds";
/// Partial syncs (histogram, seconds).
pub const SYNC_PARTIAL_DURATION: &str = "kubeproxy_sync_partial_proxy_rules_duration_seconds";
/// From an EndpointSlice change (its trigger-time annotation) to programmed (histogram).
pub const NETWORK_PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
/// When the last sync succeeded (gauge, unix seconds).
pub const LAST_TIMESTAMP: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
/// When the last change was queued (gauge, unix seconds).
pub const LAST_QUEUED: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
/// EndpointSlice changes seen (counter).
pub const ENDPOINT_CHANGES_TOTAL: &str = "kubeproxy_sync_proxy_rules_endpoint_changes_total";
/// EndpointSlice changes not yet programmed (gauge).
pub const ENDPOINT_CHANGES_PENDING: &str = "kubeproxy_sync_proxy_rules_endpoint_changes_pending";
/// Service changes seen (counter).
pub const SERVICE_CHANGES_TOTAL: &str = "kubeproxy_sync_proxy_rules_service_changes_total";
/// Service changes not yet programmed (gauge).
pub const SERVICE_CHANGES_PENDING: &str = "kubeproxy_sync_proxy_rules_service_changes_pending";
/// Transactions the kernel refused (counter).
pub const SYNC_FAILURES: &str = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total";
/// Changes other programs made to the table, each followed by a full reconcile (counter).
pub const TABLE_DRIFT: &str = "verdict_table_foreign_changes_total";
/// Interfaces the fast path's flowtable holds (`--flowtable-interfaces`).
pub const FAST_PATH_DEVICES: &str = "verdict_fast_path_devices";
/// 1 when `--flowtable-interfaces` was given but the kernel has no flowtables.
pub const FAST_PATH_UNAVAILABLE: &str = "verdict_fast_path_unavailable";
/// Flowtable device changes the kernel refused (retried a second later).
pub const FAST_PATH_DEVICE_FAILURES: &str = "verdict_fast_path_device_failures_total";
/// Failed deletions of chains flushed earlier (counter; upstream's name).
pub const CLEANUP_FAILURES: &str = "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total";
/// `/healthz` answers by code (counter).
pub const HEALTHZ_TOTAL: &str = "kubeproxy_proxy_healthz_total";
/// `/livez` answers by code (counter).
pub const LIVEZ_TOTAL: &str = "kubeproxy_proxy_livez_total";
/// Service ports whose Local policy finds no local endpoint, by `traffic_policy` (gauge).
pub const NO_LOCAL_ENDPOINTS: &str = "kubeproxy_sync_proxy_rules_no_local_endpoints_total";
/// Conntrack reconciliations after UDP endpoint changes (histogram, seconds).
pub const CONNTRACK_DURATION: &str = "kubeproxy_conntrack_reconciler_sync_duration_seconds";
/// Stale UDP conntrack entries deleted (counter).
pub const CONNTRACK_DELETED: &str = "kubeproxy_conntrack_reconciler_deleted_entries_total";
/// Time the kernel took for each transaction, send to last reply: it holds the nftables commit
/// mutex meanwhile (histogram).
pub const TX_COMMIT: &str = "verdict_sync_transaction_commit_seconds";
/// Kernel objects written per sync (histogram).
pub const TX_OPERATIONS: &str = "verdict_sync_transaction_operations";
/// Bytes sent per sync (histogram).
pub const TX_BYTES: &str = "verdict_sync_transaction_bytes";
/// Service ports re-rendered per sync (histogram).
pub const RENDERED_PORTS: &str = "verdict_sync_rendered_service_ports";
/// Input verdict cannot program, by reason (gauge: currently present).
pub const PROBLEMS: &str = "verdict_input_problems";
/// Another proxy's Service rules on this node, by `what` (gauge: 1 while present; see
/// `crate::foreign_proxy`).
pub const FOREIGN_PROXY: &str = "verdict_foreign_proxy_detected";
/// The values of [`FOREIGN_PROXY`]'s `what` label, in the order they are looked for (each is
/// registered at 0; `crate::foreign_proxy` says what each one matches).
pub const FOREIGN_PROXY_WHATS: [&str; 4] =
    ["nftables ip kube-proxy", "nftables ip6 kube-proxy", "iptables KUBE-SERVICES", "ip6tables KUBE-SERVICES"];
/// Base chains of other tables that drop what they do not accept, on hooks Service traffic
/// passes (gauge; see `crate::firewalls`).
pub const FOREIGN_DROP_CHAINS: &str = "verdict_foreign_drop_chains";
/// Problem Events not published because the queue to the API was full (counter).
pub const EVENTS_DROPPED: &str = "verdict_events_dropped_total";
/// Lists and watches of the API server abandoned, by `kind` and `reason` (`timeout`: no answer,
/// or no whole list, or no progress in a list, within `--api-timeout`; `oversized`: a watch
/// line over 16 MiB) (counter).
pub const API_STALLS: &str = "verdict_api_stalls_total";
/// When a list or watch of `kind` last made progress: a watch line (an event or a bookmark) or
/// a whole list page arrived (gauge, unix seconds).
pub const API_PROGRESS: &str = "verdict_api_progress_timestamp_seconds";
/// HTTP connections closed to make room for a new one (counter; see `crate::http_serve`).
pub const HTTP_EVICTIONS: &str = "verdict_http_connections_evicted_total";
/// Problem Events by what became of them: `written` by this node, `already_written` (another
/// node had written the same Event: the API server wrote nothing), `failed` (counter).
pub const EVENTS: &str = "verdict_events_total";

/// The label upstream's per-family metrics carry.
pub const IP_FAMILY: &str = "ip_family";

/// The metrics upstream's nftables proxier labels with `ip_family` (upstream's
/// `pkg/proxy/metrics`, since kubernetes #129173). The change counters and gauges and the
/// health counters are shared by both of upstream's proxiers and carry no family.
pub const PER_FAMILY: [&str; 11] = [
    SYNC_DURATION,
    SYNC_FULL_DURATION,
    SYNC_PARTIAL_DURATION,
    NETWORK_PROGRAMMING,
    LAST_TIMESTAMP,
    LAST_QUEUED,
    SYNC_FAILURES,
    CLEANUP_FAILURES,
    NO_LOCAL_ENDPOINTS,
    CONNTRACK_DURATION,
    CONNTRACK_DELETED,
];

/// Upstream's sync-duration buckets: 1 ms doubling, 15 buckets.
pub fn sync_buckets() -> Vec<f64> {
    (0..15).map(|i| 0.001 * f64::from(1u32 << i)).collect()
}

/// Upstream's network-programming buckets.
pub fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((60..=115).step_by(5).map(f64::from));
    b.extend((120..=300).step_by(30).map(f64::from));
    b
}

/// Buckets for object and byte counts.
pub fn size_buckets() -> Vec<f64> {
    (0..24).map(|i| f64::from(1u32 << i)).collect()
}

/// Every histogram with its buckets, as upstream has them (verdict's own size histograms:
/// powers of two). Without buckets the Prometheus exporter renders a summary instead.
pub fn histogram_buckets() -> Vec<(&'static str, Vec<f64>)> {
    vec![
        (SYNC_DURATION, sync_buckets()),
        (SYNC_FULL_DURATION, sync_buckets()),
        (SYNC_PARTIAL_DURATION, sync_buckets()),
        // Upstream's conntrack reconciler uses the sync buckets too.
        (CONNTRACK_DURATION, sync_buckets()),
        (NETWORK_PROGRAMMING, programming_buckets()),
        (TX_OPERATIONS, size_buckets()),
        (TX_COMMIT, sync_buckets()),
        (TX_BYTES, size_buckets()),
        (RENDERED_PORTS, size_buckets()),
    ]
}

/// Registers descriptions, so `/metrics` explains every series.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(SYNC_DURATION, metrics::Unit::Seconds, "SyncProxyRules latency in seconds");
    describe_histogram!(SYNC_FULL_DURATION, metrics::Unit::Seconds, "SyncProxyRules latency of full syncs in seconds");
    describe_histogram!(
        SYNC_PARTIAL_DURATION,
        metrics::Unit::Seconds,
        "SyncProxyRules latency of partial syncs in seconds"
    );
    describe_histogram!(
        NETWORK_PROGRAMMING,
        metrics::Unit::Seconds,
        "In-cluster network programming latency in seconds"
    );
    describe_gauge!(LAST_TIMESTAMP, metrics::Unit::Seconds, "The last time proxy rules were successfully synced");
    describe_gauge!(LAST_QUEUED, metrics::Unit::Seconds, "The last time a sync of proxy rules was queued");
    describe_counter!(ENDPOINT_CHANGES_TOTAL, "Cumulative proxy rules EndpointSlice changes");
    describe_gauge!(ENDPOINT_CHANGES_PENDING, "Pending proxy rules EndpointSlice changes");
    describe_counter!(SERVICE_CHANGES_TOTAL, "Cumulative proxy rules Service changes");
    describe_gauge!(SERVICE_CHANGES_PENDING, "Pending proxy rules Service changes");
    describe_counter!(SYNC_FAILURES, "Cumulative proxy nftables sync failures");
    describe_counter!(CLEANUP_FAILURES, "Cumulative proxy nftables cleanup failures");
    describe_counter!(TABLE_DRIFT, "Changes other programs made to verdict's table, each reconciled");
    describe_gauge!(
        FAST_PATH_UNAVAILABLE,
        "1 when --flowtable-interfaces was given but the kernel has no software flowtables (the agent runs without the fast path)"
    );
    describe_gauge!(FAST_PATH_DEVICES, "Interfaces the fast path's flowtable holds (--flowtable-interfaces)");
    describe_counter!(
        FAST_PATH_DEVICE_FAILURES,
        "Flowtable device changes the kernel refused (an interface gone meanwhile); retried a second later"
    );
    describe_counter!(HEALTHZ_TOTAL, "Cumulative proxy healthz HTTP status");
    describe_counter!(LIVEZ_TOTAL, "Cumulative proxy livez HTTP status");
    describe_histogram!(
        TX_COMMIT,
        metrics::Unit::Seconds,
        "Time the kernel took for each nftables transaction (send to last reply), holding the nftables commit mutex"
    );
    describe_histogram!(TX_OPERATIONS, "Kernel objects written by each nftables transaction");
    describe_histogram!(TX_BYTES, metrics::Unit::Bytes, "Bytes sent by each nftables transaction");
    describe_histogram!(RENDERED_PORTS, "Service ports rendered by each sync");
    describe_gauge!(PROBLEMS, "Objects (or parts) verdict cannot program, by reason");
    describe_counter!(EVENTS_DROPPED, "Problem Events dropped because the queue to the API server was full");
    describe_counter!(
        API_STALLS,
        "Lists and watches of the API server abandoned and retried, by kind and reason (timeout: no answer, no whole list or no progress in a list within --api-timeout; oversized: a watch event over 16 MiB)"
    );
    describe_gauge!(
        API_PROGRESS,
        metrics::Unit::Seconds,
        "When a list or watch of the kind last made progress (a watch event or bookmark, or a whole list page arrived)"
    );
    describe_counter!(
        HTTP_EVICTIONS,
        "Connections to the metrics, health and health check ports closed to make room for a new one (the least recently active of the source holding the most)"
    );
    describe_counter!(EVENTS, "Problem Events by result: written, already_written (by another node), failed");
    describe_gauge!(FOREIGN_PROXY, "Another proxy's Service rules on this node (1 while present), by what was found");
    describe_gauge!(
        FOREIGN_DROP_CHAINS,
        "Base chains of other nftables tables that drop Service traffic verdict accepts unless they accept it too"
    );
    describe_gauge!(NO_LOCAL_ENDPOINTS, "Number of services with a Local traffic policy and no endpoints");
    describe_histogram!(
        CONNTRACK_DURATION,
        metrics::Unit::Seconds,
        "ReconcileConntrackFlowsLatency latency in seconds"
    );
    describe_counter!(CONNTRACK_DELETED, "Cumulative conntrack flows deleted by conntrack reconciler");

    // Every series exists from the start (at zero), as in upstream's registry, so dashboards
    // and alerts see them before the first event; the per-family ones once the families are
    // known (`crate::family_metrics::register`).
    for c in [ENDPOINT_CHANGES_TOTAL, SERVICE_CHANGES_TOTAL, TABLE_DRIFT] {
        metrics::counter!(c).increment(0);
    }
    for c in [HEALTHZ_TOTAL, LIVEZ_TOTAL] {
        for code in ["200", "503"] {
            metrics::counter!(c, "code" => code).increment(0);
        }
    }
    for g in [ENDPOINT_CHANGES_PENDING, SERVICE_CHANGES_PENDING] {
        metrics::gauge!(g).set(0.0);
    }
    for what in FOREIGN_PROXY_WHATS {
        metrics::gauge!(FOREIGN_PROXY, "what" => what).set(0.0);
    }
    for h in [TX_OPERATIONS, TX_BYTES, RENDERED_PORTS] {
        let _ = metrics::histogram!(h);
    }
}
