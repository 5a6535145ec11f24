//! A directory of manifests as a source: read at start, and again whenever a file in it
//! changes (polled), each read replayed as a relist so that removed objects go away; a file
//! that cannot be read whole keeps its last good version.

use crate::event::{Event, Kind, Object};
use crate::manifests::{self, Manifests};
use std::collections::HashMap;
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

/// The last read of each file that was read whole: a file that is half-written or broken on
/// a later read stands in with these objects (and a problem saying so), so that a ConfigMap
/// being rewritten or a bad edit does not delete its Services and flush their UDP flows.
#[derive(Default)]
pub struct LastGood(HashMap<PathBuf, Manifests>);

impl LastGood {
    /// Reads `dir`, each file whole or its last good read in its place.
    pub fn read(&mut self, dir: &Path) -> Result<Manifests, manifests::ManifestError> {
        let files = manifests::files(dir)?;
        self.0.retain(|path, _| files.contains(path));
        let mut out = Manifests::default();
        for file in &files {
            let mut read = Manifests::default();
            if manifests::load_file(&mut read, file) {
                self.0.insert(file.clone(), read.clone());
                out.extend(read);
                continue;
            }
            match self.0.get(file) {
                Some(good) => {
                    let why = read.problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("; ");
                    let mut kept = good.clone();
                    kept.problems.push(manifests::manifest_problem(
                        &file.display().to_string(),
                        None,
                        format!("cannot be read whole ({why}): its last good version is kept"),
                    ));
                    out.extend(kept);
                }
                None => out.extend(read),
            }
        }
        out.files = files;
        Ok(out)
    }
}

/// Sends one complete read of a directory as a relist of every kind. Returns false when the
/// receiver is gone.
fn send_read(m: Manifests, node_name: &str, tx: &SyncSender<Event>) -> Result<bool, manifests::ManifestError> {
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
    let mut good = LastGood::default();
    if !send_read(good.read(dir)?, node_name, tx)? {
        return Ok(());
    }
    loop {
        std::thread::sleep(every);
        let now = fingerprint(dir);
        if now != last {
            last = now;
            tracing::info!(dir = %dir.display(), "manifests changed; reloading");
            match good.read(dir).and_then(|m| send_read(m, node_name, tx)) {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => tracing::error!("{e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\n\
                       spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}\n";

    #[test]
    fn a_file_that_cannot_be_read_whole_keeps_its_last_good_version() {
        let dir = std::env::temp_dir().join(format!("verdict-lastgood-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("web.yaml");
        let mut good = LastGood::default();
        std::fs::write(&file, SVC).unwrap();
        let first = good.read(&dir).unwrap();
        // Half-written: the Service document is cut in the middle of a flow mapping.
        std::fs::write(&file, &SVC[..SVC.len() - 20]).unwrap();
        let half = good.read(&dir).unwrap();
        // A new file that is broken from the start has nothing to keep.
        std::fs::write(dir.join("new.yaml"), "kind: [\n").unwrap();
        let with_new = good.read(&dir).unwrap();
        // Fixed, with a change: the new version is read.
        std::fs::write(&file, SVC.replace("10.96.0.10", "10.96.0.11")).unwrap();
        let fixed = good.read(&dir).unwrap();
        // Deleted: it goes, its last good version with it.
        std::fs::remove_file(&file).unwrap();
        let gone = good.read(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let ips = |m: &Manifests| m.services.iter().map(|s| format!("{:?}", s.cluster_ips)).collect::<Vec<_>>();
        assert_eq!(first.services.len(), 1);
        assert_eq!(ips(&half), ips(&first), "the half-written file keeps its Service");
        assert!(
            half.problems.iter().any(|p| p.message.contains("its last good version is kept")),
            "{:?}",
            half.problems
        );
        assert_eq!(ips(&with_new), ips(&first));
        assert!(with_new.problems.iter().any(|p| p.message.starts_with("not valid YAML")), "{:?}", with_new.problems);
        assert_eq!(fixed.services.len(), 1);
        assert_ne!(ips(&fixed), ips(&first), "the fixed file's new version is read");
        assert!(gone.services.is_empty(), "a deleted file's Services go");
    }
}
