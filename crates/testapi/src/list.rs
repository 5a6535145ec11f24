//! LIST: resourceVersion semantics, selectors and `limit`/`continue` pagination (of
//! consistent and exact lists only: lists served from the watch cache come whole).
//!
//! Every page of a paginated list is cut from the same snapshot, the one at the RV of the
//! first page (like etcd range reads at a fixed revision), and the continue token carries
//! that RV and the last key served. A token whose snapshot was compacted away yields 410.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::output::Output;
use crate::query::Query;
use crate::resource::ResourceType;
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::{Key, Obj, ReadAt, Store, TypeIdx};
use std::sync::Arc;

/// What a continue token encodes, shaped like the real server's
/// (`{"v":"meta.k8s.io/v1","rv":N,"start":...}`, base64url without padding).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct ContinueToken {
    v: String,
    rv: u64,
    /// The last key already returned; the next page starts after it.
    start: Key,
}

impl ContinueToken {
    fn encode(&self) -> String {
        data_encoding::BASE64URL_NOPAD.encode(&serde_json::to_vec(self).expect("plain data serializes"))
    }

    fn decode(token: &str) -> Result<ContinueToken, ApiError> {
        let invalid = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
        let bytes = data_encoding::BASE64URL_NOPAD.decode(token.as_bytes()).map_err(|_| invalid())?;
        let token: ContinueToken = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        if token.v != "meta.k8s.io/v1" {
            return Err(invalid());
        }
        Ok(token)
    }
}

/// One list response: its metadata and objects, encoded as the client asked.
pub(crate) struct ListPage {
    api_version: String,
    kind: String,
    metadata: Value,
    items: Vec<Arc<Obj>>,
    output: Output,
}

impl ListPage {
    /// The list as JSON: the objects' JSON as made when they were written (the watch cache's
    /// way), not serialized again per list; as the API server writes them, the items have no
    /// `kind` and `apiVersion`.
    pub fn json(&self) -> Vec<u8> {
        let head = json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": self.metadata});
        let mut out = serde_json::to_vec(&head).expect("JSON values serialize");
        out.pop(); // the closing brace
        out.extend_from_slice(b",\"items\":[");
        for (i, obj) in self.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match self.output {
                Output::Full => out.extend_from_slice(&obj.item_json),
                Output::Metadata => serde_json::to_writer(&mut out, &self.output.object(obj.value.clone()))
                    .expect("JSON values serialize"),
            }
        }
        out.extend_from_slice(b"]}");
        out
    }

    /// The list in protobuf (objects of the kinds served in protobuf).
    pub fn protobuf(&self, ty: &ResourceType) -> Vec<u8> {
        let items = self.items.iter().map(|o| o.protobuf.clone().unwrap_or_default()).collect();
        crate::protobuf::list(ty, &self.metadata, items)
    }
}

/// Serves one LIST request and returns the list.
pub(crate) fn list(
    store: &Store,
    (ty_idx, ty): (TypeIdx, &ResourceType),
    filter: &Filter,
    query: &Query,
    output: Output,
) -> Result<ListPage, ApiError> {
    let limit = query.number("limit")?.filter(|&l| l > 0);
    let continue_token = query.get("continue").map(ContinueToken::decode).transpose()?;
    let rv = query.resource_version()?;
    let rv_match = query.get("resourceVersionMatch");

    if continue_token.is_some() && rv.is_some_and(|rv| rv != 0) {
        return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
    }
    let at = match (&continue_token, rv, rv_match) {
        (Some(token), _, _) => ReadAt::Exact(token.rv),
        (None, None, Some(_)) => {
            return Err(ApiError::invalid("resourceVersionMatch is forbidden unless resourceVersion is provided"));
        }
        (None, None, None) => ReadAt::Latest { not_older_than: 0 },
        (None, Some(0), Some("Exact")) => {
            return Err(ApiError::invalid("resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\""));
        }
        (None, Some(rv), Some("Exact")) => ReadAt::Exact(rv),
        // A non-zero RV without a match is "not older than", except for paged lists where it
        // is exact (the table in the API concepts docs, "Semantics for get and list").
        (None, Some(rv), None) if rv != 0 && limit.is_some() => ReadAt::Exact(rv),
        (None, Some(rv), None | Some("NotOlderThan")) => ReadAt::Latest { not_older_than: rv },
        (None, Some(_), Some(other)) => {
            return Err(ApiError::invalid(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
            )));
        }
    };

    // A list at "any" or "not older than" a resourceVersion is served from the API server's
    // watch cache, which does not page: it answers with every object at once and ignores
    // `limit` (the cacher's `shouldDelegateList`: "Serve paginated requests about revision
    // \"0\" from watch cache"). Consistent and exact lists come from etcd, page by page.
    let from_cache = continue_token.is_none() && rv.is_some() && matches!(at, ReadAt::Latest { .. });
    let limit = if from_cache { None } else { limit };
    let resuming = continue_token.is_some();
    let start = continue_token.map(|t| t.start);
    let page = (start.as_ref(), limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)));
    let snapshot = store.snapshot(ty_idx, at, filter, page, |rv, compacted| {
        if resuming {
            ApiError::continue_expired()
        } else {
            ApiError::expired(format!("too old resource version: {rv} ({compacted})"))
        }
    })?;

    let mut metadata = json!({"resourceVersion": snapshot.rv.to_string()});
    if snapshot.remaining > 0 {
        let last = snapshot.items.last().map(|(k, _)| k.clone()).unwrap_or_default();
        let token = ContinueToken { v: "meta.k8s.io/v1".into(), rv: snapshot.rv, start: last };
        metadata["continue"] = json!(token.encode());
        // The real server can only count what is left when no selector has to be applied.
        if !filter.has_selectors() {
            metadata["remainingItemCount"] = json!(snapshot.remaining);
        }
    }
    let items = snapshot.items.into_iter().map(|(_, obj)| obj).collect();
    let (api_version, kind) = output.list_type(ty);
    Ok(ListPage { api_version, kind, metadata, items, output })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_token_round_trips() {
        let t = ContinueToken { v: "meta.k8s.io/v1".into(), rv: 42, start: ("default".into(), "web".into()) };
        assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
        assert_eq!(ContinueToken::decode("garbage!").unwrap_err().code, 400);
    }
}
