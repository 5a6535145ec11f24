//! The open-file limit. Container runtimes commonly start processes with a soft limit of
//! 1,024 under a far higher hard one; Go programs (kube-proxy among them) raise the soft limit
//! to the hard one at start, and so does the agent. Its HTTP listeners' connections are then
//! sized from what it got, leaving files for its own work (netlink and API sockets, manifests,
//! the state file), so that clients of the health ports cannot use up what the agent needs.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use std::sync::Arc;
use verdict_controller::http_serve::{Caps, Connections};

/// What is assumed when the limit cannot be read.
const USUAL_SOFT_LIMIT: u64 = 1024;

/// Raises the soft limit on open files to the hard limit, and says so; returns the soft limit
/// in effect.
pub fn raise_to_hard_limit() -> u64 {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!("could not read the open-file limit ({e}); assuming {USUAL_SOFT_LIMIT}");
            return USUAL_SOFT_LIMIT;
        }
    };
    if soft >= hard {
        tracing::info!(limit = soft, "open files: the soft limit is already the hard limit");
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::info!(was = soft, now = hard, "open files: soft limit raised to the hard limit");
            hard
        }
        Err(e) => {
            tracing::warn!(soft, hard, "open files: could not raise the soft limit to the hard limit: {e}");
            soft
        }
    }
}

/// The connection table every HTTP listener of the agent shares, sized from `open_files`.
pub fn connections(open_files: u64) -> Arc<Connections> {
    let caps = Caps::for_open_files(open_files);
    tracing::info!(
        open_files,
        at_once = caps.total,
        per_source = caps.per_source,
        kept_for_the_node = caps.own,
        "HTTP connections (metrics, health, health check ports) are bounded by the open-file limit"
    );
    Connections::new(caps)
}
