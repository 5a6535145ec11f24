//! In-cluster configuration, as kube-proxy falls back to it with neither a kubeconfig nor
//! `--master` (client-go's `rest.InClusterConfig`): the address from `KUBERNETES_SERVICE_HOST`
//! and `KUBERNETES_SERVICE_PORT` (the `kubernetes` Service's ClusterIP, which the kubelet puts
//! in every pod), the pod's service account token and CA. The service account also
//! authenticates verdict with `--master` alone.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Where the kubelet mounts the pod's service account.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// For tests only: another directory for the service account's `token` and `ca.crt` (a pod's
/// is always [`SERVICE_ACCOUNT_DIR`]; a test cannot write there without taking the host's).
pub const SERVICE_ACCOUNT_DIR_ENV: &str = "VERDICT_SERVICE_ACCOUNT_DIR";

/// client-go's `ErrNotInCluster`, word for word.
const NOT_IN_CLUSTER: &str =
    "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined";

/// A pod's service account: its token (read at each use, so that a rotated token is picked up)
/// and the cluster's CA.
#[derive(Clone, Debug)]
pub struct ServiceAccount {
    /// `token`.
    pub token_file: PathBuf,
    /// `ca.crt`.
    pub ca_file: PathBuf,
}

impl ServiceAccount {
    /// The service account's files, in `dir` (or where [`SERVICE_ACCOUNT_DIR_ENV`] says).
    pub fn at(dir: Option<&Path>) -> ServiceAccount {
        let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| {
            std::env::var_os(SERVICE_ACCOUNT_DIR_ENV).map_or_else(|| PathBuf::from(SERVICE_ACCOUNT_DIR), PathBuf::from)
        });
        ServiceAccount { token_file: dir.join("token"), ca_file: dir.join("ca.crt") }
    }

    /// Whether the token can be read (client-go fails without it).
    pub fn check_token(&self) -> Result<(), String> {
        std::fs::File::open(&self.token_file).map(drop).map_err(|e| {
            format!(
                "unable to load in-cluster configuration: the service account token {}: {e}",
                self.token_file.display()
            )
        })
    }

    /// A client configuration for `url` authenticated by this account. An unreadable CA is one
    /// warning and the system's roots, as client-go logs it and goes on.
    pub async fn kube_config(&self, url: &str) -> Result<kube::Config> {
        use kube::config::{
            AuthInfo, Cluster, Context as KubeContext, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
        };
        let ca = match std::fs::read(&self.ca_file) {
            Ok(_) => Some(self.ca_file.clone()),
            Err(e) => {
                tracing::warn!(
                    "the service account's CA {} cannot be read ({e}): the API server's certificate is checked against the system's roots",
                    self.ca_file.display()
                );
                None
            }
        };
        let name = "in-cluster".to_string();
        let kubeconfig = Kubeconfig {
            clusters: vec![NamedCluster {
                name: name.clone(),
                cluster: Some(Cluster {
                    server: Some(url.to_string()),
                    certificate_authority: ca.as_ref().map(|p| p.display().to_string()),
                    ..Cluster::default()
                }),
                ..NamedCluster::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: name.clone(),
                auth_info: Some(AuthInfo {
                    token_file: Some(self.token_file.display().to_string()),
                    ..AuthInfo::default()
                }),
                ..NamedAuthInfo::default()
            }],
            contexts: vec![NamedContext {
                name: name.clone(),
                context: Some(KubeContext {
                    cluster: name.clone(),
                    user: Some(name.clone()),
                    ..KubeContext::default()
                }),
                ..NamedContext::default()
            }],
            current_context: Some(name),
            ..Kubeconfig::default()
        };
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| {
                format!("the service account in {}", self.token_file.parent().unwrap_or(Path::new("")).display())
            })?;
        // Re-read when the cluster's CA rotates, as kube's own in-cluster configuration does.
        config.root_cert_file = ca;
        Ok(config)
    }
}

/// In-cluster configuration: where the API server is, and who verdict is.
#[derive(Clone, Debug)]
pub struct InCluster {
    /// `https://HOST:PORT`.
    pub url: String,
    /// The pod's service account.
    pub account: ServiceAccount,
}

impl InCluster {
    /// From the process's environment, as client-go reads it.
    pub fn from_env() -> Result<InCluster, String> {
        Self::from_lookup(|name| std::env::var(name).ok(), ServiceAccount::at(None))
    }

    /// From the variables `lookup` gives, with `account`'s files: one line when something is
    /// missing.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, account: ServiceAccount) -> Result<InCluster, String> {
        let (host, port) = match (lookup("KUBERNETES_SERVICE_HOST"), lookup("KUBERNETES_SERVICE_PORT")) {
            (Some(h), Some(p)) if !h.trim().is_empty() && !p.trim().is_empty() => {
                (h.trim().to_string(), p.trim().to_string())
            }
            (h, p) => {
                let missing: Vec<&str> = [("KUBERNETES_SERVICE_HOST", h), ("KUBERNETES_SERVICE_PORT", p)]
                    .into_iter()
                    .filter(|(_, v)| v.as_deref().is_none_or(|v| v.trim().is_empty()))
                    .map(|(name, _)| name)
                    .collect();
                return Err(format!("{NOT_IN_CLUSTER} ({} not set)", missing.join(" and ")));
            }
        };
        let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
            format!("unable to load in-cluster configuration: KUBERNETES_SERVICE_PORT {port:?} is not a port")
        })?;
        // net.JoinHostPort: an IPv6 address in brackets.
        let url = match host.contains(':') && !host.starts_with('[') {
            true => format!("https://[{host}]:{port}"),
            false => format!("https://{host}:{port}"),
        };
        if url.parse::<hyper::Uri>().map_or(true, |u| u.host().is_none()) {
            return Err(format!(
                "unable to load in-cluster configuration: KUBERNETES_SERVICE_HOST {host:?} is not a host"
            ));
        }
        account.check_token()?;
        Ok(InCluster { url, account })
    }

    /// The one warning `run` logs at start when it uses in-cluster configuration.
    pub fn warning(&self) -> String {
        format!(
            "no --kubeconfig and no --master: using in-cluster configuration as kube-proxy does, the API server at {}, \
             the `kubernetes` Service's ClusterIP; it answers only while some proxy's rules serve it (kube-proxy's during a switch, \
             verdict's own afterwards), so a node that starts with no proxy rules cannot reach the API server: set --master or a \
             kubeconfig to the API server's real address (docs/operations.md#the-api-servers-address)",
            self.url
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(tag: &str) -> (tempfile::TempDir, ServiceAccount) {
        let dir = tempfile::TempDir::with_prefix(format!("verdict-sa-{tag}-")).unwrap();
        std::fs::write(dir.path().join("token"), "t0ken").unwrap();
        let account = ServiceAccount::at(Some(dir.path()));
        (dir, account)
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_address_is_built_as_client_go_builds_it() {
        let (_dir, sa) = account("url");
        let cases = [
            ("10.96.0.1", "443", "https://10.96.0.1:443"),
            ("fd00:10:96::1", "443", "https://[fd00:10:96::1]:443"),
            ("kubernetes.default.svc", "6443", "https://kubernetes.default.svc:6443"),
        ];
        for (host, port, want) in cases {
            let vars = [("KUBERNETES_SERVICE_HOST", host), ("KUBERNETES_SERVICE_PORT", port)];
            let ic = InCluster::from_lookup(env(&vars), sa.clone()).unwrap();
            assert_eq!(ic.url, want);
            assert!(ic.url.parse::<hyper::Uri>().is_ok());
        }
    }

    #[test]
    fn what_is_missing_is_named_in_one_line() {
        let (_dir, sa) = account("missing");
        let err = InCluster::from_lookup(env(&[]), sa.clone()).unwrap_err();
        assert!(err.starts_with(NOT_IN_CLUSTER), "{err}");
        assert!(err.contains("(KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set)"), "{err}");
        let err = InCluster::from_lookup(env(&[("KUBERNETES_SERVICE_HOST", "10.96.0.1")]), sa.clone()).unwrap_err();
        assert!(err.ends_with("(KUBERNETES_SERVICE_PORT not set)"), "{err}");
        let vars = [("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("KUBERNETES_SERVICE_PORT", "https")];
        let err = InCluster::from_lookup(env(&vars), sa).unwrap_err();
        assert!(err.contains("KUBERNETES_SERVICE_PORT \"https\" is not a port"), "{err}");
        let nowhere = ServiceAccount::at(Some(Path::new("/nonexistent/serviceaccount")));
        let vars = [("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("KUBERNETES_SERVICE_PORT", "443")];
        let err = InCluster::from_lookup(env(&vars), nowhere).unwrap_err();
        assert!(err.contains("/nonexistent/serviceaccount/token"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }

    #[test]
    fn the_client_uses_the_token_file_and_the_ca() {
        let (dir, sa) = account("client");
        std::fs::write(dir.path().join("ca.crt"), verdict_testapi::TestApiServer::TLS_CA_PEM).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let config = rt.block_on(sa.kube_config("https://10.96.0.1:443")).unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://10.96.0.1:443/");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1), "the CA is trusted");
        assert_eq!(config.root_cert_file.as_deref(), Some(dir.path().join("ca.crt").as_path()));
        assert_eq!(config.auth_info.token_file.as_deref(), Some(dir.path().join("token").to_str().unwrap()));
        // No CA: the system's roots (a warning), not a failure.
        std::fs::remove_file(dir.path().join("ca.crt")).unwrap();
        let config = rt.block_on(sa.kube_config("https://10.96.0.1:443")).unwrap();
        assert!(config.root_cert.is_none() && config.root_cert_file.is_none());
    }
}
