//! A defaulted configuration, with kube-proxy's flags laid over it, checked and turned into
//! the settings verdict acts on. `mode` picks the section settings come from, as upstream's
//! v1alpha1 conversion does: verdict replaces the iptables and ipvs modes (what kubeadm and
//! IPVS users have) and reads what they mean from the section that mode would read.

use super::file::KubeProxyConfiguration;
use super::kept::{self, Kept};
use super::{ConfigError, bad, parse_duration};
use crate::conntrack_sysctl::ConntrackSettings;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use verdict_model::{NodePortAddresses, parse_nodeport_addresses};

/// The mode verdict runs in place of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `nftables`: verdict is this mode.
    Nftables,
    /// `iptables`, or `""` (upstream's default on Linux).
    Iptables,
    /// `ipvs`.
    Ipvs,
}

impl Mode {
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nftables => "nftables",
            Mode::Iptables => "iptables",
            Mode::Ipvs => "ipvs",
        }
    }
}

/// The API client's settings (`clientConnection`, `--kube-api-*`).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiClient {
    /// The kubeconfig file.
    pub kubeconfig: Option<PathBuf>,
    /// Requests per second.
    pub qps: f64,
    /// Burst.
    pub burst: u32,
    /// The content type asked for (`--kube-api-content-type`).
    pub content_type: String,
    /// The content types accepted (`clientConnection.acceptContentTypes`; empty: unset).
    pub accept_content_types: String,
}

/// Everything upstream's configuration decides, checked.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The mode the file or flags name.
    pub mode: Mode,
    /// The mode as written (`""` is upstream's default, iptables).
    pub mode_as_written: String,
    /// `hostnameOverride`, trimmed and lower-cased; `None`: the host name.
    pub hostname_override: Option<String>,
    /// `bindAddress`: the node's primary IP unless unspecified.
    pub bind_address: IpAddr,
    /// The health server; `None`: off.
    pub healthz: Option<SocketAddr>,
    /// The metrics server; `None`: off.
    pub metrics: Option<SocketAddr>,
    /// Exit when a server's port cannot be bound.
    pub bind_address_hard_fail: bool,
    /// The mode's sync period.
    pub sync_period: Duration,
    /// The mode's minimum sync period.
    pub min_sync_period: Duration,
    /// The mode's masqueradeAll.
    pub masquerade_all: bool,
    /// The mode's masquerade bit.
    pub masquerade_bit: i64,
    /// `clusterCIDR`, split.
    pub cluster_cidrs: Vec<String>,
    /// `nodePortAddresses`, with the mode's default when unset (nftables: `primary`;
    /// iptables and ipvs: every local address).
    pub nodeport_addresses: NodePortAddresses,
    /// Which of the replaced mode's behaviours verdict keeps.
    pub kept: Kept,
    /// `detectLocalMode` and its section.
    pub detect_local: (String, Option<String>, Option<String>),
    /// The conntrack sysctls.
    pub conntrack: ConntrackSettings,
    /// The API client.
    pub api: ApiClient,
    /// `featureGates`.
    pub feature_gates: BTreeMap<String, bool>,
    /// `oomScoreAdj`.
    pub oom_score_adj: i32,
    /// `logging.verbosity`.
    pub verbosity: u32,
    /// `logging.format` is `json`.
    pub log_json: bool,
    /// `enableProfiling`.
    pub profiling: bool,
    /// `nftables.flowtableInterfaces` (verdict's own field): the fast path's interfaces.
    pub flowtable_interfaces: Vec<String>,
}

fn duration(field: &str, raw: Option<&str>) -> Result<Duration, ConfigError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(Duration::ZERO),
        Some(r) => {
            parse_duration(r).ok_or_else(|| bad(format!("{field} {r:?} is not a duration (e.g. 500ms, 1s, 1m30s)")))
        }
    }
}

fn server(field: &str, raw: Option<&str>) -> Result<Option<SocketAddr>, ConfigError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(r) => r.parse().map(Some).map_err(|_| bad(format!("{field} {r:?} is not an IP:port address"))),
    }
}

fn non_negative(field: &str, v: Option<i64>) -> Result<u32, ConfigError> {
    let v = v.unwrap_or(0);
    u32::try_from(v).map_err(|_| bad(format!("{field} {v} must be between 0 and {}", u32::MAX)))
}

/// Every duration in the file must be one, whichever section the mode reads: upstream
/// decodes them all (a bad one fails the decode).
fn check_durations(c: &KubeProxyConfiguration) -> Result<(), ConfigError> {
    let ipt = c.iptables.as_ref();
    let ipvs = c.ipvs.as_ref();
    let nft = c.nftables.as_ref();
    let ct = c.conntrack.as_ref();
    let fields = [
        ("iptables.syncPeriod", ipt.and_then(|s| s.sync_period.as_deref())),
        ("iptables.minSyncPeriod", ipt.and_then(|s| s.min_sync_period.as_deref())),
        ("ipvs.syncPeriod", ipvs.and_then(|s| s.sync_period.as_deref())),
        ("ipvs.minSyncPeriod", ipvs.and_then(|s| s.min_sync_period.as_deref())),
        ("ipvs.tcpTimeout", ipvs.and_then(|s| s.tcp_timeout.as_deref())),
        ("ipvs.tcpFinTimeout", ipvs.and_then(|s| s.tcp_fin_timeout.as_deref())),
        ("ipvs.udpTimeout", ipvs.and_then(|s| s.udp_timeout.as_deref())),
        ("nftables.syncPeriod", nft.and_then(|s| s.sync_period.as_deref())),
        ("nftables.minSyncPeriod", nft.and_then(|s| s.min_sync_period.as_deref())),
        ("conntrack.tcpEstablishedTimeout", ct.and_then(|s| s.tcp_established_timeout.as_deref())),
        ("conntrack.tcpCloseWaitTimeout", ct.and_then(|s| s.tcp_close_wait_timeout.as_deref())),
        ("conntrack.udpTimeout", ct.and_then(|s| s.udp_timeout.as_deref())),
        ("conntrack.udpStreamTimeout", ct.and_then(|s| s.udp_stream_timeout.as_deref())),
        ("configSyncPeriod", c.config_sync_period.as_deref()),
    ];
    for (field, raw) in fields {
        duration(field, raw)?;
    }
    Ok(())
}

/// Checks a defaulted configuration.
pub fn settings(c: &KubeProxyConfiguration) -> Result<Settings, ConfigError> {
    check_durations(c)?;
    let mode = match c.mode.as_deref().map(str::trim).unwrap_or_default() {
        "" | "iptables" => Mode::Iptables,
        "ipvs" => Mode::Ipvs,
        "nftables" => Mode::Nftables,
        other => {
            return Err(bad(format!(
                "mode {other:?} is not supported: verdict is an nftables proxy that also replaces the iptables and ipvs modes (set nftables, iptables, ipvs or leave it empty)"
            )));
        }
    };
    if let Some(gate) = c.malformed_feature_gates.first() {
        return Err(bad(format!("--feature-gates {gate:?} is not Name=true or Name=false")));
    }
    let ipt = c.iptables.as_ref();
    let nft = c.nftables.as_ref();
    let ipvs = c.ipvs.as_ref();
    let (sync, min_sync) = match mode {
        Mode::Nftables => (nft.and_then(|s| s.sync_period.as_deref()), nft.and_then(|s| s.min_sync_period.as_deref())),
        Mode::Iptables => (ipt.and_then(|s| s.sync_period.as_deref()), ipt.and_then(|s| s.min_sync_period.as_deref())),
        Mode::Ipvs => (ipvs.and_then(|s| s.sync_period.as_deref()), ipvs.and_then(|s| s.min_sync_period.as_deref())),
    };
    let section = mode.name();
    let sync_period = duration(&format!("{section}.syncPeriod"), sync)?;
    if sync_period.is_zero() {
        return Err(bad("--sync-period must be greater than 0"));
    }
    let min_sync_period = duration(&format!("{section}.minSyncPeriod"), min_sync)?;
    let (masquerade_all, masquerade_bit) = match mode {
        Mode::Nftables => (nft.and_then(|s| s.masquerade_all), nft.and_then(|s| s.masquerade_bit)),
        // The ipvs proxier masquerades with the iptables section's settings.
        Mode::Iptables | Mode::Ipvs => (ipt.and_then(|s| s.masquerade_all), ipt.and_then(|s| s.masquerade_bit)),
    };
    let hostname_override = match c.hostname_override.as_deref() {
        None | Some("") => None,
        Some(h) if h.trim().is_empty() => return Err(bad("--hostname-override must not be empty")),
        Some(h) => Some(h.trim().to_lowercase()),
    };
    let bind_raw = c.bind_address.as_deref().unwrap_or("0.0.0.0").trim();
    let bind_address: IpAddr =
        bind_raw.parse().map_err(|_| bad(format!("--bind-address {bind_raw:?} is not an IP address")))?;
    let ct = c.conntrack.as_ref();
    let mut conntrack = ConntrackSettings {
        max_per_core: non_negative("conntrack.maxPerCore", ct.and_then(|c| c.max_per_core))?,
        min: non_negative("conntrack.min", ct.and_then(|c| c.min))?,
        tcp_established_timeout: duration(
            "conntrack.tcpEstablishedTimeout",
            ct.and_then(|c| c.tcp_established_timeout.as_deref()),
        )?,
        tcp_close_wait_timeout: duration(
            "conntrack.tcpCloseWaitTimeout",
            ct.and_then(|c| c.tcp_close_wait_timeout.as_deref()),
        )?,
        tcp_be_liberal: ct.and_then(|c| c.tcp_be_liberal).unwrap_or(false),
        udp_timeout: duration("conntrack.udpTimeout", ct.and_then(|c| c.udp_timeout.as_deref()))?,
        udp_stream_timeout: duration("conntrack.udpStreamTimeout", ct.and_then(|c| c.udp_stream_timeout.as_deref()))?,
        route_localnet: false,
    };
    let raw_nodeport: Vec<&str> = c.node_port_addresses.iter().flatten().map(String::as_str).collect();
    let unset = match mode {
        Mode::Nftables => NodePortAddresses::primary(),
        Mode::Iptables | Mode::Ipvs => NodePortAddresses::all(),
    };
    let nodeport_addresses =
        parse_nodeport_addresses(&raw_nodeport, unset).map_err(|e| bad(format!("--nodeport-addresses: {e}")))?;
    let localhost_node_ports = ipt.and_then(|s| s.localhost_node_ports).unwrap_or(true);
    let kept = kept::decide(&kept::Inputs {
        mode,
        nodeport_addresses: &nodeport_addresses,
        nodeport_addresses_unset: raw_nodeport.iter().all(|i| i.trim().is_empty()),
        iptables_localhost_node_ports: localhost_node_ports,
        tcp_be_liberal: conntrack.tcp_be_liberal,
        localhost_gate: c.feature_gates.as_ref().and_then(|g| g.get(kept::LOCALHOST_GATE)).copied(),
    });
    conntrack.route_localnet = kept.route_localnet();
    let config_sync_period = duration("configSyncPeriod", c.config_sync_period.as_deref())?;
    if config_sync_period.is_zero() {
        return Err(bad("--config-sync-period must be greater than 0"));
    }
    let cc = c.client_connection.as_ref();
    let qps = cc.and_then(|c| c.qps).unwrap_or(5.0);
    if !(qps.is_finite() && qps >= 0.0) {
        return Err(bad(format!("--kube-api-qps {qps} must not be negative")));
    }
    let api = ApiClient {
        kubeconfig: cc
            .and_then(|c| c.kubeconfig.as_deref())
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(PathBuf::from),
        qps,
        burst: non_negative("--kube-api-burst", cc.and_then(|c| c.burst))?,
        content_type: cc.and_then(|c| c.content_type.clone()).unwrap_or_default(),
        accept_content_types: cc.and_then(|c| c.accept_content_types.clone()).unwrap_or_default(),
    };
    let oom_score_adj = c.oom_score_adj.unwrap_or(-999);
    if !(-1000..=1000).contains(&oom_score_adj) {
        return Err(bad(format!("--oom-score-adj {oom_score_adj} is not between -1000 and 1000")));
    }
    let log = c.logging.as_ref();
    let log_json = match log.and_then(|l| l.format.as_deref()).map(str::trim) {
        None | Some("") | Some("text") => false,
        Some("json") => true,
        Some(other) => return Err(bad(format!("--logging-format {other:?} is not text or json"))),
    };
    let dl = c.detect_local.as_ref();
    Ok(Settings {
        mode,
        mode_as_written: c.mode.as_deref().unwrap_or_default().trim().to_string(),
        hostname_override,
        bind_address,
        healthz: server("--healthz-bind-address", c.healthz_bind_address.as_deref())?,
        metrics: server("--metrics-bind-address", c.metrics_bind_address.as_deref())?,
        bind_address_hard_fail: c.bind_address_hard_fail.unwrap_or(false),
        sync_period,
        min_sync_period,
        masquerade_all: masquerade_all.unwrap_or(false),
        masquerade_bit: masquerade_bit.unwrap_or(14),
        cluster_cidrs: c
            .cluster_cidr
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        nodeport_addresses,
        kept,
        detect_local: (
            c.detect_local_mode.clone().unwrap_or_default(),
            dl.and_then(|d| d.bridge_interface.clone()).filter(|s| !s.is_empty()),
            dl.and_then(|d| d.interface_name_prefix.clone()).filter(|s| !s.is_empty()),
        ),
        conntrack,
        api,
        feature_gates: c.feature_gates.clone().unwrap_or_default(),
        oom_score_adj: oom_score_adj as i32,
        verbosity: log.and_then(|l| l.verbosity).unwrap_or(0),
        log_json,
        profiling: c.enable_profiling.unwrap_or(false),
        flowtable_interfaces: nft.and_then(|s| s.flowtable_interfaces.clone()).unwrap_or_default(),
    })
}
