//! The rest of `kube-proxy --help` on Linux, so that any installer's command line parses:
//! kube-proxy's flags that verdict's rule flags ([`super::RulesArgs`]) and `run`'s do not
//! already cover. Which of them verdict honours, and how, is `crate::compat`'s table.
//!
//! Spelled as pflag reads them: `--name=value` or `--name value`; a boolean is `--name` or
//! `--name=true|false`; `-v 2`, `-v=2` and `--v=2` are the log level. Given twice, a flag keeps
//! its last value, but for upstream's lists (`Vec` here: pflag's `stringSlice`, the feature
//! gates' map, klog's vmodule), whose values add up.

use clap::Args;
use std::path::PathBuf;

/// kube-proxy's flags besides the rule flags.
#[derive(Debug, Clone, Default, Args)]
pub struct UpstreamArgs {
    /// Print the version and exit (`--version`, `--version=raw`).
    #[arg(long, value_name = "BOOL|raw", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub version: Option<String>,
    /// Write the configuration in effect (defaults, the file, flags) as a
    /// KubeProxyConfiguration to this file, and exit.
    #[arg(long, value_name = "FILE")]
    pub write_config_to: Option<PathBuf>,
    /// Do what needs full root (the conntrack sysctls), then exit: for a privileged init
    /// container, so that the agent itself runs with only NET_ADMIN.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub init_only: Option<bool>,
    /// kube-proxy's mode: `nftables`, or `iptables` / `ipvs` (replaced by verdict, which then
    /// reads that mode's settings).
    #[arg(long, value_name = "MODE")]
    pub proxy_mode: Option<String>,
    /// The node's primary IP, when not the unspecified address; an IPv6 address makes the
    /// servers' default addresses IPv6 (`[::]`).
    #[arg(long, value_name = "IP")]
    pub bind_address: Option<String>,
    /// Exit when a server's port cannot be bound (default: retry every 5 s while proxying).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub bind_address_hard_fail: Option<bool>,
    /// Deprecated: the health server's port (0: off).
    #[arg(long, value_name = "PORT")]
    pub healthz_port: Option<u16>,
    /// Deprecated: the metrics server's port (0: off).
    #[arg(long, value_name = "PORT")]
    pub metrics_port: Option<u16>,
    /// Feature gates, `Name=true|false,...`.
    #[arg(long, value_name = "GATES", value_delimiter = ',')]
    pub feature_gates: Vec<String>,
    /// The content type of requests to the API server.
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,
    /// Requests per second to the API server.
    #[arg(long, value_name = "QPS", allow_negative_numbers = true)]
    pub kube_api_qps: Option<f32>,
    /// Burst of requests to the API server.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub kube_api_burst: Option<i32>,
    /// How often informers resync (kube-proxy's; verdict watches, see docs/operations.md).
    #[arg(long, value_name = "DURATION")]
    pub config_sync_period: Option<String>,
    /// The agent's oom_score_adj, -1000 to 1000 (default -999).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub oom_score_adj: Option<i32>,
    /// Profiling on /debug/pprof (kube-proxy's; none in verdict).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub profiling: Option<bool>,
    /// Show metrics hidden since this version (kube-proxy's; verdict hides none).
    #[arg(long, value_name = "VERSION")]
    pub show_hidden_metrics_for_version: Option<String>,

    /// nf_conntrack_max per CPU (0: leave nf_conntrack_max alone; default 32768).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub conntrack_max_per_core: Option<i32>,
    /// The least nf_conntrack_max (default 131072).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub conntrack_min: Option<i32>,
    /// nf_conntrack_tcp_timeout_established (0: leave; default 24h).
    #[arg(long, value_name = "DURATION")]
    pub conntrack_tcp_timeout_established: Option<String>,
    /// nf_conntrack_tcp_timeout_close_wait (0: leave; default 1h).
    #[arg(long, value_name = "DURATION")]
    pub conntrack_tcp_timeout_close_wait: Option<String>,
    /// Set nf_conntrack_tcp_be_liberal to 1.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub conntrack_tcp_be_liberal: Option<bool>,
    /// nf_conntrack_udp_timeout (0: leave).
    #[arg(long, value_name = "DURATION")]
    pub conntrack_udp_timeout: Option<String>,
    /// nf_conntrack_udp_timeout_stream (0: leave).
    #[arg(long, value_name = "DURATION")]
    pub conntrack_udp_timeout_stream: Option<String>,

    /// The masquerade bit of iptables and ipvs modes (read when verdict replaces them).
    #[arg(long, value_name = "BIT", allow_negative_numbers = true)]
    pub iptables_masquerade_bit: Option<i32>,
    /// iptables mode's NodePorts on 127.0.0.1 (not in nftables: see docs/operations.md).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub iptables_localhost_nodeports: Option<bool>,
    /// The sync period, unless the mode is ipvs.
    #[arg(long, value_name = "DURATION")]
    pub iptables_sync_period: Option<String>,
    /// The minimum sync period, unless the mode is ipvs.
    #[arg(long, value_name = "DURATION")]
    pub iptables_min_sync_period: Option<String>,
    /// The sync period, when the mode is ipvs.
    #[arg(long, value_name = "DURATION")]
    pub ipvs_sync_period: Option<String>,
    /// The minimum sync period, when the mode is ipvs.
    #[arg(long, value_name = "DURATION")]
    pub ipvs_min_sync_period: Option<String>,
    /// ipvs mode's scheduler (no effect: verdict balances as nftables mode does).
    #[arg(long, value_name = "NAME")]
    pub ipvs_scheduler: Option<String>,
    /// ipvs mode's CIDRs left alone at cleanup.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub ipvs_exclude_cidrs: Vec<String>,
    /// ipvs mode's strict ARP (no effect: verdict has no dummy interface).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub ipvs_strict_arp: Option<bool>,
    /// ipvs mode's TCP timeout (no effect).
    #[arg(long, value_name = "DURATION")]
    pub ipvs_tcp_timeout: Option<String>,
    /// ipvs mode's TCP FIN timeout (no effect).
    #[arg(long, value_name = "DURATION")]
    pub ipvs_tcpfin_timeout: Option<String>,
    /// ipvs mode's UDP timeout (no effect).
    #[arg(long, value_name = "DURATION")]
    pub ipvs_udp_timeout: Option<String>,

    /// The log level (klog's): 0-3 info, 4 debug, 5 and more trace.
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    pub verbosity: Option<u32>,
    /// klog's per-file levels (no effect: `RUST_LOG` does this for verdict). A list, as
    /// klog's: given twice, the patterns add up.
    #[arg(long, value_name = "PATTERN=N,...", value_delimiter = ',')]
    pub vmodule: Vec<String>,
    /// How often logs are flushed (verdict writes each line at once).
    #[arg(long, value_name = "DURATION")]
    pub log_flush_frequency: Option<String>,
    /// `text` or `json` (as verdict's `--log-format`).
    #[arg(long, value_name = "FORMAT")]
    pub logging_format: Option<String>,
    /// klog's text stream split (no effect: verdict logs to stderr).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub log_text_split_stream: Option<bool>,
    /// klog's text info buffer (no effect).
    #[arg(long, value_name = "QUANTITY")]
    pub log_text_info_buffer_size: Option<String>,
    /// klog's JSON stream split (no effect: verdict logs to stderr).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub log_json_split_stream: Option<bool>,
    /// klog's JSON info buffer (no effect).
    #[arg(long, value_name = "QUANTITY")]
    pub log_json_info_buffer_size: Option<String>,
    /// cadvisor's boot ID file, which kube-proxy registers (no effect).
    #[arg(long, value_name = "FILE")]
    pub boot_id_file: Option<String>,
    /// cadvisor's machine ID files, which kube-proxy registers (no effect).
    #[arg(long, value_name = "FILE,...")]
    pub machine_id_file: Option<String>,
}
