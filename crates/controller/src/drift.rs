//! Changes other programs make to verdict's table (`nft flush ruleset`, a firewall restart, an
//! operator's `nft delete chain`): noticed within moments and reconciled, not left until the
//! hourly full sync.
//!
//! ```text
//!  kernel ──nftables notices──> monitor thread ──Event::TableChanged──> SyncLoop (full sync)
//!     ^                                                                    │
//!     └──────────── commits, outside the monitor's group (MonitorGate) ────┘
//! ```

use crate::event::Event;
use std::sync::mpsc::SyncSender;
use verdict_nft::netlink::NetlinkError;
use verdict_nft::netlink::monitor::{MonitorGate, TableMonitor, TableNotice};

/// Starts watching `inet <table>` (in the calling thread's network namespace) on a thread of
/// its own, which sends [`Event::TableChanged`] for each foreign change. Hand the gate to
/// [`crate::sync::SyncLoop::with_monitor`], so verdict's own commits are not reported.
pub fn watch_table(table: &str, tx: SyncSender<Event>) -> Result<MonitorGate, NetlinkError> {
    let (mut monitor, gate) = TableMonitor::open(table)?;
    let spawned = std::thread::Builder::new().name("monitor".into()).spawn(move || {
        loop {
            let changed = match monitor.wait() {
                Ok(TableNotice::OtherTable) => {
                    if tx.send(Event::OtherTablesChanged).is_err() {
                        return;
                    }
                    continue;
                }
                Ok(TableNotice::Trace(changes)) => {
                    if tx.send(Event::TraceChains(changes)).is_err() {
                        return;
                    }
                    continue;
                }
                Ok(TableNotice::Changed { what, generation }) => {
                    Event::TableChanged { what: what.to_string(), generation: Some(generation) }
                }
                Ok(TableNotice::Overflow) => Event::TableChanged { what: "notices lost".into(), generation: None },
                Err(e) => {
                    tracing::warn!("watching the table for changes by other programs stopped: {e}");
                    let _ = tx.send(Event::MonitorStopped);
                    return;
                }
            };
            if tx.send(changed).is_err() {
                return;
            }
        }
    });
    spawned.map_err(NetlinkError::Io)?;
    Ok(gate)
}
