//! The Kubernetes client (the Events verdict publishes are in `crate::events`).

use crate::incluster::{InCluster, ServiceAccount};
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;

/// A client from a kubeconfig, or the pod's service account with `--master`, or in-cluster
/// configuration with neither (as kube-proxy falls back to it; `config` checked it and warned);
/// `master` overrides the server; requests are limited to `qps` after a burst of `burst`, as
/// client-go's are, and bounded by `timeout` and client-go's frame limit (see
/// [`crate::api_bounds`]).
pub async fn client(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
    qps: f64,
    burst: u32,
    timeout: Duration,
) -> Result<kube::Client> {
    let mut config = match (kubeconfig, master) {
        (Some(path), _) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        // The pod's service account authenticates at the real address `--master` names.
        (None, Some(m)) => {
            let account = ServiceAccount::at(None);
            match account.check_token() {
                Ok(()) => account.kube_config(m).await?,
                Err(e) => {
                    tracing::info!("no service account ({e}): talking to {m} without credentials");
                    kube::Config::new(m.parse().with_context(|| format!("--master {m:?}"))?)
                }
            }
        }
        (None, None) => {
            let in_cluster = InCluster::from_env().map_err(anyhow::Error::msg)?;
            tracing::info!(server = in_cluster.url, "in-cluster configuration");
            in_cluster.account.kube_config(&in_cluster.url).await?
        }
    };
    if let Some(m) = master {
        config.cluster_url = m.parse().with_context(|| format!("--master {m:?}"))?;
    }
    let metered = crate::rest_metrics::RestMetricsLayer::new(&config.cluster_url);
    let builder = kube::client::ClientBuilder::try_from(config).context("creating the Kubernetes client")?;
    // The bounds inside the rate limit: a request's time counts from when it is sent.
    Ok(builder
        .with_layer(&crate::api_bounds::BoundsLayer::new(timeout))
        .with_layer(&crate::api_rate::RateLimitLayer::new(qps, burst))
        .with_layer(&metered)
        .build())
}
