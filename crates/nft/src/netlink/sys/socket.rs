//! The netfilter netlink socket (libmnl's), its options, and multicast group membership.

use nftnl::nftnl_sys::libc;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use verdict_netlink::consts::{
    NETLINK_ADD_MEMBERSHIP, NETLINK_CAP_ACK, NETLINK_DROP_MEMBERSHIP, NETLINK_EXT_ACK, SOL_NETLINK,
};

/// A netfilter netlink socket, bound in the network namespace of the thread that opened it.
pub(crate) struct Socket {
    inner: mnl::Socket,
}

// SAFETY: an mnl_socket is a heap struct holding a socket fd and its port id; libmnl keeps no
// thread-local state and the socket's network namespace is fixed when it is created, so moving
// it to another thread is sound. It is not `Sync`: only one thread uses it at a time.
unsafe impl Send for Socket {}

impl Socket {
    pub(crate) fn open() -> io::Result<Socket> {
        let inner = mnl::Socket::new(mnl::Bus::Netfilter)?;
        let sock = Socket { inner };
        // Error replies without the echoed request (small, so many fit) but with the kernel's
        // explanation when it has one.
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)?;
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)?;
        Ok(sock)
    }

    fn setsockopt(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: the fd is open for the socket's lifetime; value is a plain int passed by
        // pointer with its size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Sizes the socket buffers: a whole batch must fit into the send buffer, or the kernel
    /// refuses it (EMSGSIZE). The `FORCE` variants need CAP_NET_ADMIN, which programming
    /// nftables needs anyway; without it the plain variants are tried.
    pub(crate) fn size_buffers(&self, send: usize, recv: usize) -> io::Result<()> {
        let clamp = |n: usize| libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
        self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, clamp(send))
            .or_else(|_| self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUF, clamp(send)))?;
        self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, clamp(recv))
            .or_else(|_| self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, clamp(recv)))
    }

    /// Sends the whole buffer with one system call: nfnetlink only commits a batch whose begin
    /// and end arrive in the same send.
    pub(crate) fn send(&self, buf: &[u8]) -> io::Result<()> {
        let sent = self.inner.send(buf)?;
        if sent != buf.len() {
            return Err(io::Error::other(format!("netlink send was cut short: {sent} of {} bytes", buf.len())));
        }
        Ok(())
    }

    /// Receives one datagram; `None` when nothing is queued and `wait` is false.
    pub(crate) fn recv(&self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        let flags = if wait { nix::sys::socket::MsgFlags::empty() } else { nix::sys::socket::MsgFlags::MSG_DONTWAIT };
        match nix::sys::socket::recv(self.fd(), buf, flags) {
            Ok(n) => Ok(Some(n)),
            Err(nix::errno::Errno::EAGAIN) => Ok(None),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    /// Receives one datagram as [`Socket::recv`] does, but returns its whole length
    /// (`MSG_TRUNC`): a length above `buf.len()` means the datagram was cut short to fit and
    /// its tail is gone.
    pub(crate) fn recv_whole(&self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        let mut flags = nix::sys::socket::MsgFlags::MSG_TRUNC;
        if !wait {
            flags |= nix::sys::socket::MsgFlags::MSG_DONTWAIT;
        }
        match nix::sys::socket::recv(self.fd(), buf, flags) {
            Ok(n) => Ok(Some(n)),
            Err(nix::errno::Errno::EAGAIN) => Ok(None),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    fn fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }

    /// A second descriptor of the same socket, for changing its group memberships from
    /// another thread while this one waits in `recv`.
    pub(crate) fn duplicate(&self) -> io::Result<std::os::fd::OwnedFd> {
        // SAFETY: the fd is open for as long as `self` lives, which outlasts this borrow.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) };
        borrowed.try_clone_to_owned()
    }
}

/// Joins or leaves a netlink multicast group on the socket behind `fd`.
pub(crate) fn set_membership(fd: std::os::fd::BorrowedFd<'_>, group: u32, join: bool) -> io::Result<()> {
    let name = if join { NETLINK_ADD_MEMBERSHIP } else { NETLINK_DROP_MEMBERSHIP };
    // SAFETY: `fd` is a borrowed, open socket; the value is a u32 passed by pointer with its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_NETLINK,
            name,
            (&group as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
