//! verdict's controller: where Kubernetes objects come from (the API server, or a directory of
//! manifests) and how they become the model's source records.

pub mod manifests;
pub mod translate;
