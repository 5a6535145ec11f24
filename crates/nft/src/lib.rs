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

pub mod desired;
pub mod diff;
pub mod elements;
pub mod explain;
mod fasthash;
pub mod low;
pub mod lower;
pub mod netlink;
pub mod observe;
pub mod raise;
pub mod render;
pub mod rule;
pub mod ruleset;
pub mod snapshot;
pub mod text;
pub mod trace;
pub mod transaction;

pub use desired::DesiredTable;
pub use diff::{Plan, diff};
pub use render::{RenderOptions, render};
pub use ruleset::Ruleset;
pub use transaction::Transaction;
