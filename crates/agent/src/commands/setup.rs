//! What `run` does before it proxies, as kube-proxy does: one line naming the mode verdict
//! replaces and one naming what it keeps of it, the conntrack sysctls (and `route_localnet`),
//! the agent's OOM score.

use crate::config::kept::LOCALHOST_GATE;
use crate::config::{Mode, RunConfig};
use crate::conntrack_sysctl::{self, ConntrackSettings, SysPaths};

/// One line for the mode, one for the behaviours kept from it, and one for each setting
/// accepted without effect.
pub fn announce(cfg: &RunConfig) {
    let s = &cfg.settings;
    match s.mode {
        Mode::Nftables => {}
        replaced => tracing::info!(
            "mode {:?}: verdict replaces kube-proxy's {} mode, with its {} settings (sync periods, masqueradeAll, masquerade bit)",
            s.mode_as_written,
            replaced.name(),
            match replaced {
                Mode::Ipvs => "ipvs and iptables",
                _ => "iptables",
            },
        ),
    }
    if let Some(line) = s.kept.announcement(s.mode) {
        tracing::info!("{line}");
    }
    if s.kept.localhost_from_keyword {
        tracing::info!(
            "localhost NodePorts on (nodePortAddresses names loopback): the node's own connections to 127.0.0.0/8 reach NodePorts; route_localnet is set and packets to 127.0.0.0/8 from the network are dropped"
        );
    }
    for (gate, on) in &s.feature_gates {
        if gate == LOCALHOST_GATE && s.mode == Mode::Nftables {
            // It decides whether `localhost` counts (a warning says so when it does not).
            continue;
        }
        tracing::warn!(
            "feature gate {gate}={on} has no effect: verdict has no feature gates, every Service behaviour it implements is on (docs/operations.md#compatibility-with-kube-proxy)"
        );
    }
    if !s.bind_address.is_unspecified() {
        tracing::warn!(
            bind_address = %s.bind_address,
            "bindAddress names a node IP: verdict takes the node's primary IPs from its Node object (its family still picks the servers' default addresses)"
        );
    }
    if s.profiling {
        tracing::warn!("enableProfiling has no effect: verdict has no /debug/pprof (use perf; docs/operations.md)");
    }
}

/// Writes the conntrack sysctls; returns how many could not be written (each logged).
pub fn conntrack(settings: &ConntrackSettings) -> usize {
    let paths = SysPaths { proc_sys: "/proc/sys".into(), sys: "/sys".into() };
    conntrack_sysctl::log_outcomes(&conntrack_sysctl::apply(settings, conntrack_sysctl::cpus(), &paths))
}

/// Sets the agent's oom_score_adj, as kube-proxy does (-999 by default: the node's proxy is
/// the last thing to kill).
pub fn oom_score_adj(value: i32) {
    match std::fs::write("/proc/self/oom_score_adj", value.to_string()) {
        Ok(()) => tracing::debug!(value, "oom_score_adj set"),
        Err(e) => tracing::warn!(value, "could not set oom_score_adj ({e}): lowering it needs CAP_SYS_RESOURCE"),
    }
}

/// The `--config` file as it was at start: kube-proxy exits when its file changes (a new
/// ConfigMap), so that its pod restarts with it; verdict does the same.
pub struct ConfigFileWatch {
    path: std::path::PathBuf,
    at_start: Option<Vec<u8>>,
    last_check: std::cell::Cell<std::time::Instant>,
}

/// How often the file is read again.
const CONFIG_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

impl ConfigFileWatch {
    /// Remembers the file's content now.
    pub fn new(path: std::path::PathBuf) -> ConfigFileWatch {
        let at_start = std::fs::read(&path).ok();
        ConfigFileWatch { path, at_start, last_check: std::cell::Cell::new(std::time::Instant::now()) }
    }

    /// Whether the content differs from the start's (read at most every 2 s). A ConfigMap
    /// volume swaps a symlink, so content, not the inode, is compared; a file that cannot be
    /// read for a moment is not a change.
    pub fn changed(&self) -> bool {
        if self.last_check.get().elapsed() < CONFIG_CHECK {
            return false;
        }
        self.last_check.set(std::time::Instant::now());
        match std::fs::read(&self.path) {
            Ok(now) => self.at_start.as_ref() != Some(&now),
            Err(_) => false,
        }
    }
}
