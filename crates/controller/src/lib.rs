//! verdict's controller: where Kubernetes objects come from (the API server, or a directory of
//! manifests), the model kept from them, and the one sync loop that programs the table.
//!
//! ```text
//!  kube watchers ─┐                                    ┌─> ModelCache ─changed ports─> DesiredTable ─> Netlink
//!                 ├── Event (std channel) ──> SyncLoop ┤
//!  manifests dir ─┘                                    └─> health, metrics, problem notices (Events)
//! ```

pub mod conntrack;
pub mod decode;
pub mod dir;
pub mod drift;
pub mod event;
pub mod family_metrics;
pub mod fast_path;
pub mod firewalls;
pub mod foreign_proxy;
pub mod health;
pub mod http_serve;
pub mod leftovers;
mod manifest_objects;
pub mod manifests;
mod manifests_json;
mod manifests_yaml;
pub mod metrics;
mod restart;
pub mod service_health;
pub mod stale_chains;
pub mod sync;
pub mod translate;
pub mod watch;
