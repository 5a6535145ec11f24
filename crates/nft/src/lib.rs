//! An nftables library: a table as a [`Ruleset`] of chains, rules, sets and flowtables, diffed
//! against what the kernel holds and programmed over netlink in one atomic transaction.
//!
//! ```text
//! Ruleset ─diff(committed)─> Transaction ─netlink─> kernel
//!    ^                                                │
//!    └───────────────────── observe ──────────────────┘
//! ```
//!
//! It knows nftables, not Kubernetes: which table to write (Services, endpoints, nodes) is
//! verdict-layout's business. Everything but [`netlink`] (and [`observe`], which uses it) is
//! pure.

pub mod coldstart;
pub mod diff;
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
pub mod rule;
pub mod ruleset;
pub mod snapshot;
pub mod staging;
pub mod state_file;
pub mod text;
pub mod trace;
pub mod transaction;

pub use diff::{Plan, diff};
pub use kernel::Kernel;
pub use ruleset::Ruleset;
pub use staging::{Staged, Staging};
pub use transaction::Transaction;

/// A rule as the kernel hands it back: lowered to kernel expressions and raised again (`None`:
/// not a shape this library reads back). Every rule the [`rule`] vocabulary builds survives the
/// trip unchanged; users that build rules check theirs with it.
pub fn round_trip(rule: &rule::Rule) -> Option<rule::Rule> {
    raise::raise(&lower::lower(rule)).ok()
}
