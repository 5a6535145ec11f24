//! Writes over HTTP: create, update, patch, delete and deletecollection, for every served
//! resource. kube-runtime's event `Recorder` is the main user: it POSTs a new
//! `events.k8s.io/v1` Event, and PATCHes it (merge patch carrying a `series`) when the same
//! event repeats.

use serde_json::{Value, json};

use crate::output::Output;
use crate::query::Query;
use crate::resource::ResourceType;
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::{Key, ReadAt, Store, TypeIdx};

/// A write's target: the type, the namespace from the path, and the name (if any) from the path.
pub(crate) struct Target<'a> {
    pub ty_idx: TypeIdx,
    pub ty: &'a ResourceType,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl Target<'_> {
    fn key(&self, name: &str) -> Key {
        (self.namespace.unwrap_or_default().to_string(), name.to_string())
    }

    fn path_name(&self) -> &str {
        self.name.unwrap_or_default()
    }
}

/// A successful write: the HTTP status and the body.
pub(crate) type Written = (u16, Value);

fn reject_dry_run(query: &Query) -> Result<(), ApiError> {
    match query.get("dryRun") {
        // Rejected rather than ignored: ignoring it would silently change the store.
        Some(_) => Err(ApiError::bad_request("dryRun is not supported by verdict-testapi")),
        None => Ok(()),
    }
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok(value)
}

/// Checks what the body says about itself against the URL, like the API server does.
fn check_identity(t: &Target<'_>, obj: &Value) -> Result<(), ApiError> {
    if let Some(kind) = obj["kind"].as_str()
        && kind != t.ty.kind
    {
        return Err(ApiError::bad_request(format!("the kind {kind:?} does not match the resource {:?}", t.ty.plural)));
    }
    if let (Some(ns), Some(path_ns)) = (obj["metadata"]["namespace"].as_str(), t.namespace)
        && ns != path_ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// POST to a collection: 201 with the stored object, 409 if it exists.
pub(crate) fn create(
    store: &Store,
    t: &Target<'_>,
    query: &Query,
    body: &[u8],
    output: Output,
) -> Result<Written, ApiError> {
    reject_dry_run(query)?;
    if t.ty.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed("POST"));
    }
    let mut obj = parse_body(body)?;
    check_identity(t, &obj)?;
    let name = match (obj["metadata"]["name"].as_str(), obj["metadata"]["generateName"].as_str()) {
        (Some(name), _) if !name.is_empty() => name.to_string(),
        (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix(store.current_rv())),
        _ => return Err(ApiError::invalid("metadata.name: Required value: name or generateName is required")),
    };
    // Clients may not choose the resourceVersion of a new object.
    if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    let stored = store.write(t.ty_idx, t.key(&name), obj, Some(false), None)?;
    Ok((201, output.object(stored)))
}

/// PUT of a named object: 200, 404 if missing, 409 on a stale resourceVersion.
pub(crate) fn update(
    store: &Store,
    t: &Target<'_>,
    query: &Query,
    body: &[u8],
    output: Output,
) -> Result<Written, ApiError> {
    reject_dry_run(query)?;
    let obj = parse_body(body)?;
    check_identity(t, &obj)?;
    if let Some(name) = obj["metadata"]["name"].as_str()
        && name != t.path_name()
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            t.path_name()
        )));
    }
    let precondition = obj["metadata"]["resourceVersion"].as_str().map(str::to_string);
    let stored = store.write(t.ty_idx, t.key(t.path_name()), obj, Some(true), precondition.as_deref())?;
    Ok((200, output.object(stored)))
}

/// PATCH of a named object. Merge and strategic-merge patches are applied as JSON merge
/// patches (RFC 7386); server-side apply is approximated the same way (and creates the
/// object when missing, like apply does). JSON patches are not implemented (415).
pub(crate) fn patch(
    store: &Store,
    t: &Target<'_>,
    query: &Query,
    content_type: &str,
    body: &[u8],
    output: Output,
) -> Result<Written, ApiError> {
    reject_dry_run(query)?;
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    let apply = match media_type {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => false,
        "application/apply-patch+yaml" | "application/apply-patch+json" => true,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if apply && query.get("fieldManager").is_none() {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let patch = parse_body(body).map_err(|e| {
        if apply {
            ApiError::bad_request("apply patches must be JSON (YAML is not supported by verdict-testapi)")
        } else {
            e
        }
    })?;
    check_identity(t, &patch)?;
    let user_rv = patch["metadata"]["resourceVersion"].as_str().map(str::to_string);
    let key = t.key(t.path_name());
    loop {
        let Some(current) = store.get(t.ty_idx, &key) else {
            if !apply {
                return Err(ApiError::not_found(&t.ty.group, &t.ty.plural, t.path_name()));
            }
            match store.write(t.ty_idx, key.clone(), patch.clone(), Some(false), None) {
                // Created concurrently: patch that object instead.
                Err(e) if e.code == 409 => continue,
                result => return result.map(|stored| (201, output.object(stored))),
            }
        };
        let current_rv = current["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        let mut merged = current;
        merge_patch(&mut merged, &patch);
        // Without a client-supplied resourceVersion, a concurrent write between our read and
        // write is retried (like the API server's GuaranteedUpdate), not reported.
        let precondition = user_rv.clone().unwrap_or(current_rv);
        match store.write(t.ty_idx, key.clone(), merged, Some(true), Some(&precondition)) {
            Err(e) if e.code == 409 && user_rv.is_none() => continue,
            Err(e) if e.code == 404 && apply => continue,
            Err(e) => return Err(e),
            Ok(stored) => return Ok((200, output.object(stored))),
        }
    }
}

/// DELETE of a named object: 200 with a `Success` Status (as for most built-in resources).
pub(crate) fn delete(store: &Store, t: &Target<'_>, query: &Query, body: &[u8]) -> Result<Written, ApiError> {
    reject_dry_run(query)?;
    // DeleteOptions may carry preconditions; an empty body is fine.
    let options: Value = if body.iter().all(u8::is_ascii_whitespace) { json!({}) } else { parse_body(body)? };
    let precondition = options["preconditions"]["resourceVersion"].as_str();
    let gone = store.delete(t.ty_idx, &t.key(t.path_name()), precondition)?;
    Ok((
        200,
        json!({
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Success",
            "details": {"name": t.path_name(), "group": t.ty.group, "kind": t.ty.plural, "uid": gone["metadata"]["uid"]},
        }),
    ))
}

/// DELETE of a collection: deletes everything matching the selectors, returns them as a list.
pub(crate) fn delete_collection(
    store: &Store,
    t: &Target<'_>,
    filter: &Filter,
    query: &Query,
    output: Output,
) -> Result<Written, ApiError> {
    reject_dry_run(query)?;
    let latest = ReadAt::Latest { not_older_than: 0 };
    let snapshot =
        store.snapshot(t.ty_idx, latest, filter, (None, None), |_, _| unreachable!("latest never expires"))?;
    // Objects deleted concurrently are simply skipped.
    let deleted: Vec<Value> = snapshot
        .items
        .iter()
        .filter_map(|(key, _)| store.delete(t.ty_idx, key, None).ok())
        .map(|o| output.object(o))
        .collect();
    let (api_version, kind) = output.list_type(t.ty);
    let rv = store.current_rv().to_string();
    Ok((200, json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": rv}, "items": deleted})))
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, everything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The 5-character suffix `generateName` gets (from the API server's alphabet, without vowels).
fn random_suffix(seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // Mix the RV with the clock so two creates at the same RV still differ.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(u64::from(nanos));
    (0..5)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ALPHABET[((x >> 33) % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut target, &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"x": 1}}));
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"x": 1}}));
    }
}
