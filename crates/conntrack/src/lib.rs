//! Stale UDP conntrack cleanup, as upstream kube-proxy does it, over ctnetlink in pure Rust.
//!
//! UDP has no connection teardown, so a conntrack entry that was DNATed to an endpoint keeps
//! sending a client's datagrams to that endpoint for as long as the client keeps talking, even
//! after the endpoint is gone. After a sync in which a UDP Service port's endpoints changed,
//! kube-proxy lists the conntrack table and deletes the UDP entries that belong to such a
//! Service port but whose reply source is not one of its current *serving* endpoints. This
//! crate does the same:
//!
//! - [`Conntrack`] is a ctnetlink socket (in the network namespace of the thread that opened
//!   it) that lists a family's UDP entries ([`Conntrack::udp_entries`]) and deletes entries by
//!   their original tuple ([`Conntrack::delete`]);
//! - [`stale_entries`] is the pure selection rule (see its documentation);
//! - [`reconcile`] combines them for both families and returns a [`Report`] for the caller's
//!   `kubeproxy_conntrack_reconciler_*` metrics (this crate records no metrics itself).
//!
//! Nothing here ever flushes the table, and TCP and SCTP entries are never touched.
//!
//! The netlink messages are encoded and decoded here (module `wire`); the socket is a plain
//! `AF_NETLINK`/`NETLINK_NETFILTER` socket from `nix`, so [`Conntrack`] is `Send`.

#![forbid(unsafe_code)]

mod entry;
mod error;
mod reconcile;
mod socket;
mod stale;
mod wire;

pub use entry::{Entry, Family, IPPROTO_TCP, IPPROTO_UDP};
pub use error::{ConntrackError, Errno, Operation};
pub use reconcile::{Report, reconcile};
pub use socket::Conntrack;
pub use stale::{UdpTarget, stale_entries};
