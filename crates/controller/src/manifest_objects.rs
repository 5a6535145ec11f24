//! What the documents of manifest files become: the objects read so far ([`Manifests`]), one
//! parsed document (YAML or JSON) decoded by its kind and added, and the problem that names a
//! file and document.
//!
//! The YAML reader (`manifests`) and the JSON reader (`manifests_json`) both build on this;
//! it imports neither, so that they do not import each other's file.

use crate::decode::{WatchedService, WatchedSlice};
use crate::translate;
use k8s_openapi::api::core::v1::Node;
use std::path::PathBuf;
use verdict_model::{ObjectKind, ObjectRef, Problem, source};

/// What a manifest directory holds.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    /// Services.
    pub services: Vec<source::Service>,
    /// EndpointSlices.
    pub slices: Vec<source::EndpointSlice>,
    /// Nodes.
    pub nodes: Vec<source::Node>,
    /// ServiceCIDRs.
    pub service_cidrs: Vec<source::ServiceCidr>,
    /// Files and documents that could not be read.
    pub problems: Vec<Problem>,
    /// The files read.
    pub files: Vec<PathBuf>,
}

impl Manifests {
    /// The Node called `name`, if the manifests define it.
    pub fn node(&self, name: &str) -> Option<&source::Node> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

impl Manifests {
    /// Adds `other`'s objects and problems to these.
    pub fn extend(&mut self, other: Manifests) {
        self.services.extend(other.services);
        self.slices.extend(other.slices);
        self.nodes.extend(other.nodes);
        self.service_cidrs.extend(other.service_cidrs);
        self.problems.extend(other.problems);
        self.files.extend(other.files);
    }
}

/// A problem with manifest file `file` (and its document `doc`, counted from 0).
pub(crate) fn manifest_problem(file: &str, doc: Option<usize>, message: String) -> Problem {
    let name = match doc {
        Some(i) => format!("{file} (document {})", i + 1),
        None => file.to_string(),
    };
    Problem::new(ObjectRef { kind: ObjectKind::Manifest, namespace: String::new(), name }, "InvalidManifest", message)
}

/// A parsed document, YAML or JSON: enough to dispatch on its kind and decode it as a type.
pub(crate) trait Document: Sized {
    fn field(&self, path: &[&str]) -> Option<&str>;
    fn items(self) -> Vec<Self>;
    fn decode<T: serde::de::DeserializeOwned>(self) -> Result<T, String>;
}

impl Document for serde_norway::Value {
    fn field(&self, path: &[&str]) -> Option<&str> {
        path.iter().try_fold(self, |v, k| v.get(*k))?.as_str()
    }
    fn items(self) -> Vec<Self> {
        match self.get("items") {
            Some(serde_norway::Value::Sequence(items)) => items.clone(),
            _ => Vec::new(),
        }
    }
    fn decode<T: serde::de::DeserializeOwned>(self) -> Result<T, String> {
        serde_norway::from_value(self).map_err(|e| e.to_string())
    }
}

impl Document for serde_json::Value {
    fn field(&self, path: &[&str]) -> Option<&str> {
        path.iter().try_fold(self, |v, k| v.get(*k))?.as_str()
    }
    fn items(mut self) -> Vec<Self> {
        match self.get_mut("items").map(serde_json::Value::take) {
            Some(serde_json::Value::Array(items)) => items,
            _ => Vec::new(),
        }
    }
    fn decode<T: serde::de::DeserializeOwned>(self) -> Result<T, String> {
        serde_json::from_value(self).map_err(|e| e.to_string())
    }
}

pub(crate) fn add_object<D: Document>(out: &mut Manifests, origin: &str, doc: usize, value: D) {
    let kind = value.field(&["kind"]).unwrap_or_default().to_string();
    let name = value.field(&["metadata", "name"]).unwrap_or("<unnamed>").to_string();
    let bad = |e: String| manifest_problem(origin, Some(doc), format!("{kind} {name:?} does not parse: {e}"));
    match kind.as_str() {
        // Straight into source records, as the watchers decode them (`crate::decode`).
        "Service" => match value.decode::<WatchedService>() {
            Ok(svc) => out.services.push(svc.record),
            Err(e) => out.problems.push(bad(e)),
        },
        // A Service whose labels leave it to another proxy (or mark it headless) is left out by
        // the model; its slices, which carry those labels, here, as the API server's selector
        // leaves them out of the watch.
        "EndpointSlice" => match value.decode::<WatchedSlice>() {
            Ok(slice) if slice.proxied => out.slices.push(slice.record),
            Ok(_) => tracing::debug!(origin, name, "EndpointSlice left to another proxy by its labels"),
            Err(e) => out.problems.push(bad(e)),
        },
        "Node" => match value.decode::<Node>() {
            Ok(node) => out.nodes.push(translate::node(&node)),
            Err(e) => out.problems.push(bad(e)),
        },
        "ServiceCIDR" => match value.decode::<k8s_openapi::api::networking::v1::ServiceCIDR>() {
            Ok(c) => out.service_cidrs.push(translate::service_cidr(&c)),
            Err(e) => out.problems.push(bad(e)),
        },
        "List" => {
            for item in value.items() {
                add_object(out, origin, doc, item);
            }
        }
        "" => out.problems.push(manifest_problem(origin, Some(doc), "document has no kind".into())),
        _ => tracing::debug!(origin, kind, name, "ignoring manifest of a kind verdict does not use"),
    }
}
