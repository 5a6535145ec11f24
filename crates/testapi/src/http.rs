//! HTTP routing: maps a request onto a resource and a verb, logs it, and answers with JSON,
//! a streaming watch, or a `Status` error.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};

use crate::output::Output;
use crate::query::Query;
use crate::record::{RequestRecord, Verb};
use crate::resource::{ResourcePath, ResourceType};
use crate::selector::Filter;
use crate::status::ApiError;
use crate::store::{Store, TypeIdx};
use crate::write::{self, Target};
use crate::{list, watch};

/// Response body: either a complete JSON document or a watch stream.
pub(crate) type Body = UnsyncBoxBody<Bytes, io::Error>;

/// A resource request after routing.
struct Routed {
    verb: Verb,
    ty_idx: TypeIdx,
    ty: ResourceType,
    path: ResourcePath,
}

/// Serves one request, counting the body bytes it sends (see [`Store::bytes_sent`]).
pub(crate) async fn handle(store: Arc<Store>, addr: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let response = respond(store.clone(), addr, req).await;
    response.map(|body| {
        UnsyncBoxBody::new(body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                store.count_sent(data.len());
            }
            frame
        }))
    })
}

async fn respond(store: Arc<Store>, addr: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let raw_query = req.uri().query().unwrap_or_default().to_string();
    let query = Query::parse(&raw_query);
    let header_str = |name| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let output = Output::from_accept(header_str(header::ACCEPT).as_deref());
    let protobuf = crate::protobuf::wanted(header_str(header::ACCEPT).as_deref());
    let content_type = header_str(header::CONTENT_TYPE).unwrap_or_default();

    let routed = route(&store, &method, &path, &query);
    let verb = match &routed {
        Some(Ok(r)) => r.verb,
        _ => Verb::Other,
    };
    let authorization = header_str(header::AUTHORIZATION);
    store.record(RequestRecord {
        method: method.to_string(),
        path: path.clone(),
        query: raw_query,
        verb,
        authorization,
    });
    tracing::debug!(%method, %path, ?verb, "testapi request");

    let routed = match routed {
        Some(Ok(routed)) => routed,
        Some(Err(err)) => return error(&err),
        None => return discovery(&store, addr, &method, &path),
    };
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return error(&ApiError::bad_request(format!("reading the request body failed: {e}"))),
    };
    let protobuf = protobuf && output == Output::Full && crate::protobuf::served(&routed.ty);
    match serve(&store, routed, &query, (output, protobuf), &content_type, &body) {
        Ok(response) => response,
        Err(err) => error(&err),
    }
}

/// Finds the resource and verb; `None` when the path is not a resource path at all.
fn route(store: &Store, method: &Method, path: &str, query: &Query) -> Option<Result<Routed, ApiError>> {
    ResourcePath::parse(path).map(|rp| route_resource(store, method, rp, query))
}

fn route_resource(store: &Store, method: &Method, rp: ResourcePath, query: &Query) -> Result<Routed, ApiError> {
    let (ty_idx, ty) = store.find_type(&rp.group, &rp.version, &rp.plural).ok_or_else(ApiError::no_route)?;
    // Cluster-scoped types have no namespaced paths, namespaced ones no cluster-wide named
    // paths, and no subresources are served.
    let bad_scope = matches!((ty.namespaced, &rp.namespace, &rp.name), (false, Some(_), _) | (true, None, Some(_)));
    if bad_scope || rp.subresource.is_some() {
        return Err(ApiError::no_route());
    }
    let named = rp.name.is_some();
    let verb = match *method {
        Method::GET if query.flag("watch")?.unwrap_or(false) => Verb::Watch,
        Method::GET if named => Verb::Get,
        Method::GET => Verb::List,
        Method::POST if !named => Verb::Create,
        Method::PUT if named => Verb::Update,
        Method::PATCH if named => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed(method.as_str())),
    };
    Ok(Routed { verb, ty_idx, ty, path: rp })
}

fn serve(
    store: &Arc<Store>,
    routed: Routed,
    query: &Query,
    (output, protobuf): (Output, bool),
    content_type: &str,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let Routed { verb, ty_idx, ty, path } = routed;
    let target = Target { ty_idx, ty: &ty, namespace: path.namespace.as_deref(), name: path.name.as_deref() };
    let filter = || {
        Filter::parse(
            &ty,
            path.namespace.clone(),
            path.name.clone(),
            query.get("labelSelector"),
            query.get("fieldSelector"),
        )
    };
    let (code, value) = match verb {
        Verb::List => {
            let list = list::list(store, (ty_idx, &ty), &filter()?, query, output)?;
            let (media, body) = match protobuf {
                true => (crate::protobuf::PROTOBUF, list.protobuf(&ty)),
                false => ("application/json", list.json()),
            };
            if store.faults.take_stall(ty_idx) {
                return Ok(stream_response(media, crate::faults::stalled(body)));
            }
            return Ok(bytes_response(200, media, body));
        }
        Verb::Watch => {
            let chunks = watch::watch(store.clone(), (ty_idx, &ty), filter()?, query, (output, protobuf))?;
            let media = if protobuf { crate::protobuf::PROTOBUF_WATCH } else { "application/json" };
            return Ok(stream_response(media, chunks));
        }
        Verb::Get => {
            let key = (path.namespace.clone().unwrap_or_default(), path.name.clone().unwrap_or_default());
            let obj = store.get(ty_idx, &key).ok_or_else(|| ApiError::not_found(&ty.group, &ty.plural, &key.1))?;
            (200, output.object(obj))
        }
        Verb::Create => write::create(store, &target, query, body, output)?,
        Verb::Update => write::update(store, &target, query, body, output)?,
        Verb::Patch => write::patch(store, &target, query, content_type, body, output)?,
        Verb::Delete => write::delete(store, &target, query, body)?,
        Verb::DeleteCollection => write::delete_collection(store, &target, &filter()?, query, output)?,
        Verb::Other => return Err(ApiError::no_route()),
    };
    Ok(json_response(code, &value))
}

/// A 200 response of type `media` whose body is `chunks`, sent as they come.
fn stream_response(
    media: &'static str,
    chunks: impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static,
) -> Response<Body> {
    let body = StreamBody::new(chunks.map_ok(Frame::data));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, media)
        .body(UnsyncBoxBody::new(body))
        .expect("static response parts are valid")
}

/// Discovery and health endpoints; 404 for everything else.
fn discovery(store: &Store, addr: SocketAddr, method: &Method, path: &str) -> Response<Body> {
    if method != Method::GET {
        return error(&ApiError::no_route());
    }
    let types = store.types();
    let path = path.trim_end_matches('/');
    let group_versions = |group: &str| -> Vec<String> {
        let mut versions: Vec<String> = types.iter().filter(|t| t.group == group).map(|t| t.version.clone()).collect();
        versions.dedup();
        versions
    };
    let api_group = |group: &str| {
        let versions: Vec<Value> = group_versions(group)
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        json!({"apiVersion": "v1", "kind": "APIGroup", "name": group, "versions": versions, "preferredVersion": versions[0]})
    };
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let value = match segments.as_slice() {
        ["healthz" | "livez" | "readyz"] => {
            return Response::new(UnsyncBoxBody::new(
                Full::new(Bytes::from_static(b"ok")).map_err(|never| match never {}),
            ));
        }
        ["version"] => json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-verdict-testapi", "gitCommit": "", "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
        }),
        ["api"] => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string()}],
        }),
        ["apis"] => {
            let groups: BTreeMap<&str, Value> =
                types.iter().filter(|t| !t.group.is_empty()).map(|t| (t.group.as_str(), api_group(&t.group))).collect();
            json!({"apiVersion": "v1", "kind": "APIGroupList", "groups": groups.into_values().collect::<Vec<_>>()})
        }
        ["apis", group] if !group_versions(group).is_empty() => api_group(group),
        ["api", version] => resource_list(&types, "", version),
        ["apis", group, version] => resource_list(&types, group, version),
        _ => Value::Null,
    };
    if value.is_null() {
        return error(&ApiError::no_route());
    }
    json_response(200, &value)
}

/// `APIResourceList` for one group/version, or null when nothing is served there.
fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Value {
    let resources: Vec<Value> = types
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .map(|t| {
            json!({
                "name": t.plural,
                "singularName": t.kind.to_lowercase(),
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            })
        })
        .collect();
    if resources.is_empty() {
        return Value::Null;
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    json!({"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": group_version, "resources": resources})
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    bytes_response(code, "application/json", serde_json::to_vec(value).expect("JSON values serialize"))
}

fn bytes_response(code: u16, media: &'static str, bytes: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, media)
        .body(UnsyncBoxBody::new(Full::new(Bytes::from(bytes)).map_err(|never| match never {})))
        .expect("static response parts are valid")
}

fn error(err: &ApiError) -> Response<Body> {
    json_response(err.code, &err.to_status())
}
