//! Netlink framing for verdict, in safe Rust: the one place that knows how a netlink message,
//! an attribute and an error reply are laid out.
//!
//! nftables (besides what libnftnl builds), ctnetlink and the leftover cleanup's rtnetlink and
//! generic-netlink requests all speak the same framing; each used to carry its own copy. This
//! crate holds it once:
//!
//! - [`Messages`] splits a received datagram into [`Message`]s; [`Message::error`] decodes an
//!   `NLMSG_ERROR` reply, its extended-ack text included;
//! - [`Attrs`] walks a run of attributes (and, through [`Attr::nested`], nests);
//! - [`Writer`] appends one message, with nested attributes, to a buffer;
//! - [`consts`] has the kernel's numbers: from `libc` where it has them, typed by hand (and
//!   named after their header) where it does not.
//!
//! Malformed input is an [`Malformed`] error, never a read past the end: callers that only
//! want what is well-formed stop at the first error (`map_while(Result::ok)`).
//!
//! Sockets are not here: nftables uses libmnl's, conntrack `nix`'s, so that this crate stays
//! free of I/O and of `unsafe`.

mod attr;
pub mod consts;
mod frame;
mod write;

pub use attr::{Attr, Attrs, align};
pub use frame::{ErrorReply, Header, Message, Messages, NLMSG_HDRLEN};
pub use write::{Nest, Writer};

/// Why bytes could not be read as netlink: what was cut short or claimed too much.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Fewer bytes remain than a header needs.
    #[error("{left} trailing bytes after the last {what}")]
    Trailing {
        /// "message" or "attribute".
        what: &'static str,
        /// How many bytes were left.
        left: usize,
    },
    /// A message's length is shorter than its header or longer than the bytes received.
    #[error("message claims {claims} bytes, {left} received")]
    Message {
        /// The message's `nlmsg_len`.
        claims: usize,
        /// Bytes left from its start.
        left: usize,
    },
    /// An attribute's length is shorter than its header or longer than the bytes left.
    #[error("attribute {ty} claims {claims} bytes, {left} left")]
    Attribute {
        /// The attribute's type.
        ty: u16,
        /// Its `nla_len`.
        claims: usize,
        /// Bytes left from its start.
        left: usize,
    },
    /// An attribute's payload has the wrong size for its type.
    #[error("attribute {ty} has {len} bytes, expected {expected}")]
    Size {
        /// The attribute's type.
        ty: u16,
        /// Its payload's size.
        len: usize,
        /// The size its type has.
        expected: usize,
    },
}

#[cfg(test)]
mod tests;
