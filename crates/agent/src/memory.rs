//! The agent's heap, as jemalloc accounts it: exported on `/metrics` and logged after each
//! full sync, so that an operator can tell memory the agent holds from memory the allocator
//! has not handed back yet.

use verdict_controller::sync::AfterSync;
use verdict_model::{PortChange, ProxyModel};

/// Bytes the agent has allocated and live.
pub const ALLOCATED: &str = "verdict_heap_allocated_bytes";
/// Bytes of physical memory the allocator holds (live, cached and not yet returned).
pub const RESIDENT: &str = "verdict_heap_resident_bytes";

/// Describes the metrics.
pub fn describe() {
    metrics::describe_gauge!(
        ALLOCATED,
        metrics::Unit::Bytes,
        "Heap bytes allocated by the agent (jemalloc stats.allocated)."
    );
    metrics::describe_gauge!(
        RESIDENT,
        metrics::Unit::Bytes,
        "Physical memory held by the agent's allocator, including freed memory not yet returned (jemalloc stats.resident)."
    );
}

/// Lets jemalloc return freed memory to the kernel from a background thread. Without it
/// pages are returned only while the agent allocates, and an idle agent kept the hundreds of
/// MiB its cold start freed (at 100k Services: 465 MiB allocated, 751 MiB resident). Started
/// here rather than by `malloc_conf` at the first allocation: `verdict run` first drops its
/// capabilities, which belong to each thread, and this thread must not keep them.
pub fn return_freed_memory() {
    #[cfg(feature = "jemalloc")]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::debug!("jemalloc background thread not started: {e}");
    }
}

/// Returns the memory freed so far to the kernel now, instead of over the next second: the
/// sync loop calls it before it needs much memory again (see
/// `SyncLoop::with_memory_release`). Setting an arena's decay time purges what it holds
/// under the new time; zero purges everything, and the configured time is then restored.
pub fn release_freed_memory() {
    #[cfg(feature = "jemalloc")]
    {
        use tikv_jemalloc_ctl::{Access, AsName};
        let decay = b"arena.0.dirty_decay_ms\0".name();
        let restored = decay.read().and_then(|ms: isize| decay.write(0isize).map(|()| ms));
        match restored {
            Ok(ms) => {
                if let Err(e) = decay.write(ms) {
                    tracing::debug!("jemalloc decay time not restored: {e}");
                }
            }
            Err(e) => tracing::debug!("freed memory not returned: {e}"),
        }
    }
}

/// (allocated, resident) bytes now; `None` without jemalloc.
#[cfg(feature = "jemalloc")]
pub fn read() -> Option<(usize, usize)> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    Some((tikv_jemalloc_ctl::stats::allocated::read().ok()?, tikv_jemalloc_ctl::stats::resident::read().ok()?))
}

/// (allocated, resident) bytes now; `None` without jemalloc.
#[cfg(not(feature = "jemalloc"))]
pub fn read() -> Option<(usize, usize)> {
    None
}

/// Updates the gauges after every sync; logs after full ones.
pub struct MemoryStats;

impl AfterSync for MemoryStats {
    fn after_sync(&mut self, _model: &ProxyModel, full: bool, _changes: &[PortChange]) {
        let Some((allocated, resident)) = read() else { return };
        metrics::gauge!(ALLOCATED).set(allocated as f64);
        metrics::gauge!(RESIDENT).set(resident as f64);
        if full {
            tracing::info!(allocated_mib = allocated >> 20, resident_mib = resident >> 20, "heap after the full sync");
        }
    }
}
