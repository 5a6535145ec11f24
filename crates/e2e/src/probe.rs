//! Clients that report what happened to a connection: which backend answered and the source
//! it saw, or whether the connection was refused, timed out or unreachable.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

/// The result of one connection attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An echo server answered.
    Reply(Reply),
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
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            Outcome::Reply(r) => Some(r),
            _ => None,
        }
    }
}

/// What an echo server said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The answering backend's name.
    pub backend: String,
    /// The source address the backend saw.
    pub peer: IpAddr,
}

/// Parses `<name> peer=<ip>:<port>`.
pub fn parse_reply(line: &str) -> Option<Reply> {
    let (name, rest) = line.trim().split_once(" peer=")?;
    let (ip, _port) = rest.rsplit_once(':')?;
    Some(Reply { backend: name.to_string(), peer: ip.parse().ok()? })
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

fn finish(text: std::io::Result<String>) -> Outcome {
    match text {
        Ok(t) => match parse_reply(&t) {
            Some(r) => Outcome::Reply(r),
            None => Outcome::Other(format!("unexpected reply {t:?}")),
        },
        Err(e) => classify(e),
    }
}

/// One TCP connection: connect, read the greeting.
pub fn tcp(addr: SocketAddr, timeout: Duration) -> Outcome {
    let mut s = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return classify(e),
    };
    let _ = s.set_read_timeout(Some(timeout));
    let mut text = String::new();
    finish(s.read_to_string(&mut text).map(|_| text))
}

/// One UDP exchange on a connected socket (so an ICMP error reads as refused).
pub fn udp(addr: SocketAddr, timeout: Duration) -> Outcome {
    let bind: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0".parse().unwrap() } else { "[::]:0".parse().unwrap() };
    let run = || -> std::io::Result<String> {
        let s = UdpSocket::bind(bind)?;
        s.connect(addr)?;
        s.set_read_timeout(Some(timeout))?;
        s.send(b"q")?;
        let mut buf = [0u8; 512];
        let n = s.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    finish(run())
}

/// Whether this kernel can open SCTP sockets.
pub fn sctp_available() -> bool {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::from(132))).is_ok()
}

/// One SCTP association: connect, read the greeting.
pub fn sctp(addr: SocketAddr, timeout: Duration) -> Outcome {
    let domain = if addr.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let run = || -> std::io::Result<String> {
        let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::from(132)))?;
        s.connect_timeout(&addr.into(), timeout)?;
        s.set_read_timeout(Some(timeout))?;
        let mut buf = [0u8; 512];
        let n = (&s).read(&mut buf)?;
        let _ = (&s).write(b"bye");
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    finish(run())
}
