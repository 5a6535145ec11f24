//! The two HTTP endpoints kube-proxy has: metrics (`/metrics`, `/proxyMode`, `/configz`,
//! `/metrics/slis`, and component-base's `/healthz`) on 127.0.0.1:10249 and health
//! (`/healthz`, `/livez`: the proxy's health as JSON) on 0.0.0.0:10256.

use crate::counters::CounterReader;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use hyper::{Request, Response, StatusCode, body::Incoming};
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// component-base's health checks of the metrics address (`/healthz`: its one check, `ping`,
/// always passes) and their SLI metrics (`/metrics/slis`).
#[derive(Debug, Default)]
pub struct Slis {
    pings: AtomicU64,
}

impl Slis {
    /// component-base's `/healthz` answer, observed.
    fn healthz(&self) -> RouteResponse {
        self.pings.fetch_add(1, Ordering::Relaxed);
        (200, "text/plain; charset=utf-8", "ok".into())
    }

    /// component-base's `/metrics/slis`: the last result of each check (1: passed) and the
    /// results counted.
    pub fn render(&self) -> String {
        format!(
            "# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.\n\
             # TYPE kubernetes_healthcheck gauge\n\
             kubernetes_healthcheck{{name=\"ping\",type=\"healthz\"}} 1\n\
             # HELP kubernetes_healthchecks_total [STABLE] This metric records the results of all healthcheck.\n\
             # TYPE kubernetes_healthchecks_total counter\n\
             kubernetes_healthchecks_total{{name=\"ping\",status=\"error\",type=\"healthz\"}} 0\n\
             kubernetes_healthchecks_total{{name=\"ping\",status=\"success\",type=\"healthz\"}} {}\n",
            self.pings.load(Ordering::Relaxed)
        )
    }
}

/// Routes of the metrics address; `configz` is the configuration in effect as JSON.
pub fn metrics_routes(
    prom: PrometheusHandle,
    counters: Option<CounterReader>,
    configz: String,
) -> impl Fn(&str) -> RouteResponse + Send + Sync + 'static {
    let slis = Slis::default();
    move |path| match path {
        "/metrics" => {
            let mut text = prom.render();
            crate::process_metrics::render_into(&mut text);
            crate::process_metrics::conntrack_into(&mut text);
            if let Some(c) = &counters {
                c.render_into(&mut text);
            }
            (200, "text/plain; version=0.0.4", text)
        }
        "/proxyMode" => (200, "text/plain; charset=utf-8", "nftables".into()),
        // kube-proxy's metrics address serves component-base's healthz, not the proxy's.
        "/healthz" | "/healthz/ping" => slis.healthz(),
        "/metrics/slis" => (200, "text/plain; version=0.0.4", slis.render()),
        "/configz" => (200, "application/json", configz.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_bases_healthz_and_its_slis() {
        let slis = Slis::default();
        assert!(
            slis.render()
                .contains("kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 0\n")
        );
        assert_eq!(slis.healthz(), (200, "text/plain; charset=utf-8", "ok".to_string()));
        slis.healthz();
        let text = slis.render();
        assert!(
            text.contains("kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1\n"), "{text}");
    }
}
