//! The request log tests assert on ("did the watcher relist?", "which selector was sent?").

/// What a request did, as the API server's audit log would name the verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of a collection.
    List,
    /// `GET` of a collection (or a named object) with `watch=true`.
    Watch,
    /// `GET` of one named object.
    Get,
    /// `POST` to a collection.
    Create,
    /// `PUT` of a named object.
    Update,
    /// `PATCH` of a named object.
    Patch,
    /// `DELETE` of a named object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
    /// Anything else: discovery, health checks, unknown paths and methods.
    Other,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// The HTTP method, e.g. `GET`.
    pub method: String,
    /// The path without the query string, e.g. `/api/v1/services`.
    pub path: String,
    /// The raw (still percent-encoded) query string, without `?`; empty when there is none.
    pub query: String,
    /// The verb the server understood the request as.
    pub verb: Verb,
    /// The `Authorization` header, as sent (e.g. `Bearer TOKEN`).
    pub authorization: Option<String>,
}

impl RequestRecord {
    /// The decoded value of a query parameter, if present (the first one when repeated).
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
    }

    /// Whether this was a list (not a watch) of the collection at `path`.
    pub fn is_list_of(&self, path: &str) -> bool {
        self.verb == Verb::List && self.path == path
    }

    /// Whether this was a watch of the collection at `path`.
    pub fn is_watch_of(&self, path: &str) -> bool {
        self.verb == Verb::Watch && self.path == path
    }
}
