//! Which resources the server knows, and how request paths map onto them.
//!
//! A resource is identified the way the API server identifies it: group, version and plural
//! (`URL_PATH_SEGMENT` in k8s-openapi). Types are taken from k8s-openapi's constants so the
//! server can never disagree with the client about a path or a kind.

use std::any::TypeId;

use k8s_openapi::api::{core, discovery, events, networking};
use k8s_openapi::{NamespaceResourceScope, Resource};

/// A served resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Field selector paths accepted besides `metadata.name` and `metadata.namespace`.
    /// The real server rejects unknown field labels with 400, so we do too.
    pub extra_fields: &'static [&'static str],
}

impl ResourceType {
    /// The type behind a k8s-openapi struct.
    pub fn of<K>() -> Self
    where
        K: Resource<Scope: 'static>,
    {
        ResourceType {
            group: K::GROUP.to_string(),
            version: K::VERSION.to_string(),
            plural: K::URL_PATH_SEGMENT.to_string(),
            kind: K::KIND.to_string(),
            namespaced: TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>(),
            extra_fields: extra_fields(K::GROUP, K::URL_PATH_SEGMENT),
        }
    }

    /// `v1` or `group/version`, as written in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The kind of the collection, e.g. `ServiceList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Same group, version and plural: the identity the router matches on.
    pub fn same_resource(&self, group: &str, version: &str, plural: &str) -> bool {
        self.group == group && self.version == version && self.plural == plural
    }
}

/// Type-specific field selectors the real API server supports for the resources we serve.
fn extra_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "reason",
            "reportingController",
            "type",
        ],
        _ => &[],
    }
}

/// The resources served from the start (before any `apply`): what verdict's controller uses.
pub(crate) fn builtin_types() -> Vec<ResourceType> {
    vec![
        ResourceType::of::<core::v1::Service>(),
        ResourceType::of::<core::v1::Node>(),
        ResourceType::of::<core::v1::Namespace>(),
        ResourceType::of::<discovery::v1::EndpointSlice>(),
        ResourceType::of::<networking::v1::ServiceCIDR>(),
        ResourceType::of::<events::v1::Event>(),
        ResourceType::of::<core::v1::Event>(),
    ]
}

/// A request path taken apart: `/api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]`
/// or the same under `/apis/{group}/{version}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl ResourcePath {
    /// Parses a resource path; `None` for anything that is not one (discovery, typos, ...).
    pub fn parse(path: &str) -> Option<ResourcePath> {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        // `namespaces/{ns}` alone is the Namespace object itself, not a namespace prefix.
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(decode(ns)), rest),
            _ => (None, rest),
        };
        let (plural, name, subresource) = match rest {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(decode(name)), None),
            [plural, name, sub] => (*plural, Some(decode(name)), Some(sub.to_string())),
            _ => return None,
        };
        if plural.is_empty() || name.as_deref() == Some("") {
            return None;
        }
        Some(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace,
            plural: plural.to_string(),
            name,
            subresource,
        })
    }
}

/// Percent-decodes one path segment (names are DNS labels in practice, but be exact anyway).
fn decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_core_and_group_paths() {
        let p = ResourcePath::parse("/api/v1/namespaces/default/services/web").unwrap();
        assert_eq!(p.group, "");
        assert_eq!(p.namespace.as_deref(), Some("default"));
        assert_eq!(p.plural, "services");
        assert_eq!(p.name.as_deref(), Some("web"));

        let p = ResourcePath::parse("/apis/discovery.k8s.io/v1/endpointslices").unwrap();
        assert_eq!(
            (p.group.as_str(), p.version.as_str(), p.plural.as_str()),
            ("discovery.k8s.io", "v1", "endpointslices")
        );
        assert_eq!(p.namespace, None);

        let p = ResourcePath::parse("/api/v1/namespaces/kube-system").unwrap();
        assert_eq!((p.plural.as_str(), p.name.as_deref()), ("namespaces", Some("kube-system")));

        assert_eq!(ResourcePath::parse("/version"), None);
        assert_eq!(ResourcePath::parse("/api/v1"), None);
    }

    #[test]
    fn scope_comes_from_k8s_openapi() {
        assert!(ResourceType::of::<core::v1::Service>().namespaced);
        assert!(!ResourceType::of::<core::v1::Node>().namespaced);
        assert!(!ResourceType::of::<networking::v1::ServiceCIDR>().namespaced);
        assert_eq!(ResourceType::of::<discovery::v1::EndpointSlice>().api_version(), "discovery.k8s.io/v1");
    }
}
