//! The fast path's devices: after the sync that creates the flowtable, and whenever the
//! node's matching interfaces change, the flowtable is made to hold them in a transaction of
//! its own (see [`crate::fast_path`]). Read against the kernel's flowtable, not the table: the
//! kernel unhooks a device that goes away by itself, without a notice.

use super::*;
use verdict_layout::render::FAST_PATH;

/// How soon a refused device change is tried again (a veth that vanished between the listing
/// and the commit: the watcher's next listing usually arrives first).
const RETRY: Duration = Duration::from_secs(1);

impl<K: Kernel> SyncLoop<K> {
    /// The interfaces the flowtable should hold, as the link watcher last listed them.
    pub(super) fn fast_path_devices_seen(&mut self, devices: std::collections::BTreeSet<String>) {
        if self.cfg.fast_path {
            self.fast_path.wanted = Some(devices);
            self.fast_path.due_at = Some(Instant::now());
        }
    }

    /// Joins and removes devices so that the flowtable holds the interfaces wanted; retried a
    /// second later when the kernel refuses.
    pub(super) fn sync_fast_path_devices(&mut self) {
        self.fast_path.due_at = None;
        let Some(wanted) = self.fast_path.wanted.clone() else { return };
        let flowtable = match self.nl.flowtables(&self.cfg.table) {
            Ok(all) => all.into_iter().find(|f| f.name == FAST_PATH),
            Err(e) => {
                tracing::warn!("reading the fast path's flowtable failed (trying again): {e}");
                self.fast_path.due_at = Some(Instant::now() + RETRY);
                return;
            }
        };
        // Not programmed yet: the sync that creates it makes this due again.
        let Some(flowtable) = flowtable else { return };
        let tx = Transaction::flowtable_devices(&self.cfg.table, &flowtable, &wanted);
        if tx.is_empty() {
            metrics::gauge!(m::FAST_PATH_DEVICES).set(flowtable.devices.len() as f64);
            return;
        }
        match self.commit(&tx) {
            Ok(_) => {
                metrics::gauge!(m::FAST_PATH_DEVICES).set(wanted.len() as f64);
                let (joined, removed) = flowtable.device_changes(&wanted);
                tracing::info!(?joined, ?removed, devices = wanted.len(), "fast path: flowtable devices updated");
            }
            Err(e) => {
                metrics::counter!(m::FAST_PATH_DEVICE_FAILURES).increment(1);
                tracing::info!("fast path: the kernel refused the flowtable's devices (trying again): {e}");
                self.fast_path.due_at = Some(Instant::now() + RETRY);
            }
        }
    }
}

/// What the loop knows of the fast path's devices.
#[derive(Debug, Default)]
pub(super) struct FastPathDevices {
    /// The interfaces the flowtable should hold (`None` until the watcher's first listing).
    pub wanted: Option<std::collections::BTreeSet<String>>,
    /// When the devices are to be synced next.
    pub due_at: Option<Instant>,
}
