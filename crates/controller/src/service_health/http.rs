//! The answer of a health-check listener, and the HTTP serving of one listener.

use crate::health::ProxyHealth;
use crate::http_serve::{self, Connections, Handler, Limits};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use hyper::{Request, Response, StatusCode, body::Incoming};
use std::fmt;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::net::TcpListener;

/// What the listeners of one Service answer with; updated in place by `sync`.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) local_endpoints: AtomicUsize,
}

impl fmt::Display for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The header telling load balancers how much traffic this node takes.
const WEIGHT_HEADER: &str = "x-load-balancing-endpoint-weight";

/// What a health-check listener answers, whatever the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheckReply {
    /// 200 or 503.
    pub code: u16,
    /// The JSON body.
    pub body: String,
}

/// The answer for a Service with `local_endpoints` local ready endpoints: 200 when there is at
/// least one and the proxy is healthy, else 503.
pub fn reply(namespace: &str, name: &str, local_endpoints: usize, proxy_healthy: bool) -> HealthCheckReply {
    let code = if local_endpoints > 0 && proxy_healthy { 200 } else { 503 };
    let body = format!(
        "{{\"service\":{{\"namespace\":{},\"name\":{}}},\"localEndpoints\":{local_endpoints},\"serviceProxyHealthy\":{proxy_healthy}}}",
        json_string(namespace),
        json_string(name)
    );
    HealthCheckReply { code, body }
}

/// A JSON string literal (Kubernetes names never need escaping, but stay correct anyway).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn response(shared: &Shared, proxy: &ProxyHealth) -> Response<Full<Bytes>> {
    let count = shared.local_endpoints.load(Ordering::Relaxed);
    let r = reply(&shared.namespace, &shared.name, count, proxy.healthy());
    let mut resp = Response::new(Full::new(Bytes::from(r.body)));
    *resp.status_mut() = if r.code == 200 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(HeaderName::from_static(WEIGHT_HEADER), HeaderValue::from(count));
    resp
}

/// Accepts and serves until the task is aborted; aborting it closes the listener and every
/// connection it accepted.
pub(super) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    proxy: Arc<ProxyHealth>,
    connections: Arc<Connections>,
) {
    // Every request gets the same answer, whatever its path.
    let handler: Handler = Arc::new(move |_req: &Request<Incoming>| response(&shared, &proxy));
    http_serve::serve(listener, Limits::default(), connections, handler).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_upstreams_json() {
        assert_eq!(
            reply("default", "web", 2, true),
            HealthCheckReply {
                code: 200,
                body:
                    r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":2,"serviceProxyHealthy":true}"#
                        .into()
            }
        );
        assert_eq!(reply("default", "web", 0, true).code, 503);
        assert_eq!(reply("default", "web", 3, false).code, 503);
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
    }
}
