//! verdict against kube-proxy, entry by entry: every flag of `kube-proxy --help` (Linux), every
//! field of its v1alpha1 configuration, the labels it reads and every metric it serves, each honoured, accepted
//! without effect, or different, with why. docs/operations.md shows [`markdown`]'s output, and
//! the tests below hold the table to the code (every flag parses, every field is read without
//! a warning) and to upstream's lists in `crates/agent/tests/fixtures/upstream/`.

/// How verdict treats one of kube-proxy's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// It does what kube-proxy does.
    Honoured,
    /// It is accepted (it parses, a bad value is refused), with no effect.
    NoEffect,
    /// It means something, not exactly what it means to kube-proxy.
    Different,
}

impl Support {
    fn word(self) -> &'static str {
        match self {
            Support::Honoured => "honoured",
            Support::NoEffect => "accepted, no effect",
            Support::Different => "different",
        }
    }
}

use Support::{Different, Honoured, NoEffect};

/// One row: the name, how it is treated, and what that means.
pub type Entry = (&'static str, Support, &'static str);

const IGNORED_WITH_CONFIG: &str = "ignored with `--config`, as kube-proxy ignores it (verdict warns)";

/// kube-proxy's flags (Linux).
pub const FLAGS: &[Entry] = &[
    (
        "--bind-address",
        Different,
        "its family picks the servers' default addresses (`[::]` for IPv6), as upstream; the node's primary IPs come from its Node object (a warning says so when an address is given)",
    ),
    (
        "--bind-address-hard-fail",
        Honoured,
        "a busy port exits the agent; without it the agent proxies and retries the bind every 5 s",
    ),
    ("--boot-id-file", NoEffect, "cadvisor's, registered by kube-proxy; verdict reads CPUs itself"),
    ("--cleanup", Honoured, "deletes verdict's table and kube-proxy's leftovers (all modes), then exits"),
    (
        "--cluster-cidr",
        Honoured,
        "pod networks, one per family, comma-separated: one string, as upstream's (given twice, the last wins)",
    ),
    ("--config", Honoured, "v1alpha1 KubeProxyConfiguration; see the fields below"),
    (
        "--config-sync-period",
        NoEffect,
        "verdict watches with bookmarks and relists on 410 Gone; the table is fully reconciled every sync period instead",
    ),
    ("--conntrack-max-per-core", Honoured, "nf_conntrack_max = max(this x CPUs, --conntrack-min); 0 leaves it"),
    ("--conntrack-min", Honoured, "the floor of nf_conntrack_max"),
    (
        "--conntrack-tcp-be-liberal",
        Honoured,
        "nf_conntrack_tcp_be_liberal = 1; in iptables mode's place it also leaves out the `ct state invalid drop` in forward, as upstream's iptables mode does",
    ),
    ("--conntrack-tcp-timeout-close-wait", Honoured, "nf_conntrack_tcp_timeout_close_wait"),
    ("--conntrack-tcp-timeout-established", Honoured, "nf_conntrack_tcp_timeout_established"),
    ("--conntrack-udp-timeout", Honoured, "nf_conntrack_udp_timeout"),
    ("--conntrack-udp-timeout-stream", Honoured, "nf_conntrack_udp_timeout_stream"),
    ("--detect-local-mode", Honoured, "ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix"),
    (
        "--feature-gates",
        Different,
        "`Name=bool` pairs are checked (given twice, the gates merge); `KubeProxyNFTablesLocalhostNodePorts=false` ignores the `localhost` keyword in nftables mode (one warning; upstream's alpha gate is off by default, verdict's is on); every other gate gets one warning: verdict has no gates (every Service behaviour it implements is on)",
    ),
    ("--healthz-bind-address", Honoured, "empty turns the server off"),
    (
        "--healthz-port",
        Honoured,
        "deprecated upstream; 0 turns the server off (not in `--write-config-to`'s file, as upstream)",
    ),
    ("--hostname-override", Honoured, "wins over the file's hostnameOverride, trimmed and lower-cased, as upstream"),
    (
        "--init-only",
        Honoured,
        "writes the conntrack sysctls (and `route_localnet` when localhost NodePorts are on) and exits, 1 when one could not be written: for a privileged init container",
    ),
    (
        "--iptables-localhost-nodeports",
        Honoured,
        "in iptables mode's place (mode iptables or empty; default true), with `--nodeport-addresses` covering 127.0.0.0: IPv4 NodePorts on 127.0.0.0/8 for the node's own connections (DNAT in the output hook, masqueraded; route_localnet = 1; packets to 127.0.0.0/8 from the network dropped); never in ipvs mode, as upstream",
    ),
    ("--iptables-masquerade-bit", Honoured, "the masquerade bit when the mode is iptables, ipvs or empty"),
    ("--iptables-min-sync-period", Honoured, "the minimum sync period unless the mode is ipvs"),
    ("--iptables-sync-period", Honoured, "the sync period unless the mode is ipvs"),
    (
        "--ipvs-exclude-cidrs",
        NoEffect,
        "verdict removes only kube-proxy's IPVS leftovers (a list: given twice, the values add up, as upstream's)",
    ),
    ("--ipvs-min-sync-period", Honoured, "the minimum sync period when the mode is ipvs"),
    ("--ipvs-scheduler", NoEffect, "verdict balances as nftables mode does (random, per connection)"),
    ("--ipvs-strict-arp", NoEffect, "no IPVS dummy interface, no ARP to answer"),
    ("--ipvs-sync-period", Honoured, "the sync period when the mode is ipvs"),
    ("--ipvs-tcp-timeout", NoEffect, "IPVS's own timeouts; conntrack's apply"),
    ("--ipvs-tcpfin-timeout", NoEffect, "IPVS's own timeouts; conntrack's apply"),
    ("--ipvs-udp-timeout", NoEffect, "IPVS's own timeouts; conntrack's apply"),
    (
        "--kube-api-burst",
        NoEffect,
        "checked; verdict's requests are a few long watches, lists at start and on 410, and Events",
    ),
    (
        "--kube-api-content-type",
        Honoured,
        "`application/vnd.kubernetes.protobuf` (the default) asks for protobuf first, JSON as the fallback, for Services, EndpointSlices and Nodes; `application/json` asks for JSON",
    ),
    (
        "--kube-api-qps",
        Honoured,
        "client-go's token bucket: requests per second after the burst (Events have a client and a bucket of their own, as upstream's)",
    ),
    (
        "--kubeconfig",
        Honoured,
        "the API server and credentials; with neither it nor `--master`, in-cluster configuration, as upstream (one warning: its address is the `kubernetes` ClusterIP)",
    ),
    ("--log-flush-frequency", NoEffect, "verdict writes each line at once"),
    ("--log-json-info-buffer-size", NoEffect, "klog's"),
    ("--log-json-split-stream", NoEffect, "klog's; verdict logs to stderr"),
    ("--log-text-info-buffer-size", NoEffect, "klog's"),
    ("--log-text-split-stream", NoEffect, "klog's; verdict logs to stderr"),
    ("--logging-format", Honoured, "`text` or `json` (verdict's `--log-format`)"),
    ("--machine-id-file", NoEffect, "cadvisor's, registered by kube-proxy"),
    ("--masquerade-all", Honoured, "masquerade everything sent to ClusterIPs"),
    (
        "--master",
        Honoured,
        "the API server's real address; without a kubeconfig the pod's service account authenticates (upstream sends no credentials)",
    ),
    ("--metrics-bind-address", Honoured, "empty turns the server off"),
    (
        "--metrics-port",
        Honoured,
        "deprecated upstream; 0 turns the server off (not in `--write-config-to`'s file, as upstream)",
    ),
    (
        "--nodeport-addresses",
        Honoured,
        "`primary`, `all` (every local address, also ones added later: `fib daddr type local`), `localhost` (IPv4 127.0.0.0/8 for the node's own connections; ::1 is not served), CIDRs, or keywords and CIDRs mixed; a family with no CIDR in the list takes every address; unset: every local address in iptables and ipvs mode's place, `primary` in nftables mode, as upstream; given twice, the values add up (pflag's `stringSlice`)",
    ),
    ("--oom-score-adj", Honoured, "written to /proc/self/oom_score_adj at start (-999 by default)"),
    ("--pod-bridge-interface", Honoured, "for BridgeInterface"),
    ("--pod-interface-name-prefix", Honoured, "for InterfaceNamePrefix"),
    ("--profiling", NoEffect, "no /debug/pprof in verdict (use perf)"),
    (
        "--proxy-mode",
        Different,
        "`nftables`; `iptables`, `ipvs` and empty run verdict in their place, with their settings and the behaviours of theirs that nftables mode lacks (a log line names them); anything else exits 64",
    ),
    ("--show-hidden-metrics-for-version", NoEffect, "verdict hides no metric"),
    ("--v", Honoured, "the log level: 0-3 info, 4 debug, 5 and more trace (`RUST_LOG` wins); `-v` is the same flag"),
    ("--version", Different, "prints verdict's version (`=raw`: with platform), not Kubernetes'"),
    ("--vmodule", NoEffect, "klog's per-file levels; `RUST_LOG` does this for verdict"),
    (
        "--write-config-to",
        Honoured,
        "writes the configuration in effect and exits, as upstream writes it: upstream's fields only (not verdict's `nftables.flowtableInterfaces`), defaults filled in, an empty `mode` `iptables`, an empty `detectLocalMode` `ClusterCIDR`, nftables mode's empty `nodePortAddresses` `[primary]`; `--healthz-port`/`--metrics-port` are not applied to the file, as upstream",
    ),
];

/// kube-proxy's configuration fields (v1alpha1). A zero value means upstream's default.
pub const CONFIG_FIELDS: &[Entry] = &[
    ("bindAddress", Different, "as `--bind-address`"),
    ("bindAddressHardFail", Honoured, "as `--bind-address-hard-fail`"),
    (
        "clientConnection.acceptContentTypes",
        Honoured,
        "the `Accept` header of lists and watches when set, as client-go's (empty: from `contentType`)",
    ),
    ("clientConnection.burst", Honoured, "as `--kube-api-burst` (0: 10)"),
    ("clientConnection.contentType", Honoured, "as `--kube-api-content-type`"),
    ("clientConnection.kubeconfig", Honoured, "as `--kubeconfig` (empty, and no `--master`: in-cluster configuration)"),
    ("clientConnection.qps", Honoured, "as `--kube-api-qps` (0: 5)"),
    ("clusterCIDR", Honoured, "as `--cluster-cidr`"),
    ("configSyncPeriod", NoEffect, "as `--config-sync-period` (must be > 0 after defaults)"),
    ("conntrack.maxPerCore", Honoured, "null: 32768; 0: leave nf_conntrack_max"),
    ("conntrack.min", Honoured, "null: 131072"),
    ("conntrack.tcpBeLiberal", Honoured, "as the flag"),
    ("conntrack.tcpCloseWaitTimeout", Honoured, "null: 1h; 0s: leave"),
    ("conntrack.tcpEstablishedTimeout", Honoured, "null: 24h; 0s: leave"),
    ("conntrack.udpStreamTimeout", Honoured, "0s: leave"),
    ("conntrack.udpTimeout", Honoured, "0s: leave"),
    ("detectLocal.bridgeInterface", Honoured, "as the flag"),
    ("detectLocal.interfaceNamePrefix", Honoured, "as the flag"),
    ("detectLocalMode", Honoured, "empty: ClusterCIDR"),
    ("enableProfiling", NoEffect, "as `--profiling`"),
    ("featureGates", Different, "as `--feature-gates`"),
    (
        "healthzBindAddress",
        Honoured,
        "empty: 0.0.0.0:10256 (`[::]` with an IPv6 bindAddress); a port is added when missing",
    ),
    ("hostnameOverride", Honoured, "empty: the host name"),
    ("iptables.localhostNodePorts", Honoured, "as the flag (null: true)"),
    ("iptables.masqueradeAll", Honoured, "read when the mode is iptables, ipvs or empty"),
    ("iptables.masqueradeBit", Honoured, "read when the mode is iptables, ipvs or empty (null: 14)"),
    ("iptables.minSyncPeriod", Honoured, "read when the mode is iptables or empty (0s: 1s)"),
    ("iptables.syncPeriod", Honoured, "read when the mode is iptables or empty (0s: 30s)"),
    ("ipvs.excludeCIDRs", NoEffect, "as the flag"),
    ("ipvs.minSyncPeriod", Honoured, "read when the mode is ipvs (no default: 0s syncs at once)"),
    ("ipvs.scheduler", NoEffect, "as the flag"),
    ("ipvs.strictARP", NoEffect, "as the flag"),
    ("ipvs.syncPeriod", Honoured, "read when the mode is ipvs (0s: 30s)"),
    ("ipvs.tcpFinTimeout", NoEffect, "as the flag"),
    ("ipvs.tcpTimeout", NoEffect, "as the flag"),
    ("ipvs.udpTimeout", NoEffect, "as the flag"),
    ("logging.flushFrequency", NoEffect, "as `--log-flush-frequency`"),
    ("logging.format", Honoured, "as `--logging-format`"),
    ("logging.options.json.infoBufferSize", NoEffect, "klog's"),
    ("logging.options.json.splitStream", NoEffect, "klog's"),
    ("logging.options.text.infoBufferSize", NoEffect, "klog's"),
    ("logging.options.text.splitStream", NoEffect, "klog's"),
    ("logging.verbosity", Honoured, "as `--v` (the flag wins)"),
    ("logging.vmodule", NoEffect, "as `--vmodule`"),
    ("metricsBindAddress", Honoured, "empty: 127.0.0.1:10249 (`[::1]` with an IPv6 bindAddress)"),
    ("mode", Different, "as `--proxy-mode`"),
    ("nftables.masqueradeAll", Honoured, "read when the mode is nftables"),
    ("nftables.masqueradeBit", Honoured, "read when the mode is nftables (null: 14)"),
    ("nftables.minSyncPeriod", Honoured, "read when the mode is nftables (0s: 1s)"),
    ("nftables.syncPeriod", Honoured, "read when the mode is nftables (0s: 30s)"),
    (
        "nodePortAddresses",
        Honoured,
        "as `--nodeport-addresses`; unset: every local address when the mode is iptables, ipvs or empty, `primary` when it is nftables",
    ),
    ("oomScoreAdj", Honoured, "null: -999"),
    ("portRange", NoEffect, "the userspace proxy's, gone upstream"),
    ("showHiddenMetricsForVersion", NoEffect, "as the flag"),
    ("windowsRunAsService", NoEffect, "Windows only"),
    ("winkernel.enableDSR", NoEffect, "Windows only"),
    ("winkernel.forwardHealthCheckVip", NoEffect, "Windows only"),
    ("winkernel.networkName", NoEffect, "Windows only"),
    ("winkernel.rootHnsEndpointName", NoEffect, "Windows only"),
    ("winkernel.sourceVip", NoEffect, "Windows only"),
];

/// The labels kube-proxy reads on Services, EndpointSlices and Nodes.
pub const LABELS: &[Entry] = &[
    ("kubernetes.io/service-name", Honoured, "an EndpointSlice's Service"),
    (
        "service.kubernetes.io/headless",
        Honoured,
        "any value: the Service and its EndpointSlices are not proxied, from an API server (the watch's label selector, as upstream's informers) and from a manifests directory (`run --manifests`, `render`, `explain`) alike",
    ),
    (
        "service.kubernetes.io/service-proxy-name",
        Honoured,
        "any value: the Service is another proxy's, not proxied (as the headless label)",
    ),
    ("topology.kubernetes.io/zone", Honoured, "the Node's zone, for topology hints"),
];

/// kube-proxy's metrics.
pub const METRICS: &[Entry] = &[
    ("kubeproxy_conntrack_reconciler_deleted_entries_total", Honoured, "stale UDP flows deleted"),
    ("kubeproxy_conntrack_reconciler_sync_duration_seconds", Honoured, "histogram, upstream's buckets"),
    (
        "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
        NoEffect,
        "iptables mode's (nfacct); not served (the drop itself is kept)",
    ),
    (
        "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
        NoEffect,
        "iptables mode's (nfacct); not served (`--service-counters` counts localhost NodePorts with the others)",
    ),
    ("kubeproxy_network_programming_duration_seconds", Honoured, "from the EndpointSlice's trigger time to programmed"),
    ("kubeproxy_proxy_healthz_total", Honoured, "by code"),
    ("kubeproxy_proxy_livez_total", Honoured, "by code"),
    ("kubeproxy_sync_full_proxy_rules_duration_seconds", Honoured, "syncs that render every Service"),
    ("kubeproxy_sync_partial_proxy_rules_duration_seconds", Honoured, "syncs that render what changed"),
    ("kubeproxy_sync_proxy_rules_duration_seconds", Honoured, "every sync"),
    ("kubeproxy_sync_proxy_rules_endpoint_changes_pending", Honoured, "changes received, not yet programmed"),
    ("kubeproxy_sync_proxy_rules_endpoint_changes_total", Honoured, ""),
    ("kubeproxy_sync_proxy_rules_iptables_last", NoEffect, "iptables mode's; not served"),
    ("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", NoEffect, "iptables mode's; not served"),
    ("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", NoEffect, "iptables mode's; not served"),
    ("kubeproxy_sync_proxy_rules_iptables_total", NoEffect, "iptables mode's; not served"),
    ("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", Honoured, ""),
    ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", Honoured, ""),
    ("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", Honoured, ""),
    ("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", Honoured, "transactions the kernel refused"),
    ("kubeproxy_sync_proxy_rules_no_local_endpoints_total", Honoured, "a gauge, by traffic_policy, as upstream"),
    ("kubeproxy_sync_proxy_rules_service_changes_pending", Honoured, "changes received, not yet programmed"),
    ("kubeproxy_sync_proxy_rules_service_changes_total", Honoured, ""),
    ("process_cpu_seconds_total", Honoured, "from /proc/self"),
    ("process_max_fds", Honoured, "from /proc/self"),
    ("process_network_receive_bytes_total", NoEffect, "not served: the node's traffic, not the agent's"),
    ("process_network_transmit_bytes_total", NoEffect, "not served: the node's traffic, not the agent's"),
    ("process_open_fds", Honoured, "from /proc/self"),
    ("process_resident_memory_bytes", Honoured, "from /proc/self"),
    ("process_start_time_seconds", Honoured, "from /proc/self"),
    ("process_virtual_memory_bytes", Honoured, "from /proc/self"),
    ("process_virtual_memory_max_bytes", NoEffect, "not served"),
    ("go_*", NoEffect, "Go runtime metrics: verdict is not Go (`verdict_heap_*` are the allocator's)"),
    ("registered_metrics_total", NoEffect, "component-base's; not served"),
    ("disabled_metrics_total", NoEffect, "component-base's; not served"),
    ("hidden_metrics_total", NoEffect, "component-base's; not served"),
    ("kubernetes_build_info", Honoured, "component-base's labels, with verdict's version (`go_version=\"rust\"`)"),
    ("kubernetes_feature_enabled", NoEffect, "not served: verdict has no gates"),
    (
        "rest_client_*",
        Honoured,
        "client-go's names, labels and buckets: requests by code, host and method; duration, request and response size; rate-limiter wait",
    ),
];

fn table(out: &mut String, title: &str, rows: &[Entry]) {
    out.push_str(&format!("\n| {title} | | |\n|---|---|---|\n"));
    for (name, support, note) in rows {
        out.push_str(&format!("| `{name}` | {} | {note} |\n", support.word()));
    }
}

/// The tables as docs/operations.md shows them.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str("Generated from `crates/agent/src/compat.rs` and checked against it by its tests.\n");
    out.push_str(&format!(
        "With `--config`, kube-proxy's flags that set configuration fields are {IGNORED_WITH_CONFIG}; \
         `--hostname-override`, the logging flags, `--master`, `--cleanup`, `--init-only` and \
         `--write-config-to` still apply, and so do verdict's own flags. A flag given twice keeps its \
         last value, as pflag does, but for `--nodeport-addresses`, `--ipvs-exclude-cidrs`, \
         `--feature-gates` and `--vmodule`, whose values add up.\n"
    ));
    table(&mut out, "flag", FLAGS);
    table(&mut out, "configuration field", CONFIG_FIELDS);
    table(&mut out, "label", LABELS);
    table(&mut out, "metric", METRICS);
    out
}

#[cfg(test)]
mod tests;
