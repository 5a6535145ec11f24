//! Clients that report what happened to a connection: which backend answered and the source
//! it saw, or whether the connection was refused, timed out or unreachable.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

/// The result of one connection attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An echo server answered.
    Reply(EchoReply),
    /// Connection refused: a TCP reset or an ICMP port-unreachable.
    Refused,
    /// No answer before the timeout (dropped).
    Timeout,
    /// Network or host unreachable.
    Unreachable,
    /// Anything else.
    Other(String),
}

impl Outcome {
    /// The reply, if there was one.
    pub fn reply(&self) -> Option<&EchoReply> {
        match self {
            Outcome::Reply(r) => Some(r),
            _ => None,
        }
    }
}

/// What an echo server said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EchoReply {
    /// The answering backend's name.
    pub backend: String,
    /// The source address the backend saw.
    pub peer: IpAddr,
    /// The source port the backend saw.
    pub peer_port: u16,
    /// The client's own address and port, when the probe knows them.
    pub local: Option<SocketAddr>,
}

impl EchoReply {
    /// Whether the backend saw another source than the client's: masquerading with
    /// `fully-random` changes the port even when the address happens to stay the same (a node
    /// reaching a remote endpoint through its own address).
    pub fn masqueraded(&self) -> bool {
        self.local.is_none_or(|l| l.ip() != self.peer || l.port() != self.peer_port)
    }

    /// Whether what the backend saw agrees with `masquerade` expected. Without masquerading,
    /// conntrack may still pick another source port when a DNATed tuple clashes with an
    /// earlier connection's entry, so only the address counts, except for a client on a node,
    /// whose own address masquerading may keep (there only the port tells).
    pub fn agrees_with(&self, masquerade: bool, client_is_node: bool) -> bool {
        if masquerade || client_is_node {
            self.masqueraded() == masquerade
        } else {
            self.local.is_some_and(|l| l.ip() == self.peer)
        }
    }
}

/// Parses `<name> peer=<ip>:<port>`.
pub fn parse_reply(line: &str) -> Option<EchoReply> {
    let (name, rest) = line.trim().split_once(" peer=")?;
    let (ip, port) = rest.rsplit_once(':')?;
    Some(EchoReply { backend: name.to_string(), peer: ip.parse().ok()?, peer_port: port.parse().ok()?, local: None })
}

fn classify(e: std::io::Error) -> Outcome {
    match e.kind() {
        ErrorKind::ConnectionRefused => Outcome::Refused,
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Outcome::Timeout,
        ErrorKind::NetworkUnreachable | ErrorKind::HostUnreachable => Outcome::Unreachable,
        _ => match e.raw_os_error() {
            Some(113) | Some(101) => Outcome::Unreachable,
            _ => Outcome::Other(e.to_string()),
        },
    }
}

fn finish(text: std::io::Result<(String, SocketAddr)>) -> Outcome {
    match text {
        Ok((t, local)) => match parse_reply(&t) {
            Some(r) => Outcome::Reply(EchoReply { local: Some(local), ..r }),
            None => Outcome::Other(format!("unexpected reply {t:?}")),
        },
        Err(e) => classify(e),
    }
}

fn unspecified(addr: &SocketAddr) -> IpAddr {
    if addr.is_ipv4() { IpAddr::from([0u8; 4]) } else { IpAddr::from([0u16; 8]) }
}

/// One TCP connection: connect, read the greeting.
pub fn tcp(addr: SocketAddr, timeout: Duration) -> Outcome {
    tcp_from(None, addr, timeout)
}

/// One TCP connection from source address `src` (or the one routing picks).
pub fn tcp_from(src: Option<IpAddr>, addr: SocketAddr, timeout: Duration) -> Outcome {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let run = || -> std::io::Result<(String, SocketAddr)> {
        let s = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
        if let Some(src) = src {
            s.bind(&SocketAddr::new(src, 0).into())?;
        }
        s.connect_timeout(&addr.into(), timeout)?;
        let mut s: TcpStream = s.into();
        let local = s.local_addr()?;
        s.set_read_timeout(Some(timeout))?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok((text, local))
    };
    finish(run())
}

/// One UDP exchange on a connected socket (so an ICMP error reads as refused).
pub fn udp(addr: SocketAddr, timeout: Duration) -> Outcome {
    udp_from(None, addr, timeout)
}

/// One UDP exchange from source address `src` (or the one routing picks).
pub fn udp_from(src: Option<IpAddr>, addr: SocketAddr, timeout: Duration) -> Outcome {
    let run = || -> std::io::Result<(String, SocketAddr)> {
        let s = UdpSocket::bind(SocketAddr::new(src.unwrap_or_else(|| unspecified(&addr)), 0))?;
        s.connect(addr)?;
        s.set_read_timeout(Some(timeout))?;
        s.send(b"q")?;
        let mut buf = [0u8; 512];
        let n = s.recv(&mut buf)?;
        Ok((String::from_utf8_lossy(&buf[..n]).into_owned(), s.local_addr()?))
    };
    finish(run())
}

/// Whether this kernel can open SCTP sockets.
pub fn sctp_available() -> bool {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::from(132))).is_ok()
}

/// One SCTP association: connect, read the greeting.
pub fn sctp(addr: SocketAddr, timeout: Duration) -> Outcome {
    sctp_from(None, addr, timeout)
}

/// One SCTP association from source address `src` (or the one routing picks).
pub fn sctp_from(src: Option<IpAddr>, addr: SocketAddr, timeout: Duration) -> Outcome {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let run = || -> std::io::Result<(String, SocketAddr)> {
        let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::from(132)))?;
        if let Some(src) = src {
            s.bind(&SocketAddr::new(src, 0).into())?;
        }
        s.connect_timeout(&addr.into(), timeout)?;
        s.set_read_timeout(Some(timeout))?;
        let mut buf = [0u8; 512];
        let n = (&s).read(&mut buf)?;
        let _ = (&s).write(b"bye");
        let local = s.local_addr()?.as_socket().ok_or_else(|| std::io::Error::other("no local address"))?;
        Ok((String::from_utf8_lossy(&buf[..n]).into_owned(), local))
    };
    finish(run())
}
