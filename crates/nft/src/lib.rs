//! verdict's nftables side: the model rendered as one `inet` table, diffed against what the
//! kernel holds, and programmed over netlink in one atomic transaction.
//!
//! ```text
//! ProxyModel ─render─> Ruleset ─diff(committed)─> Transaction ─netlink─> kernel
//!                         ^                                                  │
//!                         └──────────────────── observe ─────────────────────┘
//! ```
//!
//! Everything but [`netlink`] (and [`observe`], which uses it) is pure.

pub mod coldstart;
pub(crate) mod desired;
pub(crate) mod diff;
pub(crate) mod elements;
pub mod explain;
pub mod kernel;
pub(crate) mod kernel_consts;
pub(crate) mod kernel_expr;
pub(crate) mod lower;
pub mod netlink;
pub mod observe;
pub(crate) mod primitives;
pub(crate) mod raise;
pub mod render;
pub mod rule;
pub mod ruleset;
pub mod snapshot;
pub mod staging;
pub mod state_file;
pub mod text;
pub mod trace;
pub mod transaction;

pub use desired::DesiredTable;
pub use diff::{Plan, diff};
pub use kernel::Kernel;
pub use render::{RenderOptions, render};
pub use ruleset::Ruleset;
pub use staging::{Staged, Staging};
pub use transaction::Transaction;

/// A `HashMap` for the maps the renderer and the desired table consult once per element (a
/// million times in a cold sync at 100k Services): keys are our own set names and element
/// bytes, never chosen by an attacker, so SipHash's flooding resistance buys nothing there and
/// cost a tenth of a render. foldhash, with a fixed seed so that a render does not depend on
/// the process; it replaced a hand-written FxHash at equal speed (docs/benchmarks.md).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
