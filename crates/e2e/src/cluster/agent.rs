//! One node's `verdict run` daemon, started in the node's namespace as kubeadm's DaemonSet
//! runs kube-proxy: the binary invoked as `kube-proxy`, kubeadm's command line, its ConfigMap
//! at `/var/lib/kube-proxy` and the state directory at `/run/verdict`.

use super::utf8;
use crate::agent_process::{AgentLaunch, AgentProcess};
use crate::netns::Netns;
use anyhow::Result;
use std::path::Path;

/// Mounts a node's volumes where kubeadm's DaemonSet mounts them, then runs the command after
/// the two directories. Each agent gets a mount namespace of its own (`unshare --mount`,
/// private propagation: the host sees none of these mounts), so two nodes on one host read
/// each their own `/var/lib/kube-proxy` and `/run/verdict`, as two real nodes would. The
/// paths are tmpfs'd first because they need not exist on the host, and the test must not
/// create them there. `exec` keeps the agent's PID that of the child the test signals.
const MOUNT_VOLUMES: &str = "set -e; \
    mount -t tmpfs verdict-e2e /var/lib && mkdir /var/lib/kube-proxy && mount --bind \"$1\" /var/lib/kube-proxy; \
    mount -t tmpfs verdict-e2e /run && mkdir /run/verdict && mount --bind \"$2\" /run/verdict; \
    shift 2; exec \"$@\"";

/// Starts `kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=NODE`
/// (kubeadm's command line) in `ns`, with `config_map` (config.conf, kubeconfig.conf)
/// mounted at `/var/lib/kube-proxy` and `state` at `/run/verdict`, its log appended to `log`.
/// `kube_proxy` is a symlink named `kube-proxy` to the verdict binary: that name is what
/// makes it `run`.
pub(super) fn start(
    ns: &Netns,
    node: &str,
    kube_proxy: &Path,
    volumes: (&Path, &Path),
    log: &Path,
) -> Result<AgentProcess> {
    let wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNT_VOLUMES, "sh"];
    AgentLaunch::new(ns, kube_proxy, "e2e-agent")?
        .wrapped_in(wrapper.into_iter().chain([utf8(volumes.0)?, utf8(volumes.1)?]))
        .args(["--config=/var/lib/kube-proxy/config.conf", &format!("--hostname-override={node}")])
        .log_file(log)
        .spawn()
}
