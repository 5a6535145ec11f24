//! API errors, rendered as `meta/v1 Status` objects like the real API server does.
//!
//! kube-client only turns a failed response into a typed `kube::Error::Api` when the body
//! parses as a `Status`, and its watcher decides between "re-watch" and "relist" on the
//! `code` field (410 means relist), so the shape and codes here matter.

use serde_json::{Value, json};

/// An error the server answers with: an HTTP status code plus a `Status` body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status code, repeated as `Status.code`.
    pub code: u16,
    /// The machine-readable `Status.reason` (`NotFound`, `Expired`, ...).
    pub reason: &'static str,
    /// The human-readable `Status.message`.
    pub message: String,
    /// Optional `Status.details`.
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400: the request is malformed (bad selector, bad token, bad body).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for an object that does not exist.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let what = if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") };
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 404 for a path the server does not serve.
    pub fn no_route() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
            .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]}))
    }

    /// 405 for a verb the resource/path does not support.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {method}"),
        )
    }

    /// 409 when creating an object that already exists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let what = if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") };
        Self::new(409, "AlreadyExists", format!("{what} \"{name}\" already exists"))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 409 when a write carries a stale `metadata.resourceVersion` (optimistic concurrency).
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        let what = if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") };
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {what} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 410 for a resourceVersion older than the compacted history; clients must relist.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 410 for a `continue` token whose snapshot was compacted away.
    pub fn continue_expired() -> Self {
        Self::expired(
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter.",
        )
    }

    /// 415 for a patch type the server does not implement.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }

    /// 422 when the object or the parameters fail validation.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 504 for a resourceVersion newer than anything the server has seen.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        Self::new(504, "Timeout", format!("Too large resource version: {requested}, current: {current}")).with_details(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        )
    }

    /// The `Status` object for this error, as sent in a response body or an `ERROR` watch event.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}
