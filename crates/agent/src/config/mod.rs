//! Validated configuration: everything the user can get wrong is caught here, before any
//! socket is opened, and reported in one line (exit code 64).
//!
//! The order is upstream's (`cmd/kube-proxy/app/options.go`): the `--config` file, or an empty
//! configuration, gets upstream's defaults for its zero values ([`defaults`]); without
//! `--config` kube-proxy's flags are laid over it, with `--config` only `--hostname-override`
//! and the logging flags are ([`flags`]); [`resolve`] checks the result and reads the section
//! of the mode named. verdict's own flags (`--table`, `--masquerade-bit`, `--sync-period`, ...)
//! apply last, with or without `--config`.

mod defaults;
mod duration;
mod file;
mod flags;
pub mod kept;
mod resolve;
mod write;

use crate::cli::{CountersMode, RulesArgs, RunArgs};
pub use duration::parse_duration;
pub use file::KubeProxyConfiguration;
use flags::RunFlags;
pub use resolve::{Mode, Settings};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use verdict_controller::fast_path::InterfacePatterns;
use verdict_model::{Cidr, DetectLocal, ProxyConfig, ServiceCounters};

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

/// The file (if any) with defaults and flags applied, checked; and what to warn about.
#[derive(Debug)]
pub struct Effective {
    /// The configuration as kube-proxy would hold it (for `--write-config-to`).
    pub config: KubeProxyConfiguration,
    /// What it means.
    pub settings: Settings,
    /// One line each: unknown fields, flags ignored because of `--config`, ...
    pub warnings: Vec<String>,
}

impl Effective {
    /// Reads `--config`, applies defaults and flags, checks.
    pub fn from_args(rules: &RulesArgs, run: &RunFlags) -> Result<Effective, ConfigError> {
        let mut warnings = Vec::new();
        let mut config = match &rules.config {
            Some(path) => {
                let loaded = KubeProxyConfiguration::load(path)?;
                for field in loaded.unknown_fields {
                    warnings.push(format!(
                        "--config {}: {field} is not a field of {}: ignored",
                        path.display(),
                        file::API_VERSION
                    ));
                }
                loaded.config
            }
            None => KubeProxyConfiguration::default(),
        };
        defaults::apply(&mut config);
        if rules.config.is_some() {
            for flag in flags::given_field_flags(rules, run) {
                warnings.push(format!(
                    "{flag} is ignored because --config is given (as kube-proxy does): set it in the file"
                ));
            }
            flags::overlay_always(&mut config, rules, run);
        } else {
            flags::overlay_all(&mut config, rules, run);
        }
        let settings = resolve::settings(&config)?;
        warnings.extend(settings.kept.warnings());
        Ok(Effective { config, settings, warnings })
    }
}

/// Parses a Go-style duration flag of verdict's own.
fn own_duration(flag: &str, raw: &str) -> Result<Duration, ConfigError> {
    parse_duration(raw).ok_or_else(|| bad(format!("--{flag} {raw:?} is not a duration (e.g. 500ms, 1s, 1m30s)")))
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
    /// `--flowtable-interfaces` (or the file's `nftables.flowtableInterfaces`): the fast
    /// path, when given.
    pub fast_path: Option<InterfacePatterns>,
}

impl RulesConfig {
    /// Validates the rule flags, over the `--config` file if one is given.
    pub fn from_args(args: &RulesArgs) -> Result<(RulesConfig, Effective), ConfigError> {
        let effective = Effective::from_args(args, &RunFlags::default())?;
        Ok((Self::merge(args, &effective.settings)?, effective))
    }

    /// The settings, with verdict's own rule flags.
    fn merge(args: &RulesArgs, s: &Settings) -> Result<RulesConfig, ConfigError> {
        let node_name = match &s.hostname_override {
            Some(n) => n.clone(),
            None => nix::unistd::gethostname()
                .map_err(|e| bad(format!("cannot read the host name ({e}); set --hostname-override")))?
                .to_string_lossy()
                .trim()
                .to_lowercase(),
        };
        if node_name.is_empty() {
            return Err(bad("the host name is empty; set --hostname-override"));
        }
        let mut cluster_cidrs: Vec<Cidr> = Vec::new();
        for raw in &s.cluster_cidrs {
            let cidr = Cidr::parse_tolerant(raw).ok_or_else(|| bad(format!("--cluster-cidr {raw:?} is not a CIDR")))?;
            if cluster_cidrs.iter().any(|c| c.family() == cidr.family()) {
                return Err(bad(format!("--cluster-cidr has more than one {} network", cidr.family())));
            }
            cluster_cidrs.push(cidr);
        }
        let bit = args.masquerade_bit.unwrap_or(s.masquerade_bit);
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
        let detect_local = detect_local(&s.detect_local)?;
        let mut service_cidrs = Vec::new();
        let ranges = args.service_cluster_ip_range.as_deref().unwrap_or_default();
        for raw in ranges.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            service_cidrs.push(
                Cidr::parse_tolerant(raw)
                    .ok_or_else(|| bad(format!("--service-cluster-ip-range {raw:?} is not a CIDR")))?,
            );
        }
        let service_counters = service_counters(args)?;
        // verdict's own flag, so it applies with `--config` too, and wins over the file.
        let (fast_path, source): (&[String], _) = match args.flowtable_interfaces.as_slice() {
            [] => (&s.flowtable_interfaces, "nftables.flowtableInterfaces"),
            given => (given, "--flowtable-interfaces"),
        };
        let fast_path = InterfacePatterns::parse(fast_path.iter().map(String::as_str))
            .map_err(|e| bad(format!("{source}: {e}")))?;
        let fast_path = (!fast_path.is_empty()).then_some(fast_path);
        Ok(RulesConfig {
            node_name,
            proxy: ProxyConfig {
                cluster_cidrs,
                nodeport_addresses: s.nodeport_addresses.clone(),
                localhost_nodeports: s.kept.localhost_nodeports,
                drop_ct_invalid: s.kept.drop_ct_invalid,
                masquerade_all: s.masquerade_all,
                masquerade_bit: bit as u8,
                detect_local,
                service_cidrs,
                service_counters,
                max_elements_per_service: match args.max_elements_per_service {
                    Some(0) => return Err(bad("--max-elements-per-service must be greater than 0")),
                    Some(n) => n,
                    None => verdict_model::DEFAULT_MAX_ELEMENTS_PER_SERVICE,
                },
                // Offline commands assume a kernel with both; `run` asks the kernel.
                ..ProxyConfig::default()
            },
            table,
            fast_path,
        })
    }

    /// How the table is rendered.
    pub fn render_options(&self) -> verdict_layout::RenderOptions {
        verdict_layout::RenderOptions { table: self.table.clone(), fast_path: self.fast_path.is_some() }
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
fn detect_local((mode, bridge, prefix): &(String, Option<String>, Option<String>)) -> Result<DetectLocal, ConfigError> {
    let (bridge, prefix) = (bridge.clone(), prefix.clone());
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
    /// An API server: a kubeconfig, or the service account's credentials with `--master`, or
    /// with neither in-cluster configuration ([`crate::incluster`], checked here).
    ApiServer {
        /// The kubeconfig file.
        kubeconfig: Option<PathBuf>,
        /// `--master`: the API server's real address.
        master: Option<String>,
    },
}

/// What `run` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Proxy until stopped (or once, with `--once`).
    Proxy,
    /// `--cleanup`: remove the tables and exit.
    Cleanup,
    /// `--init-only`: the privileged setup (conntrack sysctls), then exit.
    InitOnly,
}

/// `verdict run`, validated.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Rule settings.
    pub rules: RulesConfig,
    /// Upstream's settings.
    pub settings: Settings,
    /// Where objects come from.
    pub source: Source,
    /// What to do.
    pub action: Action,
    /// Exit after the first sync.
    pub once: bool,
    /// Remove upstream kube-proxy's leftovers once the table is in place.
    pub cleanup_leftovers: bool,
    /// How long kube-proxy's IPVS virtual servers are kept while IPVS forwards connections.
    pub ipvs_drain_timeout: Duration,
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
    /// How long the API server has to answer, send a list page, or the next object of a list.
    pub api_timeout: Duration,
    /// The `--config` file, watched: a change makes the agent exit, as kube-proxy does.
    pub config_file: Option<PathBuf>,
    /// The configuration in effect, as `/configz` serves it.
    pub configz: String,
}

/// Reads a kubeconfig now, so that a broken file is one line and exit 64 before anything is
/// opened.
fn read_kubeconfig(path: &std::path::Path) -> Result<(), ConfigError> {
    kube::config::Kubeconfig::read_from(path).map(drop).map_err(|e| {
        let e = e.to_string().replace('\n', " ");
        bad(format!("--kubeconfig {}: not a kubeconfig: {e}", path.display()))
    })
}

/// Checks where objects come from: a kubeconfig, `--master`, or with neither in-cluster
/// configuration, as kube-proxy falls back to it; then `warnings` gets one line, since its
/// address is the `kubernetes` Service's ClusterIP, which only a proxy makes reachable.
fn api_source(
    kubeconfig: Option<PathBuf>,
    master: Option<String>,
    warnings: &mut Vec<String>,
) -> Result<Source, ConfigError> {
    let master = master.map(|m| m.trim().to_string()).filter(|m| !m.is_empty());
    let is_url = |m: &str| {
        m.parse::<hyper::Uri>()
            .is_ok_and(|u| matches!(u.scheme_str(), Some("https" | "http")) && u.host().is_some_and(|h| !h.is_empty()))
    };
    if let Some(m) = &master
        && !is_url(m)
    {
        return Err(bad(format!("--master {m:?} is not a URL (e.g. https://10.0.0.10:6443)")));
    }
    match &kubeconfig {
        Some(path) if !path.is_file() => return Err(bad(format!("--kubeconfig {}: no such file", path.display()))),
        Some(path) => read_kubeconfig(path)?,
        None if master.is_none() => {
            let in_cluster = crate::incluster::InCluster::from_env().map_err(|e| {
                bad(format!(
                    "no --kubeconfig and no --master, and {e}: set --master or --kubeconfig to the API server's real address (docs/operations.md#the-api-servers-address)"
                ))
            })?;
            warnings.push(in_cluster.warning());
        }
        None => {}
    }
    Ok(Source::ApiServer { kubeconfig, master })
}

impl RunConfig {
    /// Validates `verdict run`'s flags and configuration file.
    pub fn from_args(args: &RunArgs) -> Result<(RunConfig, Effective), ConfigError> {
        let run_flags = RunFlags {
            kubeconfig: args.kubeconfig.as_ref(),
            metrics_bind_address: args.metrics_bind_address.as_deref(),
            healthz_bind_address: args.healthz_bind_address.as_deref(),
            upstream: Some(&args.upstream),
        };
        let mut effective = Effective::from_args(&args.rules, &run_flags)?;
        let mut source_warnings = Vec::new();
        let s = &effective.settings;
        let rules = RulesConfig::merge(&args.rules, s)?;
        let min_sync_period = match &args.min_sync_period {
            Some(raw) => own_duration("min-sync-period", raw)?,
            None => s.min_sync_period,
        };
        let sync_period = match &args.sync_period {
            Some(raw) => own_duration("sync-period", raw)?,
            None => s.sync_period,
        };
        if sync_period.is_zero() {
            return Err(bad("--sync-period must be greater than 0"));
        }
        if min_sync_period > sync_period {
            return Err(bad(format!(
                "--min-sync-period ({min_sync_period:?}) must not exceed --sync-period ({sync_period:?})"
            )));
        }
        let service_counters_period =
            own_duration("service-counters-period", args.service_counters_period.as_deref().unwrap_or("10s"))?;
        if service_counters_period.is_zero() {
            return Err(bad("--service-counters-period must be greater than 0"));
        }
        let ipvs_drain_timeout = own_duration("ipvs-drain-timeout", &args.ipvs_drain_timeout)?;
        let api_timeout = own_duration("api-timeout", args.api_timeout.as_deref().unwrap_or("1m"))?;
        if api_timeout.is_zero() {
            return Err(bad("--api-timeout must be greater than 0"));
        }
        let action = match (args.cleanup == Some(true), args.upstream.init_only == Some(true)) {
            (true, true) => return Err(bad("--cleanup and --init-only cannot be combined")),
            (true, false) => Action::Cleanup,
            (false, true) => Action::InitOnly,
            (false, false) => Action::Proxy,
        };
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
            // Cleaning up and the privileged setup never talk to the API server, so they need
            // no address; a kubeconfig that is given must still be one.
            None if action != Action::Proxy || args.upstream.write_config_to.is_some() => {
                if let Some(path) = &s.api.kubeconfig
                    && path.is_file()
                {
                    read_kubeconfig(path)?;
                }
                Source::ApiServer { kubeconfig: s.api.kubeconfig.clone(), master: args.master.clone() }
            }
            None => api_source(s.api.kubeconfig.clone(), args.master.clone(), &mut source_warnings)?,
        };
        let config = RunConfig {
            rules,
            settings: s.clone(),
            source,
            action,
            once: args.once,
            cleanup_leftovers: args.cleanup_leftovers,
            ipvs_drain_timeout,
            metrics_addr: s.metrics,
            healthz_addr: s.healthz,
            min_sync_period,
            sync_period,
            state_dir: Some(args.state_dir.trim()).filter(|d| !d.is_empty()).map(std::path::PathBuf::from),
            service_counters_period,
            api_timeout,
            config_file: args.rules.config.clone(),
            configz: write::configz(&effective.config),
        };
        effective.warnings.extend(source_warnings);
        Ok((config, effective))
    }
}

/// `--write-config-to`.
pub fn write_config(effective: &Effective, path: &std::path::Path) -> std::io::Result<()> {
    write::write(&effective.config, path)
}

#[cfg(test)]
mod tests;
