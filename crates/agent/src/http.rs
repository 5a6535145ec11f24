//! The two HTTP endpoints kube-proxy has: metrics (`/metrics`, `/proxyMode`, `/healthz`) on
//! 127.0.0.1:10249 and health (`/healthz`, `/livez`) on 0.0.0.0:10256.

use crate::counters::CounterReader;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use verdict_controller::health::{HealthReport, ProxyHealth};
use verdict_controller::metrics as m;

/// An answer: status, content type, body.
pub type Reply = (u16, &'static str, String);

fn health(report: HealthReport, counter: &'static str) -> Reply {
    metrics::counter!(counter, "code" => report.code.to_string()).increment(1);
    (report.code, "application/json", report.body)
}

/// Routes of the metrics address.
pub fn metrics_routes(
    prom: PrometheusHandle,
    health_state: Arc<ProxyHealth>,
    counters: Option<CounterReader>,
) -> impl Fn(&str) -> Reply + Send + Sync + 'static {
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
pub fn health_routes(health_state: Arc<ProxyHealth>) -> impl Fn(&str) -> Reply + Send + Sync + 'static {
    move |path| match path {
        "/healthz" => health(health_state.healthz(), m::HEALTHZ_TOTAL),
        "/livez" => health(health_state.livez(), m::LIVEZ_TOTAL),
        _ => (404, "text/plain; charset=utf-8", "404 page not found\n".into()),
    }
}

/// Binds now (so a taken port fails the start), serves in the background.
pub async fn serve(
    addr: SocketAddr,
    routes: impl Fn(&str) -> Reply + Send + Sync + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let routes = Arc::new(routes);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let routes = routes.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let (code, content_type, body) = routes(req.uri().path());
                    async move {
                        Response::builder()
                            .status(code)
                            .header("Content-Type", content_type)
                            .header("X-Content-Type-Options", "nosniff")
                            .body(Full::new(Bytes::from(body)))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok(bound)
}
