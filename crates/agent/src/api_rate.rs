//! kube-proxy's `--kube-api-qps` and `--kube-api-burst` (`clientConnection.qps`, `.burst`):
//! client-go's token bucket, as a layer of the API client. Requests beyond the burst wait for
//! a token, refilled at `qps` per second. verdict's steady traffic is a few long-lived watches
//! (one request each) and Events, so the limit matters where client-go's does: relists after a
//! 410 Gone, and bursts of Events.
//!
//! Each request's wait (zero within the burst) is client-go's
//! `rest_client_rate_limiter_duration_seconds{verb,host}` (see [`crate::rest_metrics`]).

use crate::rest_metrics::{ApiHost, RATE_LIMITER};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The bucket: tokens may go negative, each request reserving one and waiting for its turn.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    burst: f64,
    qps: f64,
    refilled: Instant,
}

impl Bucket {
    /// Reserves a token now; returns how long to wait before using it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.refilled = now;
        self.tokens -= 1.0;
        match self.tokens >= 0.0 {
            true => Duration::ZERO,
            false => Duration::from_secs_f64(-self.tokens / self.qps),
        }
    }
}

/// The layer.
#[derive(Clone, Debug)]
pub struct RateLimitLayer(Arc<Mutex<Bucket>>);

impl RateLimitLayer {
    /// `qps` requests per second after a burst of `burst` (both at least a tiny positive value).
    pub fn new(qps: f64, burst: u32) -> RateLimitLayer {
        let burst = f64::from(burst.max(1));
        let qps = qps.max(0.001);
        RateLimitLayer(Arc::new(Mutex::new(Bucket { tokens: burst, burst, qps, refilled: Instant::now() })))
    }

    fn wait(&self) -> Duration {
        self.0.lock().map(|mut b| b.reserve(Instant::now())).unwrap_or_default()
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited { inner, limit: self.clone() }
    }
}

/// The service: the inner one's future is awaited after the request's turn.
pub struct RateLimited<S> {
    inner: S,
    limit: RateLimitLayer,
}

impl<S, B> tower::Service<hyper::Request<B>> for RateLimited<S>
where
    S: tower::Service<hyper::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let wait = self.limit.wait();
        let host = request.extensions().get::<ApiHost>().map_or(String::new(), |h| h.0.to_string());
        metrics::histogram!(RATE_LIMITER, "verb" => request.method().as_str().to_string(), "host" => host)
            .record(wait.as_secs_f64());
        let response = self.inner.call(request);
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            response.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_qps() {
        let start = Instant::now();
        let mut b = Bucket { tokens: 3.0, burst: 3.0, qps: 2.0, refilled: start };
        let waits: Vec<Duration> = (0..5).map(|_| b.reserve(start)).collect();
        assert_eq!(waits[..3], [Duration::ZERO; 3]);
        assert_eq!(waits[3], Duration::from_millis(500));
        assert_eq!(waits[4], Duration::from_secs(1));
        // Three seconds on, the debt of 2 is paid and the bucket is full again, never fuller.
        let later = start + Duration::from_secs(3);
        let waits: Vec<Duration> = (0..4).map(|_| b.reserve(later)).collect();
        assert_eq!(waits[..3], [Duration::ZERO; 3]);
        assert_eq!(waits[3], Duration::from_millis(500));
    }

    /// Answers with the time the request was answered.
    struct Clock;

    impl tower::Service<hyper::Request<()>> for Clock {
        type Response = Instant;
        type Error = ();
        type Future = Pin<Box<dyn Future<Output = Result<Instant, ()>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: hyper::Request<()>) -> Self::Future {
            Box::pin(async { Ok(Instant::now()) })
        }
    }

    #[tokio::test]
    async fn requests_past_the_burst_wait_their_turn() {
        use tower::{Layer, Service};
        let mut svc = RateLimitLayer::new(20.0, 2).layer(Clock);
        let start = Instant::now();
        let mut done = Vec::new();
        for _ in 0..4 {
            done.push(svc.call(hyper::Request::new(())).await.unwrap() - start);
        }
        assert!(done[1] < Duration::from_millis(20), "the burst goes at once: {done:?}");
        assert!(done[2] >= Duration::from_millis(50) && done[3] >= Duration::from_millis(100), "{done:?}");
    }
}
