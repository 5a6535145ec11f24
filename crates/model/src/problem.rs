//! Problems found while building the model: bad input that is skipped, never fatal.

use std::fmt;

/// The kind of object a [`Problem`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// A core/v1 Service.
    Service,
    /// A discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice,
    /// A core/v1 Node.
    Node,
    /// A manifest file or document that could not be read as any object.
    Manifest,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
            ObjectKind::Node => "Node",
            ObjectKind::Manifest => "manifest",
        })
    }
}

/// Which object a [`Problem`] is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// The object's kind.
    pub kind: ObjectKind,
    /// Its namespace ("" for cluster-scoped objects and manifests).
    pub namespace: String,
    /// Its name (for a manifest: the file, and the document index when there are several).
    pub name: String,
}

impl ObjectRef {
    /// A namespaced object.
    pub fn new(kind: ObjectKind, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef { kind, namespace: namespace.to_string(), name: name.to_string() }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Input verdict cannot program. The offending part is left out; everything else is programmed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// The object at fault.
    pub object: ObjectRef,
    /// A short CamelCase reason, usable as a metric label and an Event reason.
    pub reason: &'static str,
    /// What is wrong, in one line, naming the offending value.
    pub message: String,
}

impl Problem {
    /// A problem about `object`.
    pub fn new(object: ObjectRef, reason: &'static str, message: impl Into<String>) -> Problem {
        Problem { object, reason, message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.object, self.message, self.reason)
    }
}
