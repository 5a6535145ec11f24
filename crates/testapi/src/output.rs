//! Response shapes: full objects, or `PartialObjectMetadata` when the client asks for it in
//! the `Accept` header (kube's `metadata_watcher` and `Api::list_metadata` do).

use serde_json::{Value, json};

use crate::resource::ResourceType;

/// How objects are rendered for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// The stored object as is.
    Full,
    /// Only `apiVersion: meta.k8s.io/v1`, `kind: PartialObjectMetadata` and `metadata`.
    Metadata,
}

impl Output {
    /// Picks the shape from the `Accept` header, e.g.
    /// `application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`.
    pub fn from_accept(accept: Option<&str>) -> Output {
        match accept {
            Some(a) if a.contains("as=PartialObjectMetadata") => Output::Metadata,
            _ => Output::Full,
        }
    }

    /// One object, e.g. in a GET response or a watch event.
    pub fn object(self, obj: Value) -> Value {
        match self {
            Output::Full => obj,
            Output::Metadata => json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": obj["metadata"],
            }),
        }
    }

    /// `apiVersion` and `kind` of a bookmark's object.
    pub fn bookmark_type(self, ty: &ResourceType) -> (String, String) {
        match self {
            Output::Full => (ty.api_version(), ty.kind.clone()),
            Output::Metadata => ("meta.k8s.io/v1".into(), "PartialObjectMetadata".into()),
        }
    }

    /// `apiVersion` and `kind` of a list.
    pub fn list_type(self, ty: &ResourceType) -> (String, String) {
        match self {
            Output::Full => (ty.api_version(), ty.list_kind()),
            Output::Metadata => ("meta.k8s.io/v1".into(), "PartialObjectMetadataList".into()),
        }
    }
}
