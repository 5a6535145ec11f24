//! An in-memory Kubernetes API server for testing verdict's controller with the real `kube`
//! client.
//!
//! [`TestApiServer`] listens on `127.0.0.1` and speaks the parts of the API server protocol
//! that kube's `Api`, `watcher`, `reflector` and event `Recorder` use:
//!
//! - one etcd-like, global, monotonically increasing resourceVersion shared by all kinds;
//! - LIST with label and field selectors, `resourceVersion`/`resourceVersionMatch` semantics
//!   and `limit`/`continue` pagination over a consistent snapshot;
//! - JSON, or protobuf for Services, EndpointSlices and Nodes to clients that ask for it
//!   (`Accept: application/vnd.kubernetes.protobuf`);
//! - WATCH as a chunked stream of JSON lines (or protobuf frames), replaying from a resourceVersion, with
//!   bookmarks, `timeoutSeconds`, selector-transition events (an object that stops matching
//!   is `DELETED`), streaming lists (`sendInitialEvents`), and 410 Expired after compaction;
//! - GET, POST, PUT, PATCH (merge / strategic-merge / apply, as JSON merge patches), DELETE;
//! - `Status` error bodies with the real codes and reasons; discovery (`/api`, `/apis`,
//!   `/version`);
//! - plain HTTP, or HTTPS with a fixed test certificate ([`TestApiServer::start_tls`]); each
//!   request's `Authorization` header is recorded.
//!
//! Tests change the cluster with [`TestApiServer::apply`] and [`TestApiServer::delete`],
//! disturb clients with [`TestApiServer::drop_watches`], [`TestApiServer::break_watches`] and
//! [`TestApiServer::compact`], play a broken or hostile server with
//! [`TestApiServer::stall_next_list`] and [`TestApiServer::send_oversized_line`], and assert with [`TestApiServer::requests`] and
//! [`TestApiServer::events`].
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use k8s_openapi::api::core::v1::Service;
//! use verdict_testapi::TestApiServer;
//!
//! let server = TestApiServer::start().await?;
//! server.apply(Service {
//!     metadata: kube::api::ObjectMeta { name: Some("web".into()), ..Default::default() },
//!     ..Default::default()
//! });
//! let services: kube::Api<Service> = kube::Api::namespaced(server.client(), "default");
//! let web = services.get("web").await.unwrap();
//! # Ok(())
//! # }
//! ```

mod faults;
mod http;
mod list;
mod output;
mod protobuf;
mod query;
mod record;
mod resource;
mod selector;
mod server;
mod status;
mod store;
mod tls;
mod watch;
mod write;

pub use record::{RequestRecord, Verb};
pub use server::{ApiObject, TestApiServer};
