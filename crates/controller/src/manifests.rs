//! A directory of YAML manifests as a source of Services, EndpointSlices and Nodes: the offline
//! stand-in for an API server (`verdict render`, `verdict run --manifests`, the demo).
//!
//! Files ending in `.yaml`, `.yml` or `.json` are read in name order; a file may hold several
//! documents, and a document may be a `List`. Objects of other kinds are ignored. A document
//! that does not parse is reported with its file and position, and the rest is still read.

pub use crate::manifest_objects::Manifests;
use crate::manifest_objects::add_object;
pub(crate) use crate::manifest_objects::manifest_problem;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Why a manifest directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The directory itself is unreadable.
    #[error("cannot read manifest directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The manifest files of `dir` (not recursively), in name order.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ManifestError::Dir { path: dir.to_path_buf(), source })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads one manifest file into `out`; returns whether the file was read whole: false when
/// it could not be read or stops at a syntax error (a file half-written, or broken), so that
/// the objects after that point are missing, not deleted.
pub fn load_file(out: &mut Manifests, file: &Path) -> bool {
    let origin = file.display().to_string();
    let before = out.problems.len();
    match std::fs::read_to_string(file) {
        Ok(text) if file.extension().is_some_and(|e| e == "json") => {
            crate::manifests_json::parse_into(out, &origin, &text)
        }
        Ok(text) => parse_into(out, &origin, &text),
        Err(e) => out.problems.push(manifest_problem(&origin, None, format!("cannot read: {e}"))),
    }
    !out.problems[before..]
        .iter()
        .any(|p| ["cannot read: ", "not valid YAML: ", "not valid JSON: "].iter().any(|m| p.message.starts_with(m)))
}

/// Reads every manifest file in `dir` (not recursively).
pub fn load(dir: &Path) -> Result<Manifests, ManifestError> {
    let files = files(dir)?;
    let mut out = Manifests::default();
    for file in &files {
        load_file(&mut out, file);
    }
    out.files = files;
    Ok(out)
}

/// Parses the documents of one file's text (`origin` names it in problems).
///
/// Documents are read by [`crate::manifests_yaml`] where they are in its subset and by
/// serde_norway where not; the result is always [`parse_into_with_serde_norway`]'s. A document
/// serde_norway cannot read, or a split into documents that might not be libyaml's, sends the
/// whole file to serde_norway again, so syntax errors are reported (and end the file) as they were.
pub fn parse_into(out: &mut Manifests, origin: &str, text: &str) {
    parse_into_split(out, origin, text, PARALLEL_DOCUMENTS)
}

/// [`parse_into`], on two threads from `parallel_from` documents on.
pub(crate) fn parse_into_split(out: &mut Manifests, origin: &str, text: &str, parallel_from: usize) {
    let before = Lengths::of(out);
    let read =
        crate::manifests_yaml::split(text).is_some_and(|docs| parse_halves(out, origin, text, &docs, parallel_from));
    if !read {
        before.truncate(out);
        parse_into_with_serde_norway(out, origin, text);
    }
}

/// Above this many documents in a file, two threads read half of them each: an offline run
/// of 100k Services waits for its manifests, and the second core is idle then.
const PARALLEL_DOCUMENTS: usize = 20_000;

/// [`parse_documents`] of the whole file, on two threads from `parallel_from` documents on.
fn parse_halves(
    out: &mut Manifests,
    origin: &str,
    text: &str,
    docs: &[crate::manifests_yaml::Span],
    parallel_from: usize,
) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if docs.len() < parallel_from.max(2) || cores < 2 {
        return parse_documents(out, origin, text, docs, 0);
    }
    let (first, second) = docs.split_at(docs.len() / 2);
    let mut later = Manifests::default();
    let (read_first, read_second) = std::thread::scope(|s| {
        let other = s.spawn(|| parse_documents(&mut later, origin, text, second, first.len()));
        let mine = parse_documents(out, origin, text, first, 0);
        (mine, other.join().unwrap_or(false))
    });
    out.services.append(&mut later.services);
    out.slices.append(&mut later.slices);
    out.nodes.append(&mut later.nodes);
    out.service_cidrs.append(&mut later.service_cidrs);
    out.problems.append(&mut later.problems);
    read_first && read_second
}

/// Reads each document fast or, failing that, alone with serde_norway; false if the file must be
/// read by serde_norway whole. `first` is the number of the first document in the file.
fn parse_documents(
    out: &mut Manifests,
    origin: &str,
    text: &str,
    docs: &[crate::manifests_yaml::Span],
    first: usize,
) -> bool {
    for (i, span) in docs.iter().enumerate().map(|(i, span)| (first + i, span)) {
        let value = match span.body.clone().and_then(|body| crate::manifests_yaml::read(&text[body])) {
            Some(value) => value,
            None => {
                let mut stream = serde_norway::Deserializer::from_str(&text[span.whole.clone()]);
                let Some(Ok(value)) = stream.next().map(serde_norway::Value::deserialize) else { return false };
                if stream.next().is_some() {
                    return false;
                }
                value
            }
        };
        // Not `is_null`: that also takes a tagged null (`!`), which serde_norway's path reads as
        // a document.
        if value != serde_norway::Value::Null {
            add_object(out, origin, i, value);
        }
    }
    true
}

/// How much a Manifests held before a file, to take the file's part back out.
struct Lengths([usize; 5]);

impl Lengths {
    fn of(m: &Manifests) -> Self {
        Lengths([m.services.len(), m.slices.len(), m.nodes.len(), m.service_cidrs.len(), m.problems.len()])
    }

    fn truncate(&self, m: &mut Manifests) {
        let [services, slices, nodes, cidrs, problems] = self.0;
        m.services.truncate(services);
        m.slices.truncate(slices);
        m.nodes.truncate(nodes);
        m.service_cidrs.truncate(cidrs);
        m.problems.truncate(problems);
    }
}

/// Parses the documents of one file's text with serde_norway alone: the reference
/// [`parse_into`] must equal (public for the tests that check it).
pub fn parse_into_with_serde_norway(out: &mut Manifests, origin: &str, text: &str) {
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        match serde_norway::Value::deserialize(doc) {
            Ok(serde_norway::Value::Null) => {}
            Ok(value) => add_object(out, origin, i, value),
            Err(e) => {
                out.problems.push(manifest_problem(origin, Some(i), format!("not valid YAML: {e}")));
                // The YAML stream cannot be resynchronised after a syntax error.
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_services_slices_and_nodes_from_multi_document_yaml() {
        let text = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.10]
  conditions: {ready: true}
  nodeName: node1
  hints: {forZones: [{name: zone-a}]}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node1, labels: {topology.kubernetes.io/zone: zone-a}}
  status: {addresses: [{type: InternalIP, address: 192.168.0.2}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ignored}
"#;
        let mut m = Manifests::default();
        parse_into(&mut m, "x.yaml", text);
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        assert_eq!(m.services.len(), 1);
        assert_eq!(m.services[0].cluster_ips, ["10.96.0.10"]);
        assert_eq!(m.services[0].ports[0].name, "http");
        assert_eq!(m.slices[0].service_name, "web");
        assert_eq!(m.slices[0].endpoints[0].zone_hints.as_deref(), Some(&["zone-a".to_string()][..]));
        assert_eq!(m.node("node1").unwrap().addresses, [("InternalIP".to_string(), "192.168.0.2".to_string())]);
    }

    #[test]
    fn slices_labelled_for_another_proxy_or_headless_are_left_out_as_the_watch_leaves_them() {
        let slice = |name: &str, labels: &str| {
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
                 metadata: {{name: {name}, namespace: shop, labels: {{kubernetes.io/service-name: web{labels}}}}}\n\
                 addressType: IPv4\nendpoints: [{{addresses: [10.244.1.10]}}]\n"
            )
        };
        let text = [
            slice("plain", ""),
            slice("headless", ", service.kubernetes.io/headless: ''"),
            slice("other-proxy", ", service.kubernetes.io/service-proxy-name: other"),
        ]
        .join("---\n");
        for json in [false, true] {
            let mut m = Manifests::default();
            if json {
                let docs: Vec<serde_json::Value> =
                    text.split("---\n").map(|d| serde_norway::from_str(d).unwrap()).collect();
                let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
                crate::manifests_json::parse_into(&mut m, "x.json", &list.to_string());
            } else {
                parse_into(&mut m, "x.yaml", &text);
            }
            assert!(m.problems.is_empty(), "{:?}", m.problems);
            let names: Vec<&str> = m.slices.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["plain"], "json: {json}");
        }
    }

    #[test]
    fn bad_documents_are_reported_with_file_and_object() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: broken}\nspec: {ports: notalist}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: fine}\nspec: {clusterIP: 10.96.0.1}\n";
        let mut m = Manifests::default();
        parse_into(&mut m, "svc.yaml", text);
        assert_eq!(m.services.len(), 1, "the good document is still read");
        assert_eq!(m.problems.len(), 1);
        let p = m.problems[0].to_string();
        assert!(p.contains("svc.yaml (document 1)") && p.contains("Service \"broken\""), "{p}");
    }
}
