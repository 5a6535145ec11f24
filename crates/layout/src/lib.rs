//! kube-proxy's table: verdict's model laid out as one nftables `inet` table, the place of
//! upstream's proxier (`pkg/proxy/nftables`) beside its nftables library (knftables, here
//! verdict-nft).
//!
//! ```text
//! ProxyModel ─render─> Ruleset ─(verdict-nft) diff, transaction, netlink─> kernel
//!     │                   ^
//!     └─DesiredTable::update (one Service port at a time)
//! ```
//!
//! This crate knows what a Service, an endpoint and a node are, and which chains, sets and
//! maps they become ([`mod@render`]: the scaffold, per-Service chains, names, counters, port views;
//! [`DesiredTable`]: the same table kept up to date incrementally; [`counts`]: the per-Service
//! connection counters read back). verdict-nft knows nftables and nothing of Kubernetes.

pub mod counts;
pub(crate) mod desired;
pub mod render;

pub use desired::DesiredTable;
pub use render::{RenderOptions, render};

/// A `HashMap` for the maps the renderer and the desired table consult once per element (a
/// million times in a cold sync at 100k Services): keys are our own set names and element
/// bytes, never chosen by an attacker, so SipHash's flooding resistance buys nothing there and
/// cost a tenth of a render. foldhash, with a fixed seed so that a render does not depend on
/// the process; it replaced a hand-written FxHash at equal speed (docs/benchmarks.md).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
