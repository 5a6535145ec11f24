//! A directory of manifests as a source: read at start, and again whenever a file in it
//! changes (polled), each read replayed as a relist so that removed objects go away.

use crate::event::{Event, Kind, Object};
use crate::manifests;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::time::{Duration, SystemTime};

/// What identifies the directory's content without reading it: names, sizes, times.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let meta = e.metadata().ok()?;
                    Some((e.path(), meta.len(), meta.modified().ok()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Sends one complete read of `dir` as a relist of every kind. Returns false when the
/// receiver is gone.
pub fn send_snapshot(dir: &Path, node_name: &str, tx: &SyncSender<Event>) -> Result<bool, manifests::ManifestError> {
    let m = manifests::load(dir)?;
    let mut events: Vec<Event> = Kind::ALL.iter().map(|k| Event::InitStart(*k)).collect();
    events.push(Event::SourceProblems(m.problems.clone()));
    events.extend(m.services.into_iter().map(|s| Event::Apply(Object::Service(s))));
    events.extend(m.slices.into_iter().map(|e| Event::Apply(Object::EndpointSlice(e))));
    events.push(Event::InitStart(Kind::ServiceCidr));
    events.extend(m.service_cidrs.into_iter().map(|c| Event::Apply(Object::ServiceCidr(c))));
    events.push(Event::InitDone(Kind::ServiceCidr));
    match m.nodes.into_iter().find(|n| n.name == node_name) {
        Some(n) => events.push(Event::Apply(Object::Node(n))),
        None => tracing::warn!(
            node = node_name,
            "no Node named {node_name:?} in the manifests: NodePorts need its InternalIP"
        ),
    }
    events.extend(Kind::ALL.iter().map(|k| Event::InitDone(*k)));
    Ok(events.into_iter().all(|ev| tx.send(ev).is_ok()))
}

/// Reads `dir` now and whenever it changes, until the receiver goes away.
pub fn watch_dir(
    dir: &Path,
    node_name: &str,
    every: Duration,
    tx: &SyncSender<Event>,
) -> Result<(), manifests::ManifestError> {
    let mut last = fingerprint(dir);
    if !send_snapshot(dir, node_name, tx)? {
        return Ok(());
    }
    loop {
        std::thread::sleep(every);
        let now = fingerprint(dir);
        if now != last {
            last = now;
            tracing::info!(dir = %dir.display(), "manifests changed; reloading");
            match send_snapshot(dir, node_name, tx) {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => tracing::error!("{e}"),
            }
        }
    }
}
