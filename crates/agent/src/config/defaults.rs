//! Upstream's defaulting of a v1alpha1 configuration (`pkg/proxy/apis/config/v1alpha1/
//! defaults.go`): a zero or absent value means the default, which is why kubeadm can write
//! every field with its zero value. Applied to the file, or to an empty configuration before
//! kube-proxy's flags are laid over it (so that a flag's zero, unlike the file's, is kept).

use super::file::{
    ClientConnection, ConntrackSection, IptablesSection, IpvsSection, KubeProxyConfiguration, Logging, NftablesSection,
};
use serde_norway::Value;
use std::net::IpAddr;

/// kube-proxy's health port (`ports.ProxyHealthzPort`).
pub const HEALTHZ_PORT: u16 = 10256;
/// kube-proxy's metrics port (`ports.ProxyStatusPort`).
pub const METRICS_PORT: u16 = 10249;

fn unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(|v| v.trim().is_empty())
}

/// A duration that is absent, empty or zero.
fn zero_duration(s: &Option<String>) -> bool {
    unset(s) || s.as_deref().and_then(super::parse_duration).is_some_and(|d| d.is_zero())
}

fn default_duration(field: &mut Option<String>, default: &str) {
    if zero_duration(field) {
        *field = Some(default.into());
    }
}

/// `host:port` with the port added when `addr` has none (`AppendPortIfNeeded`).
pub fn with_port(addr: &str, port: u16) -> String {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return addr.to_string();
    }
    match addr.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        Ok(ip @ IpAddr::V6(_)) => format!("[{ip}]:{port}"),
        Ok(ip) => format!("{ip}:{port}"),
        Err(_) => addr.to_string(),
    }
}

/// Fills zero values with upstream's defaults.
pub fn apply(c: &mut KubeProxyConfiguration) {
    if unset(&c.bind_address) {
        c.bind_address = Some("0.0.0.0".into());
    }
    // The servers' default addresses follow the family of bindAddress.
    let ipv4 = c.bind_address.as_deref().and_then(|a| a.trim().parse::<IpAddr>().ok()).is_none_or(|ip| ip.is_ipv4());
    let (healthz_host, metrics_host) = if ipv4 { ("0.0.0.0", "127.0.0.1") } else { ("[::]", "[::1]") };
    for (field, host, port) in [
        (&mut c.healthz_bind_address, healthz_host, HEALTHZ_PORT),
        (&mut c.metrics_bind_address, metrics_host, METRICS_PORT),
    ] {
        *field = Some(match field.as_deref().map(str::trim) {
            None | Some("") => format!("{host}:{port}"),
            Some(addr) => with_port(addr, port),
        });
    }
    c.oom_score_adj.get_or_insert(-999);
    let ipt = c.iptables.get_or_insert_with(IptablesSection::default);
    default_duration(&mut ipt.sync_period, "30s");
    default_duration(&mut ipt.min_sync_period, "1s");
    ipt.masquerade_bit.get_or_insert(14);
    ipt.localhost_node_ports.get_or_insert(true);
    ipt.masquerade_all.get_or_insert(false);
    let ipvs = c.ipvs.get_or_insert_with(IpvsSection::default);
    default_duration(&mut ipvs.sync_period, "30s");
    let nft = c.nftables.get_or_insert_with(NftablesSection::default);
    default_duration(&mut nft.sync_period, "30s");
    default_duration(&mut nft.min_sync_period, "1s");
    nft.masquerade_bit.get_or_insert(14);
    nft.masquerade_all.get_or_insert(false);
    let ct = c.conntrack.get_or_insert_with(ConntrackSection::default);
    // Pointers upstream: absent (kubeadm's `null`) is the default, an explicit 0 means "leave
    // the kernel's value alone".
    ct.max_per_core.get_or_insert(32 * 1024);
    ct.min.get_or_insert(128 * 1024);
    ct.tcp_established_timeout.get_or_insert_with(|| "24h0m0s".into());
    ct.tcp_close_wait_timeout.get_or_insert_with(|| "1h0m0s".into());
    default_duration(&mut c.config_sync_period, "15m0s");
    let cc = c.client_connection.get_or_insert_with(ClientConnection::default);
    if unset(&cc.content_type) {
        cc.content_type = Some("application/vnd.kubernetes.protobuf".into());
    }
    if cc.qps.is_none_or(|q| q == 0.0) {
        cc.qps = Some(5.0);
    }
    if cc.burst.is_none_or(|b| b == 0) {
        cc.burst = Some(10);
    }
    c.feature_gates.get_or_insert_default();
    // component-base's SetRecommendedLoggingConfiguration.
    let log = c.logging.get_or_insert_with(Logging::default);
    if unset(&log.format) {
        log.format = Some("text".into());
    }
    let no_flush = match &log.flush_frequency {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.trim() == "0" || zero_duration(&Some(s.clone())),
        Some(_) => false,
    };
    if no_flush {
        log.flush_frequency = Some(Value::from("5s"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_become_upstream_defaults() {
        let mut c = KubeProxyConfiguration::parse(
            "healthzBindAddress: \"\"\nmetricsBindAddress: \"\"\nconfigSyncPeriod: 0s\n\
             nftables: {syncPeriod: 0s, minSyncPeriod: 0s, masqueradeBit: null}\n\
             conntrack: {maxPerCore: null, min: null, tcpEstablishedTimeout: null, tcpCloseWaitTimeout: null}\n",
        )
        .unwrap()
        .config;
        apply(&mut c);
        assert_eq!(c.healthz_bind_address.as_deref(), Some("0.0.0.0:10256"));
        assert_eq!(c.metrics_bind_address.as_deref(), Some("127.0.0.1:10249"));
        assert_eq!(c.config_sync_period.as_deref(), Some("15m0s"));
        let nft = c.nftables.as_ref().unwrap();
        assert_eq!((nft.sync_period.as_deref(), nft.min_sync_period.as_deref()), (Some("30s"), Some("1s")));
        assert_eq!(nft.masquerade_bit, Some(14));
        let ct = c.conntrack.as_ref().unwrap();
        assert_eq!((ct.max_per_core, ct.min), (Some(32768), Some(131072)));
        assert_eq!(ct.tcp_established_timeout.as_deref(), Some("24h0m0s"));
        assert_eq!(c.oom_score_adj, Some(-999));
        let log = c.logging.as_ref().unwrap();
        assert_eq!((log.format.as_deref(), log.flush_frequency.as_ref()), (Some("text"), Some(&Value::from("5s"))));
    }

    #[test]
    fn explicit_zero_conntrack_values_are_kept() {
        let mut c =
            KubeProxyConfiguration::parse("conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s}\n").unwrap().config;
        apply(&mut c);
        let ct = c.conntrack.as_ref().unwrap();
        assert_eq!(ct.max_per_core, Some(0));
        assert_eq!(ct.tcp_established_timeout.as_deref(), Some("0s"));
    }

    #[test]
    fn an_ipv6_bind_address_makes_the_servers_ipv6() {
        let mut c = KubeProxyConfiguration::parse("bindAddress: \"::\"\nhealthzBindAddress: \"::1\"\n").unwrap().config;
        apply(&mut c);
        assert_eq!(c.healthz_bind_address.as_deref(), Some("[::1]:10256"));
        assert_eq!(c.metrics_bind_address.as_deref(), Some("[::1]:10249"));
        let mut c = KubeProxyConfiguration::parse("bindAddress: \"fd00::5\"\n").unwrap().config;
        apply(&mut c);
        assert_eq!(c.healthz_bind_address.as_deref(), Some("[::]:10256"));
    }
}
