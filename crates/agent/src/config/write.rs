//! `--write-config-to`: the configuration in effect written as kube-proxy writes its own: what
//! upstream's `Complete()` fills in before `writeConfigFile()` (its `platformApplyDefaults` on
//! Linux), then upstream's fields only, each as upstream's encoder writes it (every field, a
//! zero value as `""`, `false`, `0s` or `null`, keys in order, `omitempty` ones left out when
//! empty). verdict's own field (`nftables.flowtableInterfaces`) is not written: the file is
//! kube-proxy's.

use super::file::{API_VERSION, KubeProxyConfiguration};
use serde_norway::{Mapping, Value};
use std::path::Path;

/// Every field of v1alpha1 at the zero value upstream writes for it, in upstream's (sorted)
/// order: what kubeadm's `config.conf` holds, which upstream's encoder wrote.
const UPSTREAM_ZERO: &str = r#"
apiVersion: ""
bindAddress: ""
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: ""
  qps: 0
clusterCIDR: ""
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
featureGates: {}
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: ""
logging:
  flushFrequency: 0
  format: ""
  options:
    json:
      infoBufferSize: "0"
      splitStream: false
    text:
      infoBufferSize: "0"
      splitStream: false
  verbosity: 0
  vmodule: null
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
windowsRunAsService: false
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"#;

/// The `omitempty` fields: left out when empty, as upstream's encoder leaves them out.
const OMIT_EMPTY: &[&str] = &[
    "featureGates",
    "logging.format",
    "logging.vmodule",
    "logging.options.json.splitStream",
    "logging.options.text.splitStream",
    "windowsRunAsService",
];

fn unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(|v| v.trim().is_empty())
}

/// What upstream's `platformApplyDefaults` (Linux) fills in after the file and flags are read.
pub fn complete(c: &mut KubeProxyConfiguration) {
    if unset(&c.mode) {
        c.mode = Some("iptables".into());
    }
    let nftables = c.mode.as_deref().map(str::trim) == Some("nftables");
    if nftables && c.node_port_addresses.as_ref().is_none_or(Vec::is_empty) {
        c.node_port_addresses = Some(vec!["primary".into()]);
    }
    if unset(&c.detect_local_mode) {
        c.detect_local_mode = Some("ClusterCIDR".into());
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

/// `value` laid over `zero`: upstream's keys only, in `zero`'s order, a missing or null value
/// written as upstream's zero value.
fn shape(zero: &Mapping, value: Option<&Mapping>, prefix: &str) -> Mapping {
    let mut out = Mapping::new();
    for (key, zero_value) in zero {
        let name = key.as_str().unwrap_or_default();
        let path = if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
        let given = value.and_then(|m| m.get(key)).filter(|v| !v.is_null());
        let written = match (zero_value, given) {
            (Value::Mapping(z), g) if !z.is_empty() => Value::Mapping(shape(z, g.and_then(Value::as_mapping), &path)),
            (_, Some(v)) => v.clone(),
            (z, None) => z.clone(),
        };
        if OMIT_EMPTY.contains(&path.as_str()) && is_empty(&written) {
            continue;
        }
        out.insert(key.clone(), written);
    }
    out
}

/// The text written: `config` completed, in upstream's shape.
pub fn render(config: &KubeProxyConfiguration) -> Result<String, serde_norway::Error> {
    let mut config = config.clone();
    complete(&mut config);
    config.api_version = Some(API_VERSION.into());
    config.kind = Some("KubeProxyConfiguration".into());
    let mut value = serde_norway::to_value(&config)?;
    // A float32 upstream, written `5`, not `5.0`.
    if let Some(qps) = value.get_mut("clientConnection").and_then(|c| c.get_mut("qps"))
        && let Some(q) = qps.as_f64().filter(|q| q.fract() == 0.0 && q.abs() < 1e15)
    {
        *qps = Value::from(q as i64);
    }
    let zero: Mapping = serde_norway::from_str(UPSTREAM_ZERO)?;
    serde_norway::to_string(&shape(&zero, value.as_mapping(), ""))
}

/// `/configz`: the configuration in effect as upstream's configz serves it, JSON under the
/// group's name (`{"kubeproxy.config.k8s.io": {...}}`), in the shape [`render`] writes.
pub fn configz(config: &KubeProxyConfiguration) -> String {
    let value = render(config).and_then(|text| serde_norway::from_str::<serde_json::Value>(&text));
    match value {
        Ok(v) => serde_json::json!({ "kubeproxy.config.k8s.io": v }).to_string(),
        Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
    }
}

/// Writes the configuration as YAML.
pub fn write(config: &KubeProxyConfiguration, path: &Path) -> std::io::Result<()> {
    let text = render(config).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(text: &str) -> (String, Value) {
        let mut c = KubeProxyConfiguration::parse(text).unwrap().config;
        super::super::defaults::apply(&mut c);
        let out = render(&c).unwrap();
        let value = serde_norway::from_str(&out).unwrap();
        (out, value)
    }

    #[test]
    fn what_is_written_reads_back_with_no_unknown_field() {
        let (text, _) = written("mode: ipvs\nconntrack: {maxPerCore: 0}\n");
        let back = KubeProxyConfiguration::parse(&text).unwrap();
        assert!(back.unknown_fields.is_empty(), "{:?}", back.unknown_fields);
        assert_eq!(back.config.mode.as_deref(), Some("ipvs"));
        assert_eq!(back.config.conntrack.unwrap().max_per_core, Some(0));
        assert_eq!(back.config.nftables.unwrap().sync_period.as_deref(), Some("30s"));
    }

    #[test]
    fn verdicts_own_field_is_not_written_and_upstreams_defaults_are() {
        let (text, v) = written("nftables: {flowtableInterfaces: [eth0]}\nlogging: {vmodule: null}\n");
        assert!(!text.contains("flowtableInterfaces"), "{text}");
        assert_eq!(v["mode"], Value::from("iptables"));
        assert_eq!(v["detectLocalMode"], Value::from("ClusterCIDR"));
        assert!(v["nodePortAddresses"].is_null(), "iptables mode has no default");
        assert!(v.get("featureGates").is_none() && v["logging"].get("vmodule").is_none(), "omitempty: {text}");
        assert_eq!(v["winkernel"]["rootHnsEndpointName"], Value::from(""));
        let (_, v) = written("mode: nftables\nnodePortAddresses: []\n");
        assert_eq!(v["nodePortAddresses"], serde_norway::from_str::<Value>("[primary]").unwrap());
        let (_, v) = written("mode: nftables\ndetectLocalMode: NodeCIDR\nnodePortAddresses: [10.0.0.0/8]\n");
        assert_eq!(v["nodePortAddresses"], serde_norway::from_str::<Value>("[10.0.0.0/8]").unwrap());
        assert_eq!(v["detectLocalMode"], Value::from("NodeCIDR"));
    }

    #[test]
    fn configz_is_the_completed_configuration_as_json_under_the_group() {
        let mut c = KubeProxyConfiguration { mode: Some("nftables".into()), ..Default::default() };
        c.cluster_cidr = Some("10.0.0.0/8".into());
        let json: serde_json::Value = serde_json::from_str(&configz(&c)).unwrap();
        let inner = &json["kubeproxy.config.k8s.io"];
        assert_eq!(inner["kind"], "KubeProxyConfiguration");
        assert_eq!(inner["mode"], "nftables");
        assert_eq!(inner["clusterCIDR"], "10.0.0.0/8");
        assert_eq!(inner["nodePortAddresses"][0], "primary", "completed as upstream completes it: {json}");
    }

    #[test]
    fn keys_are_in_upstreams_order() {
        let (text, _) = written("");
        let top: Vec<&str> = text.lines().filter(|l| !l.starts_with(' ')).filter_map(|l| l.split(':').next()).collect();
        let mut sorted = top.clone();
        sorted.sort_unstable();
        assert_eq!(top, sorted);
        assert_eq!(top.first(), Some(&"apiVersion"));
    }
}
