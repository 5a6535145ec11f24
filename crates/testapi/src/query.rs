//! Query-string parameters, decoded the way the API server decodes them.

use crate::status::ApiError;

/// The decoded query parameters of one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(raw: &str) -> Query {
        Query(form_urlencoded::parse(raw.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
    }

    /// The first value of a parameter; an empty value counts as absent, as in the API server.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }

    /// A boolean parameter, parsed like Go's `strconv.ParseBool`.
    pub fn flag(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(Some(true)),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(Some(false)),
            Some(v) => Err(ApiError::bad_request(format!("invalid value for {name}: {v:?}"))),
        }
    }

    /// A non-negative integer parameter.
    pub fn number(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|v| v.parse().map_err(|_| ApiError::bad_request(format!("invalid value for {name}: {v:?}"))))
            .transpose()
    }

    /// `resourceVersion`, which must be a decimal etcd revision when present.
    pub fn resource_version(&self) -> Result<Option<u64>, ApiError> {
        self.get("resourceVersion")
            .map(|v| v.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {v:?}"))))
            .transpose()
    }
}
