//! The API server's address, which no Service may capture: an externalIP or load balancer IP
//! equal to it would DNAT the node's own connections to the API server (the agent's, the
//! kubelet's) to a tenant's pod, the CVE-2020-8554 class. The model refuses such addresses
//! ([`verdict_model::ProxyConfig::reserved_addresses`]); this module finds them at start,
//! where the client connects: `--master`, or the kubeconfig's current context's server, or
//! in-cluster `KUBERNETES_SERVICE_HOST`. A host name is resolved once, at start: an address it
//! resolves to later is not refused (docs/operations.md, "Shared clusters").

use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;

/// The URL the client connects to, chosen as `crate::kube::client` chooses it: `--master`
/// over the kubeconfig's server; with neither, in-cluster configuration (`env` reads the
/// process's environment).
pub fn server_url(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    if let Some(m) = master.map(str::trim).filter(|m| !m.is_empty()) {
        return Some(m.to_string());
    }
    if let Some(path) = kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path).ok()?;
        let context = kc.current_context.as_deref()?;
        let cluster = kc.contexts.iter().find(|c| c.name == context)?.context.as_ref()?.cluster.clone();
        return kc.clusters.iter().find(|c| c.name == cluster)?.cluster.as_ref()?.server.clone();
    }
    let host = env("KUBERNETES_SERVICE_HOST")?;
    let port = env("KUBERNETES_SERVICE_PORT")?;
    let host = host.trim();
    Some(match host.contains(':') && !host.starts_with('[') {
        true => format!("https://[{host}]:{}", port.trim()),
        false => format!("https://{host}:{}", port.trim()),
    })
}

/// The host and port of a server URL (the scheme's port when none is written).
pub fn host_and_port(url: &str) -> Option<(String, u16)> {
    let uri: hyper::Uri = url.trim().parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    Some((host, port))
}

/// The addresses `host` stands for: itself when it is an address, otherwise what the
/// resolver says now.
pub fn resolve(host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip.to_canonical()]);
    }
    let found = (host, port).to_socket_addrs().map_err(|e| e.to_string())?;
    let mut ips: Vec<IpAddr> = found.map(|a| a.ip().to_canonical()).collect();
    ips.sort();
    ips.dedup();
    Ok(ips)
}

/// The addresses to reserve for the API server, logged; none (with a warning) when they
/// cannot be found.
pub fn reserved(kubeconfig: Option<&Path>, master: Option<&str>) -> Vec<IpAddr> {
    let Some(url) = server_url(kubeconfig, master, |name| std::env::var(name).ok()) else {
        tracing::warn!("the API server's address is unknown: no Service address is refused as the API server's");
        return Vec::new();
    };
    let Some((host, port)) = host_and_port(&url) else {
        tracing::warn!(url, "the API server's URL names no host: no Service address is refused as the API server's");
        return Vec::new();
    };
    match resolve(&host, port) {
        Ok(ips) => {
            let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
            tracing::info!(
                url,
                addresses = list.join(","),
                "no externalIP or load balancer IP may be the API server's address (resolved once, at start)"
            );
            ips
        }
        Err(e) => {
            tracing::warn!(
                url,
                "the API server's host {host:?} does not resolve now ({e}): no Service address is refused as the API \
                 server's until the agent restarts"
            );
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_url_is_chosen_as_the_client_chooses_it() {
        let dir = tempfile::TempDir::with_prefix("verdict-apiaddr-").unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
             clusters:\n- name: one\n  cluster: {server: 'https://192.0.2.1:6443'}\n- name: two\n  cluster: {server: 'https://[2001:db8::2]:6443'}\n\
             contexts:\n- name: a\n  context: {cluster: one}\n- name: b\n  context: {cluster: two}\n",
        )
        .unwrap();
        assert_eq!(server_url(Some(&path), None, no_env).as_deref(), Some("https://[2001:db8::2]:6443"));
        let master = Some("https://192.0.2.9:443");
        assert_eq!(server_url(Some(&path), master, no_env).as_deref(), master, "--master wins");
        let env = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("fd00:10:96::1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        assert_eq!(server_url(None, None, env).as_deref(), Some("https://[fd00:10:96::1]:443"));
        assert_eq!(server_url(None, None, no_env), None);
    }

    #[test]
    fn hosts_and_ports_are_read_as_a_client_reads_them() {
        assert_eq!(host_and_port("https://192.0.2.1:6443"), Some(("192.0.2.1".into(), 6443)));
        assert_eq!(host_and_port("https://[2001:db8::2]"), Some(("2001:db8::2".into(), 443)));
        assert_eq!(host_and_port("http://api.example"), Some(("api.example".into(), 80)));
        assert_eq!(resolve("2001:db8::2", 443).unwrap(), ["2001:db8::2".parse::<IpAddr>().unwrap()]);
        assert_eq!(resolve("::ffff:192.0.2.1", 443).unwrap(), ["192.0.2.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(resolve("localhost", 443).unwrap().first().map(IpAddr::is_loopback), Some(true));
        assert!(resolve("no-such-host.invalid", 443).is_err());
    }
}
