//! The trace event stream (`nft monitor trace`): a socket in the nftables trace multicast
//! group. The kernel only builds trace events while somebody listens, and only for packets
//! whose nftrace flag a rule set.

use super::NetlinkError;
use super::sys::{self, Socket};
use crate::trace::event::{DecodeError, TraceEvent, decode};
use std::os::fd::AsFd;
use std::time::Duration;

/// What a read returned.
#[derive(Debug)]
pub enum TraceRead {
    /// Events (possibly none: the wait timed out).
    Events(Vec<TraceEvent>),
    /// The socket overflowed: events were lost.
    Overflow,
    /// A message that could not be decoded.
    Malformed(DecodeError),
}

/// Receives trace events (in the calling thread's network namespace).
pub struct TraceListener {
    sock: Socket,
    buf: Vec<u8>,
}

impl TraceListener {
    /// Joins the trace group; reads wait at most `wait` for an event.
    pub fn open(wait: Duration) -> Result<TraceListener, NetlinkError> {
        let sock = Socket::open().map_err(NetlinkError::Open)?;
        sock.size_buffers(64 * 1024, 8 << 20).map_err(NetlinkError::Open)?;
        let fd = sock.duplicate().map_err(NetlinkError::Open)?;
        let timeout = nix::sys::time::TimeVal::new(
            wait.as_secs() as nix::libc::time_t,
            wait.subsec_micros() as nix::libc::suseconds_t,
        );
        nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)
            .map_err(|e| NetlinkError::Open(e.into()))?;
        sys::set_membership(fd.as_fd(), verdict_netlink::consts::NFNLGRP_NFTRACE, true).map_err(NetlinkError::Open)?;
        Ok(TraceListener { sock, buf: vec![0; 1 << 16] })
    }

    /// The events of the next datagram, or none after the wait.
    pub fn read(&mut self) -> Result<TraceRead, NetlinkError> {
        match self.sock.recv(&mut self.buf, true) {
            Ok(Some(n)) => Ok(match decode(&self.buf[..n]) {
                Ok(events) => TraceRead::Events(events),
                Err(e) => TraceRead::Malformed(e),
            }),
            Ok(None) => Ok(TraceRead::Events(Vec::new())),
            // A signal: a receive with a timeout is never restarted (signal(7)). The caller
            // looks at why it was signalled.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(TraceRead::Events(Vec::new())),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(TraceRead::Overflow),
            Err(e) => Err(NetlinkError::Io(e)),
        }
    }
}
