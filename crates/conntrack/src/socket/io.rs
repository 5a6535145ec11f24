//! The raw `AF_NETLINK`/`NETLINK_NETFILTER` socket: open, send one datagram, receive one.

use crate::error::{ConntrackError, Operation};
use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send, setsockopt, socket,
    sockopt,
};
use nix::sys::time::TimeVal;
use std::os::fd::{AsRawFd, OwnedFd};

/// Receive buffer requested from the kernel (capped by `net.core.rmem_max`).
const SOCKET_RCVBUF: usize = 1 << 20;
/// Size of one `recv`: the kernel never builds dump datagrams larger than 32 KiB.
const RECV_BUF: usize = 64 * 1024;
/// How long a `recv` may wait before the operation fails with `EAGAIN`.
const RECV_TIMEOUT_SECS: i64 = 10;

/// An open ctnetlink socket and its receive buffer.
#[derive(Debug)]
pub(crate) struct Channel {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Channel {
    /// Opens and binds a socket in the calling thread's network namespace.
    pub(crate) fn open() -> Result<Channel, ConntrackError> {
        let op = Operation::Open;
        let err = |call| move |errno| ConntrackError::Socket { op, call, errno };
        let fd = socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::NetlinkNetFilter)
            .map_err(err("socket"))?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(err("bind"))?;
        setsockopt(&fd, sockopt::RcvBuf, &SOCKET_RCVBUF).map_err(err("SO_RCVBUF"))?;
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(RECV_TIMEOUT_SECS, 0)).map_err(err("SO_RCVTIMEO"))?;
        Ok(Channel { fd, buf: vec![0; RECV_BUF] })
    }

    /// Sends one datagram (one or more netlink messages) to the kernel.
    pub(crate) fn send(&self, op: Operation, datagram: &[u8]) -> Result<(), ConntrackError> {
        loop {
            match send(self.fd.as_raw_fd(), datagram, MsgFlags::empty()) {
                Ok(n) if n == datagram.len() => return Ok(()),
                Ok(_) => return Err(ConntrackError::Socket { op, call: "sendto", errno: Errno::EMSGSIZE }),
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(ConntrackError::Socket { op, call: "sendto", errno }),
            }
        }
    }

    /// Receives one datagram; a datagram larger than the buffer is an error, never cut short.
    pub(crate) fn recv(&mut self, op: Operation) -> Result<&[u8], ConntrackError> {
        let n = loop {
            match recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::MSG_TRUNC) {
                Ok(n) => break n,
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(ConntrackError::Socket { op, call: "recv", errno }),
            }
        };
        if n > self.buf.len() {
            return Err(ConntrackError::Malformed {
                op,
                detail: format!("a {n}-byte datagram does not fit the {}-byte buffer", self.buf.len()),
            });
        }
        Ok(&self.buf[..n])
    }
}
