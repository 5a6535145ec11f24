//! kube-proxy's configuration file, `kubeproxy.config.k8s.io/v1alpha1` `KubeProxyConfiguration`,
//! read as upstream reads it: every field of the version is accepted (kubeadm writes all of
//! them, zero values meaning "default"), a field the version does not have is one warning
//! (upstream decodes strictly, then leniently with a warning), and a value of the wrong type is
//! an error. Which fields verdict acts on, and how, is [`super::resolve`]'s business.

use super::{ConfigError, bad};
use serde::{Deserialize, Serialize};
use serde_norway::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The API version verdict reads.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";

/// `KubeProxyConfiguration`. Leaves verdict has no use for are kept as raw values: they are
/// accepted whatever their spelling, as upstream's lenient decoder accepts them.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct KubeProxyConfiguration {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    pub client_connection: Option<ClientConnection>,
    pub logging: Option<Logging>,
    pub hostname_override: Option<String>,
    pub bind_address: Option<String>,
    pub healthz_bind_address: Option<String>,
    pub metrics_bind_address: Option<String>,
    pub bind_address_hard_fail: Option<bool>,
    pub enable_profiling: Option<bool>,
    pub show_hidden_metrics_for_version: Option<String>,
    pub mode: Option<String>,
    pub iptables: Option<IptablesSection>,
    pub ipvs: Option<IpvsSection>,
    pub nftables: Option<NftablesSection>,
    pub winkernel: Option<WinkernelSection>,
    pub detect_local_mode: Option<String>,
    pub detect_local: Option<DetectLocalSection>,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Option<String>,
    pub node_port_addresses: Option<Vec<String>>,
    pub oom_score_adj: Option<i64>,
    pub conntrack: Option<ConntrackSection>,
    pub config_sync_period: Option<String>,
    /// Unused since the userspace proxy went; kubeadm still writes it.
    pub port_range: Option<Value>,
    /// Windows only.
    pub windows_run_as_service: Option<Value>,
    /// `--feature-gates` items that are not `Name=bool` (flags only; refused by `resolve`).
    #[serde(skip)]
    pub malformed_feature_gates: Vec<String>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct ClientConnection {
    pub kubeconfig: Option<String>,
    pub accept_content_types: Option<String>,
    pub content_type: Option<String>,
    pub qps: Option<f64>,
    pub burst: Option<i64>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct Logging {
    pub format: Option<String>,
    pub flush_frequency: Option<Value>,
    pub verbosity: Option<u32>,
    pub vmodule: Option<Value>,
    pub options: Option<LoggingOptions>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[allow(missing_docs)]
pub struct LoggingOptions {
    pub text: Option<LogFormatOptions>,
    pub json: Option<LogFormatOptions>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct LogFormatOptions {
    pub split_stream: Option<bool>,
    pub info_buffer_size: Option<Value>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct IptablesSection {
    pub masquerade_all: Option<bool>,
    pub masquerade_bit: Option<i64>,
    pub localhost_node_ports: Option<bool>,
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct IpvsSection {
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
    pub scheduler: Option<String>,
    #[serde(rename = "excludeCIDRs")]
    pub exclude_cidrs: Option<Vec<String>>,
    #[serde(rename = "strictARP")]
    pub strict_arp: Option<bool>,
    pub tcp_timeout: Option<String>,
    pub tcp_fin_timeout: Option<String>,
    pub udp_timeout: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct NftablesSection {
    pub masquerade_all: Option<bool>,
    pub masquerade_bit: Option<i64>,
    pub sync_period: Option<String>,
    pub min_sync_period: Option<String>,
    /// verdict's own field, not upstream's (upstream's lenient decoder warns and ignores it):
    /// `--flowtable-interfaces` in the file.
    pub flowtable_interfaces: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct WinkernelSection {
    pub network_name: Option<Value>,
    pub source_vip: Option<Value>,
    #[serde(rename = "enableDSR")]
    pub enable_dsr: Option<Value>,
    pub root_hns_endpoint_name: Option<Value>,
    pub forward_health_check_vip: Option<Value>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct DetectLocalSection {
    pub bridge_interface: Option<String>,
    pub interface_name_prefix: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct ConntrackSection {
    pub max_per_core: Option<i64>,
    pub min: Option<i64>,
    pub tcp_established_timeout: Option<String>,
    pub tcp_close_wait_timeout: Option<String>,
    pub tcp_be_liberal: Option<bool>,
    pub udp_timeout: Option<String>,
    pub udp_stream_timeout: Option<String>,
}

/// A file, read: the configuration, and the fields it has that v1alpha1 does not.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The configuration.
    pub config: KubeProxyConfiguration,
    /// Dotted paths of fields verdict does not know (each logged once, as a warning).
    pub unknown_fields: Vec<String>,
}

impl KubeProxyConfiguration {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("--config {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| bad(format!("--config {}: {e}", path.display())))
    }

    /// Parses a configuration file's text.
    pub fn parse(text: &str) -> Result<Loaded, String> {
        let mut unknown_fields = Vec::new();
        let config: KubeProxyConfiguration = match serde_norway::from_str::<Value>(text) {
            // An empty file is a configuration with every default, as upstream decodes it.
            Ok(Value::Null) => KubeProxyConfiguration::default(),
            Ok(value) => serde_ignored::deserialize(value, |path| unknown_fields.push(dotted(&path)))
                .map_err(|e| format!("not a KubeProxyConfiguration: {e}"))?,
            Err(e) => return Err(format!("not a KubeProxyConfiguration: {e}")),
        };
        if let Some(v) = &config.api_version
            && v != API_VERSION
        {
            return Err(format!("apiVersion {v:?} is not {API_VERSION}"));
        }
        if let Some(k) = &config.kind
            && k != "KubeProxyConfiguration"
        {
            return Err(format!("kind {k:?} is not KubeProxyConfiguration"));
        }
        Ok(Loaded { config, unknown_fields })
    }
}

/// `conntrack.typo`, without serde_ignored's `?` for each optional section passed through.
fn dotted(path: &serde_ignored::Path) -> String {
    path.to_string().split('.').filter(|p| *p != "?").collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_named_with_their_path_and_the_rest_is_read() {
        let loaded = KubeProxyConfiguration::parse(
            "kind: KubeProxyConfiguration\nmode: ipvs\nnoSuchField: 1\nconntrack:\n  maxPerCore: 7\n  typo: x\n",
        )
        .unwrap();
        assert_eq!(loaded.unknown_fields, ["noSuchField", "conntrack.typo"]);
        assert_eq!(loaded.config.mode.as_deref(), Some("ipvs"));
        assert_eq!(loaded.config.conntrack.unwrap().max_per_core, Some(7));
    }

    #[test]
    fn wrong_types_and_versions_are_errors() {
        assert!(KubeProxyConfiguration::parse("conntrack:\n  maxPerCore: many\n").is_err());
        assert!(KubeProxyConfiguration::parse("apiVersion: kubeproxy.config.k8s.io/v1beta1\n").is_err());
        assert!(KubeProxyConfiguration::parse("kind: KubeletConfiguration\n").is_err());
        assert!(KubeProxyConfiguration::parse("").unwrap().unknown_fields.is_empty());
    }

    #[test]
    fn zero_values_as_kubeadm_writes_them_are_accepted() {
        let text = "conntrack:\n  maxPerCore: null\n  min: null\n  tcpEstablishedTimeout: null\n\
                    logging:\n  flushFrequency: 0\n  options:\n    json:\n      infoBufferSize: \"0\"\n\
                    nftables:\n  masqueradeBit: null\n  syncPeriod: 0s\nnodePortAddresses: null\n\
                    featureGates: {}\nwinkernel:\n  enableDSR: false\n";
        let loaded = KubeProxyConfiguration::parse(text).unwrap();
        assert!(loaded.unknown_fields.is_empty(), "{:?}", loaded.unknown_fields);
    }
}
