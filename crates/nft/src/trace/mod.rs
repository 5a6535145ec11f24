//! `verdict trace`: which rules, map entries and verdicts of the kernel's table a real
//! connection passed.
//!
//! [`chains`] are the temporary chains that flag matching new connections for tracing,
//! [`event`] decodes the kernel's trace events, [`path`] groups them into connections and
//! tells each one's path in verdict's terms. The socket that receives the events is
//! [`crate::netlink::trace`].

pub mod chains;
pub mod event;
pub mod path;

pub use chains::{TraceSpec, trace_chains};
pub use event::{TraceEvent, decode};
pub use path::{Collector, Connection, describe};
