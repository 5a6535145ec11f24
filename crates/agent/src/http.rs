//! The two HTTP endpoints kube-proxy has: metrics (`/metrics`, `/proxyMode`, `/healthz`) on
//! 127.0.0.1:10249 and health (`/healthz`, `/livez`) on 0.0.0.0:10256.

use crate::counters::CounterReader;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use hyper::{Request, Response, StatusCode, body::Incoming};
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use verdict_controller::health::{HealthReport, ProxyHealth};
use verdict_controller::http_serve::{self, Connections, Handler, Limits};
use verdict_controller::metrics as m;

/// An answer: status, content type, body.
pub type RouteResponse = (u16, &'static str, String);

fn health(report: HealthReport, counter: &'static str) -> RouteResponse {
    metrics::counter!(counter, "code" => report.code.to_string()).increment(1);
    (report.code, "application/json", report.body)
}

/// Routes of the metrics address.
pub fn metrics_routes(
    prom: PrometheusHandle,
    health_state: Arc<ProxyHealth>,
    counters: Option<CounterReader>,
) -> impl Fn(&str) -> RouteResponse + Send + Sync + 'static {
    move |path| match path {
        "/metrics" => {
            let mut text = prom.render();
            crate::process_metrics::render_into(&mut text);
            if let Some(c) = &counters {
                c.render_into(&mut text);
            }
            (200, "text/plain; version=0.0.4", text)
        }
        "/proxyMode" => (200, "text/plain; charset=utf-8", "nftables".into()),
        "/healthz" => health(health_state.healthz(), m::HEALTHZ_TOTAL),
        _ => (404, "text/plain; charset=utf-8", "404 page not found\n".into()),
    }
}

/// Routes of the health address.
pub fn health_routes(health_state: Arc<ProxyHealth>) -> impl Fn(&str) -> RouteResponse + Send + Sync + 'static {
    move |path| match path {
        "/healthz" => health(health_state.healthz(), m::HEALTHZ_TOTAL),
        "/livez" => health(health_state.livez(), m::LIVEZ_TOTAL),
        _ => (404, "text/plain; charset=utf-8", "404 page not found\n".into()),
    }
}

/// Binds now (so a taken port fails the start), serves in the background with the shared
/// limits of every verdict listener (header timeout, bounded heads) and its connections in
/// `connections`, the table every listener of the agent shares.
pub async fn serve(
    addr: SocketAddr,
    connections: Arc<Connections>,
    routes: impl Fn(&str) -> RouteResponse + Send + Sync + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handler: Handler = Arc::new(move |req: &Request<Incoming>| {
        let (code, content_type, body) = routes(req.uri().path());
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        resp
    });
    tokio::spawn(http_serve::serve(listener, Limits::default(), connections, handler));
    Ok(bound)
}
