//! The public handle: starting the HTTP server, building clients, and driving the store from
//! test code.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_openapi::api::{core, events};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::record::RequestRecord;
use crate::resource::ResourceType;
use crate::store::{Key, Store, Termination};

/// A k8s-openapi object type the server can store: any `k8s_openapi::Resource` that
/// serializes (every generated type does). Implemented automatically.
pub trait ApiObject: k8s_openapi::Resource<Scope: 'static> + Serialize + DeserializeOwned {}

impl<K> ApiObject for K where K: k8s_openapi::Resource<Scope: 'static> + Serialize + DeserializeOwned {}

/// An in-memory Kubernetes API server on `127.0.0.1`, speaking the real list/watch protocol
/// over plain HTTP.
///
/// Cloning is cheap and shares the server. It serves until [`TestApiServer::shutdown`] is
/// called or the last clone is dropped.
///
/// Served from the start: core/v1 Services, Nodes, Namespaces and Events,
/// discovery.k8s.io/v1 EndpointSlices, networking.k8s.io/v1 ServiceCIDRs and
/// events.k8s.io/v1 Events. Any other k8s-openapi type becomes served once it is passed to
/// [`TestApiServer::apply`] or [`TestApiServer::serve`].
#[derive(Clone)]
pub struct TestApiServer {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    /// Served over HTTPS ([`TestApiServer::start_tls`]).
    tls: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        stop(&self.store, &self.shutdown);
    }
}

fn stop(store: &Store, shutdown: &watch::Sender<bool>) {
    store.end_watches(Termination::Abort);
    shutdown.send_replace(true);
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer").field("addr", &self.inner.addr).finish_non_exhaustive()
    }
}

impl TestApiServer {
    /// Binds `127.0.0.1:0` and serves in a spawned tokio task.
    ///
    /// Must be called within a tokio runtime; the server lives in that runtime.
    pub async fn start() -> std::io::Result<TestApiServer> {
        Self::start_on("127.0.0.1:0".parse().expect("a socket address")).await
    }

    /// Starts a server listening on `addr` (for clients in other network namespaces: bind an
    /// address of the namespace the calling thread is in).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<TestApiServer> {
        Self::listen(addr, None).await
    }

    /// [`TestApiServer::start`] over HTTPS, as a real API server: the certificate is for
    /// `127.0.0.1`, `::1` and `localhost`, signed by [`TestApiServer::TLS_CA_PEM`].
    pub async fn start_tls() -> std::io::Result<TestApiServer> {
        Self::start_tls_on("127.0.0.1:0".parse().expect("a socket address")).await
    }

    /// [`TestApiServer::start_on`] over HTTPS.
    pub async fn start_tls_on(addr: SocketAddr) -> std::io::Result<TestApiServer> {
        Self::listen(addr, Some(crate::tls::acceptor())).await
    }

    async fn listen(addr: SocketAddr, tls: Option<TlsAcceptor>) -> std::io::Result<TestApiServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::new());
        let (shutdown, stopped) = watch::channel(false);
        let inner = Inner { store: store.clone(), addr, shutdown, tls: tls.is_some() };
        tokio::spawn(accept_loop(listener, store, addr, tls, stopped));
        Ok(TestApiServer { inner: Arc::new(inner) })
    }

    /// The CA a client of [`TestApiServer::start_tls`] trusts, PEM (a pod's `ca.crt`).
    pub const TLS_CA_PEM: &str = crate::tls::CA_PEM;

    /// The base URL, `http://ADDRESS:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.inner.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.inner.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// A `kube::Client` talking to this server (plain HTTP, no auth, default namespace
    /// `default`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (kube's client spawns a task).
    pub fn client(&self) -> kube::Client {
        let url = self.url().parse().expect("the server URL is a valid URI");
        let mut config = kube::Config::new(url);
        if self.inner.tls {
            config.root_cert = Some(vec![crate::tls::ca_der()]);
        }
        kube::Client::try_from(config).expect("a kube config with no credentials always builds")
    }

    /// Writes a kubeconfig pointing at this server (no credentials, namespace `default`),
    /// e.g. for spawning the real agent with `--kubeconfig`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        // JSON is valid YAML, so this needs no YAML serializer.
        let mut cluster = json!({"server": self.url()});
        if self.inner.tls {
            cluster["certificate-authority-data"] = data_encoding::BASE64.encode(crate::tls::CA_PEM.as_bytes()).into();
        }
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "verdict-testapi", "cluster": cluster}],
            "users": [{"name": "verdict-testapi", "user": {}}],
            "contexts": [{
                "name": "verdict-testapi",
                "context": {"cluster": "verdict-testapi", "user": "verdict-testapi", "namespace": "default"},
            }],
            "current-context": "verdict-testapi",
        });
        std::fs::write(path, serde_json::to_string_pretty(&config).expect("JSON values serialize"))
    }

    /// Stops serving: aborts open watches, closes connections and stops accepting new ones.
    /// Clients then get connection errors. Also happens when the last clone is dropped.
    pub fn shutdown(&self) {
        stop(&self.inner.store, &self.inner.shutdown);
    }

    // ---- store access ------------------------------------------------------------------

    /// Makes `K` served even while no object of it exists (so lists and watches of it work).
    pub fn serve<K: ApiObject>(&self) {
        self.inner.store.ensure_type(ResourceType::of::<K>());
    }

    /// Creates or replaces an object (by namespace and name), as if some other client wrote
    /// it: watches see `ADDED` or `MODIFIED`. Returns the new resourceVersion.
    ///
    /// The server fills in `resourceVersion`, and on creation `uid`, `creationTimestamp` and
    /// `generation` (kept on replacement; `generation` is bumped when the spec changes). A
    /// namespaced object without a namespace goes to `default`.
    ///
    /// # Panics
    ///
    /// If the object has no `metadata.name`.
    pub fn apply<K: ApiObject>(&self, obj: K) -> u64 {
        let ty = ResourceType::of::<K>();
        let value = serde_json::to_value(&obj).expect("k8s-openapi objects serialize");
        let name = value["metadata"]["name"].as_str().expect("apply: the object needs metadata.name").to_string();
        let namespace = value["metadata"]["namespace"].as_str().map(str::to_string);
        let key = object_key(&ty, namespace.as_deref(), &name);
        let idx = self.inner.store.ensure_type(ty);
        let stored = self.inner.store.write(idx, key, value, None, None).expect("an unconditional upsert cannot fail");
        parse_rv(&stored)
    }

    /// Deletes an object: watches see `DELETED`. Returns the deletion's resourceVersion, or
    /// `None` if there was no such object. `namespace` is ignored for cluster-scoped types
    /// and defaults to `default` for namespaced ones.
    pub fn delete<K: ApiObject>(&self, namespace: Option<&str>, name: &str) -> Option<u64> {
        let ty = ResourceType::of::<K>();
        let key = object_key(&ty, namespace, name);
        let idx = self.inner.store.ensure_type(ty);
        self.inner.store.delete(idx, &key, None).ok().map(|gone| parse_rv(&gone))
    }

    /// One object as currently stored (same namespace rules as [`TestApiServer::delete`]).
    pub fn get<K: ApiObject>(&self, namespace: Option<&str>, name: &str) -> Option<K> {
        let ty = ResourceType::of::<K>();
        let key = object_key(&ty, namespace, name);
        let idx = self.inner.store.ensure_type(ty);
        self.inner.store.get(idx, &key).map(|v| serde_json::from_value(v).expect("stored objects deserialize"))
    }

    /// Every stored object of type `K`, all namespaces, ordered by namespace and name.
    pub fn list<K: ApiObject>(&self) -> Vec<K> {
        let idx = self.inner.store.ensure_type(ResourceType::of::<K>());
        self.inner
            .store
            .all(idx)
            .into_iter()
            .map(|v| serde_json::from_value(v).expect("stored objects deserialize"))
            .collect()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.store.current_rv()
    }

    /// Events (events.k8s.io/v1 and core/v1 `Event` objects, as currently stored, so a
    /// patched event shows its latest `series`) in creation order.
    pub fn events(&self) -> Vec<Value> {
        let store = &self.inner.store;
        let types = [ResourceType::of::<events::v1::Event>(), ResourceType::of::<core::v1::Event>()];
        let idx: Vec<usize> = types.into_iter().map(|t| store.ensure_type(t)).collect();
        store.all_by_creation(&idx)
    }

    // ---- protocol knobs ----------------------------------------------------------------

    /// Ends every open watch response cleanly (as a server-side timeout would). Clients
    /// re-watch from their last resourceVersion, or relist if the history was compacted.
    pub fn drop_watches(&self) {
        self.inner.store.end_watches(Termination::Close);
    }

    /// Breaks every open watch connection mid-response (as a crash or network failure
    /// would): the client sees a transport error rather than a clean end.
    pub fn break_watches(&self) {
        self.inner.store.end_watches(Termination::Abort);
    }

    /// Forgets the change history up to now: a watch from an older resourceVersion gets an
    /// `ERROR` event with 410 Expired, and an exact list or a continue token from before gets
    /// HTTP 410. Open watches are not affected.
    pub fn compact(&self) {
        self.inner.store.compact();
    }

    /// How often `BOOKMARK` events are sent to watches that allow them (default 1 s). Applies
    /// to open watches from their next bookmark on.
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.inner.store.set_bookmark_interval(interval);
    }

    /// Number of watch responses currently open.
    pub fn open_watches(&self) -> usize {
        self.inner.store.open_watches()
    }

    /// Waits until at least `n` watch responses are open (wrap it in a timeout).
    pub async fn wait_for_watches(&self, n: usize) {
        while self.open_watches() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    // ---- request log -------------------------------------------------------------------

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner.store.requests()
    }

    /// Offers streaming lists (`sendInitialEvents`, the default) or refuses them with 422 as
    /// API servers before Kubernetes 1.27 do.
    pub fn set_streaming_lists(&self, offered: bool) {
        self.inner.store.set_streaming_lists(offered);
    }

    /// Plays a server that stalls: the next list of `K` (a LIST request, or the initial events
    /// of a streaming list) sends half of its body (half its objects), then nothing more,
    /// holding the connection open until the client gives up. Later lists are whole.
    pub fn stall_next_list<K: ApiObject>(&self) {
        let idx = self.inner.store.ensure_type(ResourceType::of::<K>());
        self.inner.store.faults.stall_next_list(idx);
    }

    /// Plays a hostile server: the next watch response of `K` starts with one line of `bytes`
    /// bytes (blanks, then a newline; streamed, never held by the server), then goes on as
    /// usual (in protobuf: a frame whose length says `bytes`). A client that does not bound a
    /// line holds all of it.
    pub fn send_oversized_line<K: ApiObject>(&self, bytes: u64) {
        let idx = self.inner.store.ensure_type(ResourceType::of::<K>());
        self.inner.store.faults.oversize_next_watch(idx, bytes);
    }

    /// Response body bytes sent so far (lists, watch streams, everything), as a measure of
    /// what clients cost the server.
    pub fn bytes_sent(&self) -> u64 {
        self.inner.store.bytes_sent()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.inner.store.clear_requests();
    }
}

fn object_key(ty: &ResourceType, namespace: Option<&str>, name: &str) -> Key {
    let namespace = if ty.namespaced { namespace.unwrap_or("default") } else { "" };
    (namespace.to_string(), name.to_string())
}

fn parse_rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"].as_str().and_then(|rv| rv.parse().ok()).expect("the store stamps a numeric RV")
}

async fn accept_loop(
    listener: TcpListener,
    store: Arc<Store>,
    addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            _ = stopped.wait_for(|&s| s) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("testapi: accept failed: {e}");
                    continue;
                }
            },
        };
        let (store, stopped) = (store.clone(), stopped.clone());
        match tls.clone() {
            None => tokio::spawn(serve_connection(stream, store, addr, stopped)),
            Some(acceptor) => tokio::spawn(async move {
                match acceptor.accept(stream).await {
                    Ok(stream) => serve_connection(stream, store, addr, stopped).await,
                    Err(e) => tracing::debug!("testapi: TLS handshake failed: {e}"),
                }
            }),
        };
    }
}

async fn serve_connection<S>(stream: S, store: Arc<Store>, addr: SocketAddr, mut stopped: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let store = store.clone();
        async move { Ok::<_, Infallible>(crate::http::handle(store, addr, req).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = connection => {
            if let Err(e) = result {
                tracing::debug!("testapi: connection ended: {e}");
            }
        }
        // Dropping the connection closes the socket, mid-response if need be.
        _ = stopped.wait_for(|&s| s) => {}
    }
}
