//! Validated configuration: everything the user can get wrong is caught here, before any
//! socket is opened, and reported in one line (exit code 64).

use crate::cli::{CountersMode, RulesArgs, RunArgs};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use verdict_model::{Cidr, DetectLocal, ProxyConfig, ServiceCounters, parse_nodeport_addresses};

/// Invalid configuration (exit code 64).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// The fields of kube-proxy's configuration file that apply to verdict.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyConfiguration {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(rename = "clusterCIDR")]
    cluster_cidr: Option<String>,
    hostname_override: Option<String>,
    node_port_addresses: Option<Vec<String>>,
    metrics_bind_address: Option<String>,
    healthz_bind_address: Option<String>,
    client_connection: Option<ClientConnection>,
    mode: Option<String>,
    nftables: Option<NftablesSection>,
    detect_local_mode: Option<String>,
    detect_local: Option<DetectLocalSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DetectLocalSection {
    bridge_interface: Option<String>,
    interface_name_prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientConnection {
    kubeconfig: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NftablesSection {
    masquerade_all: Option<bool>,
    masquerade_bit: Option<i64>,
    sync_period: Option<String>,
    min_sync_period: Option<String>,
}

const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";

impl KubeProxyConfiguration {
    /// The `--config` file, or the defaults when there is none.
    pub fn from_flag(args: &RulesArgs) -> Result<KubeProxyConfiguration, ConfigError> {
        match &args.config {
            Some(path) => KubeProxyConfiguration::load(path),
            None => Ok(KubeProxyConfiguration::default()),
        }
    }

    /// Reads and checks a configuration file.
    pub fn load(path: &std::path::Path) -> Result<KubeProxyConfiguration, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("--config {}: {e}", path.display())))?;
        let cfg: KubeProxyConfiguration = serde_yaml::from_str(&text)
            .map_err(|e| bad(format!("--config {}: not a KubeProxyConfiguration: {e}", path.display())))?;
        if let Some(v) = &cfg.api_version
            && v != API_VERSION
        {
            return Err(bad(format!("--config {}: apiVersion {v:?} is not {API_VERSION}", path.display())));
        }
        if let Some(k) = &cfg.kind
            && k != "KubeProxyConfiguration"
        {
            return Err(bad(format!("--config {}: kind {k:?} is not KubeProxyConfiguration", path.display())));
        }
        match cfg.mode.as_deref() {
            None | Some("") | Some("nftables") => {}
            Some(other) => {
                return Err(bad(format!(
                    "--config {}: mode {other:?} is not supported: verdict is an nftables proxy (set mode: nftables or leave it empty)",
                    path.display()
                )));
            }
        }
        Ok(cfg)
    }
}

/// Parses a Go-style duration (`500ms`, `1s`, `1m30s`, `1h`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let factor = match &rest[..unit] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit..];
        // Out of range (`99999999999h`) is not a duration: `from_secs_f64` and `+=` would panic.
        total = total.checked_add(Duration::try_from_secs_f64(value * factor).ok()?)?;
    }
    Some(total)
}

/// Settings that shape the rules, validated.
#[derive(Clone, Debug)]
pub struct RulesConfig {
    /// This node's name.
    pub node_name: String,
    /// The model's configuration.
    pub proxy: ProxyConfig,
    /// The table name.
    pub table: String,
}

impl RulesConfig {
    /// Validates the rule flags, over the `--config` file if one is given.
    pub fn from_args(args: &RulesArgs) -> Result<RulesConfig, ConfigError> {
        Self::merge(args, &KubeProxyConfiguration::from_flag(args)?)
    }

    /// Flags over the file over the defaults.
    fn merge(args: &RulesArgs, file: &KubeProxyConfiguration) -> Result<RulesConfig, ConfigError> {
        let hostname = args.hostname_override.clone().or_else(|| file.hostname_override.clone());
        let node_name = match hostname {
            Some(n) if n.trim().is_empty() => return Err(bad("--hostname-override must not be empty")),
            Some(n) => n.trim().to_lowercase(),
            None => nix::unistd::gethostname()
                .map_err(|e| bad(format!("cannot read the host name ({e}); set --hostname-override")))?
                .to_string_lossy()
                .trim()
                .to_lowercase(),
        };
        let cidrs: Vec<String> = if args.cluster_cidr.is_empty() {
            file.cluster_cidr.as_deref().unwrap_or_default().split(',').map(str::to_string).collect()
        } else {
            args.cluster_cidr.clone()
        };
        let mut cluster_cidrs: Vec<Cidr> = Vec::new();
        for raw in cidrs.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            let cidr = Cidr::parse_tolerant(raw).ok_or_else(|| bad(format!("--cluster-cidr {raw:?} is not a CIDR")))?;
            if cluster_cidrs.iter().any(|c| c.family() == cidr.family()) {
                return Err(bad(format!("--cluster-cidr has more than one {} network", cidr.family())));
            }
            cluster_cidrs.push(cidr);
        }
        let np: Vec<String> = if args.nodeport_addresses.is_empty() {
            file.node_port_addresses.clone().unwrap_or_default()
        } else {
            args.nodeport_addresses.clone()
        };
        let np: Vec<&str> = np.iter().map(String::as_str).collect();
        let nodeport_addresses =
            parse_nodeport_addresses(&np).map_err(|e| bad(format!("--nodeport-addresses: {e}")))?;
        let nft = file.nftables.as_ref();
        let bit = args.masquerade_bit.or(nft.and_then(|n| n.masquerade_bit)).unwrap_or(14);
        if !(0..=31).contains(&bit) {
            return Err(bad(format!("--masquerade-bit {bit} is not a bit of a 32-bit mark (0-31)")));
        }
        let table = args.table.clone().unwrap_or_else(|| verdict_nft::ruleset::DEFAULT_TABLE.to_string());
        if table.is_empty()
            || table.len() > 200
            || !table.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(format!("--table {table:?} is not a valid nftables table name")));
        }
        let detect_local = detect_local(args, file)?;
        let mut service_cidrs = Vec::new();
        for raw in args.service_cluster_ip_range.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            service_cidrs.push(
                Cidr::parse_tolerant(raw)
                    .ok_or_else(|| bad(format!("--service-cluster-ip-range {raw:?} is not a CIDR")))?,
            );
        }
        let service_counters = service_counters(args)?;
        Ok(RulesConfig {
            node_name,
            proxy: ProxyConfig {
                cluster_cidrs,
                nodeport_addresses,
                masquerade_all: args.masquerade_all || nft.and_then(|n| n.masquerade_all).unwrap_or(false),
                masquerade_bit: bit as u8,
                detect_local,
                service_cidrs,
                service_counters,
                // Offline commands assume a kernel with both; `run` asks the kernel.
                ..ProxyConfig::default()
            },
            table,
        })
    }
}

/// `--service-counters` and its selector, checked: a selector without `labelled` (or the
/// reverse) is a mistake worth stopping for, since it silently counts nothing or everything.
fn service_counters(args: &RulesArgs) -> Result<ServiceCounters, ConfigError> {
    let selector = args.service_counters_selector.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match (args.service_counters, selector) {
        (CountersMode::Off, None) => Ok(ServiceCounters::Off),
        (CountersMode::All, None) => Ok(ServiceCounters::All),
        (CountersMode::Labelled, Some(sel)) => {
            let mut reqs = Vec::new();
            for part in sel.split(',').map(str::trim) {
                let (key, value) = match part.split_once('=') {
                    Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
                    None => (part, None),
                };
                let label_char = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
                if key.is_empty()
                    || !key.chars().all(label_char)
                    || value.as_deref().is_some_and(|v| !v.chars().all(label_char))
                {
                    return Err(bad(format!("--service-counters-selector {part:?} is not `key` or `key=value`")));
                }
                reqs.push((key.to_string(), value));
            }
            Ok(ServiceCounters::Labelled(reqs))
        }
        (CountersMode::Labelled, None) => Err(bad("--service-counters=labelled needs --service-counters-selector")),
        (_, Some(_)) => Err(bad("--service-counters-selector needs --service-counters=labelled")),
    }
}

/// `--detect-local-mode` and its companions (flags over the file), checked.
fn detect_local(args: &RulesArgs, file: &KubeProxyConfiguration) -> Result<DetectLocal, ConfigError> {
    let section = file.detect_local.as_ref();
    let mode = args.detect_local_mode.clone().or_else(|| file.detect_local_mode.clone()).unwrap_or_default();
    let bridge = args.pod_bridge_interface.clone().or_else(|| section.and_then(|d| d.bridge_interface.clone()));
    let prefix =
        args.pod_interface_name_prefix.clone().or_else(|| section.and_then(|d| d.interface_name_prefix.clone()));
    let named = |value: Option<String>, flag: &str| -> Result<String, ConfigError> {
        match value.map(|v| v.trim().to_string()) {
            Some(v) if !v.is_empty() && v.len() < 16 => Ok(v),
            Some(v) if !v.is_empty() => Err(bad(format!("{flag} {v:?} is longer than an interface name (15 bytes)"))),
            _ => Err(bad(format!("--detect-local-mode={mode} needs {flag}"))),
        }
    };
    Ok(match mode.trim() {
        "" | "ClusterCIDR" => DetectLocal::ClusterCidr,
        "NodeCIDR" => DetectLocal::NodeCidr,
        "BridgeInterface" => DetectLocal::BridgeInterface(named(bridge, "--pod-bridge-interface")?),
        "InterfaceNamePrefix" => DetectLocal::InterfaceNamePrefix(named(prefix, "--pod-interface-name-prefix")?),
        other => {
            return Err(bad(format!(
                "--detect-local-mode {other:?} is not one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix"
            )));
        }
    })
}

/// Where the agent's objects come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A manifests directory.
    Manifests(PathBuf),
    /// An API server: a kubeconfig (`None`: in-cluster) and an optional server override.
    ApiServer {
        /// The kubeconfig file.
        kubeconfig: Option<PathBuf>,
        /// `--master`.
        master: Option<String>,
    },
}

/// `verdict run`, validated.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Rule settings.
    pub rules: RulesConfig,
    /// Where objects come from.
    pub source: Source,
    /// Exit after the first sync.
    pub once: bool,
    /// Clean up and exit.
    pub cleanup: bool,
    /// Remove upstream kube-proxy's leftovers at start.
    pub cleanup_leftovers: bool,
    /// `/metrics`, `/proxyMode`.
    pub metrics_addr: Option<SocketAddr>,
    /// `/healthz`, `/livez`.
    pub healthz_addr: Option<SocketAddr>,
    /// Minimum time between syncs.
    pub min_sync_period: Duration,
    /// Retry bound; health timeout is twice this.
    pub sync_period: Duration,
    /// Where the table's state is kept between runs (see `SyncConfig::state_dir`).
    pub state_dir: Option<std::path::PathBuf>,
    /// How often the per-Service counters are read (see `crate::counters`).
    pub service_counters_period: Duration,
}

fn bind_address(flag: &str, raw: &str, default_port: u16) -> Result<Option<SocketAddr>, ConfigError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    if let Ok(sa) = raw.parse::<SocketAddr>() {
        return Ok(Some(sa));
    }
    match raw.parse::<std::net::IpAddr>() {
        Ok(ip) => Ok(Some(SocketAddr::new(ip, default_port))),
        Err(_) => Err(bad(format!("--{flag} {raw:?} is not an IP:port address"))),
    }
}

fn duration(flag: &str, raw: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    match raw {
        None => Ok(default),
        Some(r) => {
            parse_duration(r).ok_or_else(|| bad(format!("--{flag} {r:?} is not a duration (e.g. 500ms, 1s, 1m30s)")))
        }
    }
}

impl RunConfig {
    /// Validates `verdict run`'s flags and configuration file.
    pub fn from_args(args: &RunArgs) -> Result<RunConfig, ConfigError> {
        let file = KubeProxyConfiguration::from_flag(&args.rules)?;
        let rules = RulesConfig::merge(&args.rules, &file)?;
        let nft = file.nftables.as_ref();
        let min_sync_period = duration(
            "min-sync-period",
            args.min_sync_period.as_deref().or(nft.and_then(|n| n.min_sync_period.as_deref())),
            Duration::from_secs(1),
        )?;
        let sync_period = duration(
            "sync-period",
            args.sync_period.as_deref().or(nft.and_then(|n| n.sync_period.as_deref())),
            Duration::from_secs(30),
        )?;
        if sync_period.is_zero() {
            return Err(bad("--sync-period must be greater than 0"));
        }
        let service_counters_period =
            duration("service-counters-period", args.service_counters_period.as_deref(), Duration::from_secs(10))?;
        if service_counters_period.is_zero() {
            return Err(bad("--service-counters-period must be greater than 0"));
        }
        if min_sync_period > sync_period {
            return Err(bad(format!(
                "--min-sync-period ({min_sync_period:?}) must not exceed --sync-period ({sync_period:?})"
            )));
        }
        let metrics =
            args.metrics_bind_address.clone().or(file.metrics_bind_address.clone()).unwrap_or("127.0.0.1:10249".into());
        let healthz =
            args.healthz_bind_address.clone().or(file.healthz_bind_address.clone()).unwrap_or("0.0.0.0:10256".into());
        let source = match &args.manifests {
            Some(dir) => {
                if args.kubeconfig.is_some() || args.master.is_some() {
                    return Err(bad("--manifests cannot be combined with --kubeconfig or --master"));
                }
                if !dir.is_dir() {
                    return Err(bad(format!("--manifests {}: not a directory", dir.display())));
                }
                Source::Manifests(dir.clone())
            }
            None => Source::ApiServer {
                kubeconfig: args.kubeconfig.clone().or(file
                    .client_connection
                    .as_ref()
                    .and_then(|c| c.kubeconfig.clone())
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from)),
                master: args.master.clone(),
            },
        };
        if let Source::ApiServer { kubeconfig: Some(path), .. } = &source
            && !path.is_file()
        {
            return Err(bad(format!("--kubeconfig {}: no such file", path.display())));
        }
        if let Source::ApiServer { kubeconfig: Some(path), .. } = &source {
            // Read now, so that a broken file is one line and exit 64 before anything is opened.
            kube::config::Kubeconfig::read_from(path).map_err(|e| {
                let e = e.to_string().replace('\n', " ");
                bad(format!("--kubeconfig {}: not a kubeconfig: {e}", path.display()))
            })?;
        }
        Ok(RunConfig {
            rules,
            source,
            once: args.once,
            cleanup: args.cleanup,
            cleanup_leftovers: args.cleanup_leftovers,
            metrics_addr: bind_address("metrics-bind-address", &metrics, 10249)?,
            healthz_addr: bind_address("healthz-bind-address", &healthz, 10256)?,
            min_sync_period,
            sync_period,
            state_dir: Some(args.state_dir.trim()).filter(|d| !d.is_empty()).map(std::path::PathBuf::from),
            service_counters_period,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h0m0s"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("1x"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn out_of_range_durations_are_refused_not_a_panic() {
        // Found by tests/fuzz_config.rs: these panicked in Duration::from_secs_f64 or `+=`.
        assert_eq!(parse_duration("99999999999999999999h"), None);
        assert_eq!(parse_duration("5124095576030431h5124095576030431h"), None);
    }
}
