//! The Kubernetes client, and the Events verdict publishes about objects it cannot program.

use crate::incluster::{InCluster, ServiceAccount};
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::path::Path;
use std::time::Duration;
use verdict_controller::sync::ProblemNotice;
use verdict_model::ObjectKind;

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
    let builder = kube::client::ClientBuilder::try_from(config).context("creating the Kubernetes client")?;
    // The bounds inside the rate limit: a request's time counts from when it is sent.
    Ok(builder
        .with_layer(&crate::api_bounds::BoundsLayer::new(timeout))
        .with_layer(&crate::api_rate::RateLimitLayer::new(qps, burst))
        .build())
}

/// The longest Event note the API server accepts, in bytes.
const MAX_NOTE: usize = 1000;

/// Cuts `note` to [`MAX_NOTE`] bytes on a character boundary (messages quote names and
/// annotations, which may hold any UTF-8; `String::truncate` panics inside a character).
fn truncate_note(mut note: String) -> String {
    note.truncate(note.floor_char_boundary(MAX_NOTE));
    note
}

/// Publishes a Warning Event on each object whose problems change (once per change).
pub async fn publish_events(client: kube::Client, node: String, mut rx: tokio::sync::mpsc::Receiver<ProblemNotice>) {
    let recorder = Recorder::new(client, Reporter { controller: "verdict".into(), instance: Some(node) });
    while let Some(notice) = rx.recv().await {
        let Some(first) = notice.problems.first() else { continue };
        let (api_version, kind) = match notice.object.kind {
            ObjectKind::Service => ("v1", "Service"),
            ObjectKind::EndpointSlice => ("discovery.k8s.io/v1", "EndpointSlice"),
            ObjectKind::Node => ("v1", "Node"),
            _ => continue,
        };
        let namespaced = notice.object.kind != ObjectKind::Node;
        let reference = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            namespace: namespaced.then(|| notice.object.namespace.clone()),
            name: Some(notice.object.name.clone()),
            ..ObjectReference::default()
        };
        let note: Vec<String> = notice.problems.iter().map(|p| p.message.clone()).collect();
        let note = truncate_note(note.join("; "));
        let event = Event {
            type_: EventType::Warning,
            reason: first.reason.to_string(),
            note: Some(note),
            action: "Programming".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!("could not publish an Event on {}: {e}", notice.object);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        // 999 ASCII bytes, then a 3-byte character across the 1000-byte limit.
        let note = format!("{}€ and more", "a".repeat(999));
        let cut = truncate_note(note);
        assert_eq!(cut, "a".repeat(999));
        // Multi-byte characters all the way: the cut is at most MAX_NOTE and whole.
        let cut = truncate_note("ü".repeat(800));
        assert_eq!(cut.len(), 1000);
        assert_eq!(cut, "ü".repeat(500));
        assert_eq!(truncate_note("short".into()), "short");
    }
}
