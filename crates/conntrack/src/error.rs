//! Typed errors: which operation failed, at which step, and with which errno.

use std::fmt;
use thiserror::Error;

pub use nix::errno::Errno;

/// The operation of this crate that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Opening the ctnetlink socket.
    Open,
    /// Listing (dumping) a family's conntrack entries.
    Dump(crate::entry::Family),
    /// Deleting conntrack entries.
    Delete,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Open => f.write_str("opening the ctnetlink socket"),
            Operation::Dump(family) => write!(f, "listing {family} conntrack entries"),
            Operation::Delete => f.write_str("deleting conntrack entries"),
        }
    }
}

/// An error of the conntrack cleanup.
#[derive(Debug, Error)]
pub enum ConntrackError {
    /// A socket system call failed.
    #[error("{op}: {call} failed: {errno} ({})", errno.desc())]
    Socket {
        /// What was being done.
        op: Operation,
        /// The system call or socket option, e.g. `"sendto"`, `"recv"`, `"SO_RCVBUF"`.
        call: &'static str,
        /// The error number.
        errno: Errno,
    },
    /// The kernel answered a request with an error (`NLMSG_ERROR`).
    #[error("{op}: the kernel answered {errno} ({})", errno.desc())]
    Kernel {
        /// What was being done.
        op: Operation,
        /// The error number the kernel returned.
        errno: Errno,
    },
    /// The kernel's answer could not be decoded.
    #[error("{op}: malformed netlink reply: {detail}")]
    Malformed {
        /// What was being done.
        op: Operation,
        /// What was wrong with it.
        detail: String,
    },
}

impl ConntrackError {
    /// The operation that failed.
    pub fn operation(&self) -> Operation {
        match self {
            ConntrackError::Socket { op, .. }
            | ConntrackError::Kernel { op, .. }
            | ConntrackError::Malformed { op, .. } => *op,
        }
    }

    /// The error number, if the failure carried one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            ConntrackError::Socket { errno, .. } | ConntrackError::Kernel { errno, .. } => Some(*errno),
            ConntrackError::Malformed { .. } => None,
        }
    }
}
