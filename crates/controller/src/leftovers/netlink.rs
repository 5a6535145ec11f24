//! The few netlink requests the ipvs cleanup needs, built and parsed in plain Rust and sent over
//! `mnl`'s safe socket: delete a link by name (rtnetlink), resolve a generic-netlink family,
//! dump and flush IPVS virtual servers.

use nix::errno::Errno;
use std::io;
use verdict_netlink::consts::*;
use verdict_netlink::{Messages, Writer};

/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// The generic-netlink controller's own version of its protocol.
const CTRL_VERSION: u8 = 1;

/// The IPVS generic-netlink family (`IPVS_GENL_NAME`, `IPVS_GENL_VERSION`).
pub(crate) const IPVS_FAMILY: &str = "IPVS";

/// A link request naming the link (index 0: the kernel looks the name up).
fn link_by_name(kind: u16, seq: u32, name: &str) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, kind, NLM_F_ACK, seq);
    w.extend(&[0; IFINFOMSG_LEN]);
    w.put_strz(IFLA_IFNAME, name);
    w.finish();
    buf
}

/// RTM_DELLINK for the link called `name`.
pub(crate) fn del_link_by_name(seq: u32, name: &str) -> Vec<u8> {
    link_by_name(RTM_DELLINK, seq, name)
}

/// RTM_GETLINK for the link called `name`, like `ip link show dev <name>`: one RTM_NEWLINK
/// reply when it exists, ENODEV when not.
pub(crate) fn get_link_by_name(seq: u32, name: &str) -> Vec<u8> {
    link_by_name(RTM_GETLINK, seq, name)
}

/// A generic-netlink message: header, `genlmsghdr` (command, version), then `attrs`.
fn genl_message(kind: u16, flags: u16, seq: u32, cmd: u8, version: u8, attrs: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, kind, flags, seq);
    w.extend(&[cmd, version, 0, 0]);
    attrs(&mut w);
    w.finish();
    buf
}

/// CTRL_CMD_GETFAMILY for the generic-netlink family called `name`.
pub(crate) fn get_family(seq: u32, name: &str) -> Vec<u8> {
    genl_message(GENL_ID_CTRL, NLM_F_ACK, seq, CTRL_CMD_GETFAMILY, CTRL_VERSION, |w| {
        w.put_strz(CTRL_ATTR_FAMILY_NAME, name)
    })
}

/// IPVS_CMD_GET_SERVICE as a dump: one reply per virtual server.
pub(crate) fn ipvs_dump_services(seq: u32, family: u16) -> Vec<u8> {
    genl_message(family, NLM_F_DUMP, seq, IPVS_CMD_GET_SERVICE, IPVS_GENL_VERSION, |_| {})
}

/// IPVS_CMD_FLUSH: delete every virtual server (and its real servers).
pub(crate) fn ipvs_flush(seq: u32, family: u16) -> Vec<u8> {
    genl_message(family, NLM_F_ACK, seq, IPVS_CMD_FLUSH, IPVS_GENL_VERSION, |_| {})
}

/// One received message, as far as these requests care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KernelAnswer {
    /// A data message; its payload (after the netlink header).
    Data(Vec<u8>),
    /// The acknowledgement of a request.
    Ack,
    /// The kernel refused the request.
    Error(Errno),
    /// End of a dump.
    Done,
}

/// Splits a receive buffer into (sequence number, reply) pairs; stops at a malformed message.
pub(crate) fn parse_replies(buf: &[u8]) -> Vec<(u32, KernelAnswer)> {
    let replies = Messages::new(buf).map_while(Result::ok).map(|m| {
        let reply = match m.header.kind {
            NLMSG_DONE => KernelAnswer::Done,
            NLMSG_ERROR => match m.error() {
                Some(e) if e.errno() == 0 => KernelAnswer::Ack,
                Some(e) => KernelAnswer::Error(Errno::from_raw(e.errno())),
                None => KernelAnswer::Error(Errno::EBADMSG),
            },
            _ => KernelAnswer::Data(m.payload().to_vec()),
        };
        (m.header.seq, reply)
    });
    replies.collect()
}

/// The family id in a CTRL_CMD_GETFAMILY reply payload (genl header, then attributes).
pub(crate) fn family_id(payload: &[u8]) -> Option<u16> {
    let attrs = verdict_netlink::Attrs::new(payload.get(4..)?);
    let id = attrs.find_type(CTRL_ATTR_FAMILY_ID)?;
    Some(u16::from_ne_bytes([*id.payload.first()?, *id.payload.get(1)?]))
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    /// The socket failed.
    #[error("netlink I/O failed: {0}")]
    Io(#[from] io::Error),
    /// The kernel answered with an error.
    #[error("{0}")]
    Kernel(Errno),
}

/// A netlink socket (in the calling thread's namespace) for one request at a time.
pub(crate) struct Socket {
    sock: mnl::Socket,
    buf: Vec<u8>,
    seq: u32,
}

const RECV_BUF: usize = 1 << 17;

impl Socket {
    /// Opens and binds a socket on `bus`.
    pub(crate) fn open(bus: mnl::Bus) -> io::Result<Socket> {
        // Headroom so that an aligned receive window always fits.
        Ok(Socket { sock: mnl::Socket::new(bus)?, buf: vec![0; RECV_BUF + 8], seq: 0 })
    }

    /// A fresh sequence number for the next request.
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `msg` (whose sequence number is `seq`) and returns the data replies to it, up to
    /// its acknowledgement or the end of the dump.
    pub(crate) fn request(&mut self, msg: &[u8], seq: u32) -> Result<Vec<Vec<u8>>, RequestError> {
        self.sock.send(msg)?;
        let mut data = Vec::new();
        loop {
            // mnl wants the receive buffer aligned like a netlink header.
            let start = self.buf.as_ptr().align_offset(4);
            let window = &mut self.buf[start..start + RECV_BUF];
            let n = self.sock.recv_raw(window)?;
            if n == 0 {
                return Err(RequestError::Io(io::Error::from(io::ErrorKind::UnexpectedEof)));
            }
            for (reply_seq, reply) in parse_replies(&window[..n]) {
                if reply_seq != seq {
                    continue; // a late reply to an earlier request
                }
                match reply {
                    KernelAnswer::Data(payload) => data.push(payload),
                    KernelAnswer::Ack | KernelAnswer::Done => return Ok(data),
                    KernelAnswer::Error(errno) => return Err(RequestError::Kernel(errno)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(buf: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes([buf[at], buf[at + 1]])
    }

    fn u32_at(buf: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
    }

    #[test]
    fn dellink_is_an_ifinfomsg_with_the_name_like_ip_link_del() {
        // `ip link del kube-ipvs0` without an index: header (16), ifinfomsg (16, all zero),
        // IFLA_IFNAME (4 + "kube-ipvs0\0" = 15, padded to 16).
        let msg = del_link_by_name(9, "kube-ipvs0");
        assert_eq!(msg.len(), 48);
        assert_eq!(u32_at(&msg, 0), 48);
        assert_eq!(u16_at(&msg, 4), 17, "RTM_DELLINK");
        assert_eq!(u16_at(&msg, 6), 0x5, "NLM_F_REQUEST | NLM_F_ACK");
        assert_eq!(u32_at(&msg, 8), 9);
        assert_eq!(&msg[16..32], &[0; 16]);
        assert_eq!(u16_at(&msg, 32), 15);
        assert_eq!(u16_at(&msg, 34), 3, "IFLA_IFNAME");
        assert_eq!(&msg[36..47], b"kube-ipvs0\0");
        assert_eq!(msg[47], 0, "padding");
    }

    #[test]
    fn getlink_is_the_same_request_as_dellink_but_its_type() {
        let get = get_link_by_name(9, "kube-ipvs0");
        let del = del_link_by_name(9, "kube-ipvs0");
        assert_eq!(u16_at(&get, 4), 18, "RTM_GETLINK");
        assert_eq!(u16_at(&get, 6), 0x5, "NLM_F_REQUEST | NLM_F_ACK: no dump of every link");
        assert_eq!(get[..4], del[..4]);
        assert_eq!(get[8..], del[8..]);
    }

    #[test]
    fn getfamily_asks_the_controller_by_name() {
        let msg = get_family(1, IPVS_FAMILY);
        // header 16 + genlmsghdr 4 + attribute 4 + "IPVS\0" (9, padded to 12).
        assert_eq!(msg.len(), 32);
        assert_eq!(u32_at(&msg, 0), 32, "attribute padding counts, as with libmnl");
        assert_eq!(u16_at(&msg, 4), 0x10, "GENL_ID_CTRL");
        assert_eq!(u16_at(&msg, 6), 0x5);
        assert_eq!(&msg[16..20], &[3, 1, 0, 0], "CTRL_CMD_GETFAMILY, version 1");
        assert_eq!(u16_at(&msg, 20), 9);
        assert_eq!(u16_at(&msg, 22), 2, "CTRL_ATTR_FAMILY_NAME");
        assert_eq!(&msg[24..29], b"IPVS\0");
    }

    #[test]
    fn ipvs_requests_use_the_resolved_family() {
        let dump = ipvs_dump_services(4, 0x25);
        assert_eq!(dump.len(), 20);
        assert_eq!(u16_at(&dump, 4), 0x25);
        assert_eq!(u16_at(&dump, 6), 0x301, "NLM_F_REQUEST | NLM_F_DUMP, no ACK");
        assert_eq!(&dump[16..20], &[4, 1, 0, 0], "IPVS_CMD_GET_SERVICE, version 1");
        let flush = ipvs_flush(5, 0x25);
        assert_eq!(u16_at(&flush, 6), 0x5);
        assert_eq!(&flush[16..20], &[17, 1, 0, 0], "IPVS_CMD_FLUSH");
    }

    fn reply(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = Writer::new(&mut buf, kind, 0, seq);
        w.extend(payload);
        w.finish();
        buf.resize(verdict_netlink::align(buf.len()), 0);
        buf
    }

    /// Appends a NUL-terminated string attribute (padded).
    fn put_str_attr(buf: &mut Vec<u8>, kind: u16, value: &str) {
        let len = 4 + value.len() + 1;
        buf.extend_from_slice(&(len as u16).to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(value.as_bytes());
        buf.push(0);
        buf.resize(buf.len() + verdict_netlink::align(len) - len, 0);
    }

    #[test]
    fn parses_acks_errors_data_and_done() {
        let mut buf = Vec::new();
        let mut ack = 0i32.to_ne_bytes().to_vec();
        ack.extend_from_slice(&[0; 16]);
        buf.extend(reply(NLMSG_ERROR, 1, &ack));
        let mut enodev = (-19i32).to_ne_bytes().to_vec();
        enodev.extend_from_slice(&[0; 16]);
        buf.extend(reply(NLMSG_ERROR, 2, &enodev));
        buf.extend(reply(0x25, 3, &[4, 1, 0, 0, 1, 2])); // padded to 24
        buf.extend(reply(NLMSG_DONE, 3, &0i32.to_ne_bytes()));
        buf.extend_from_slice(&[1, 2, 3]); // a truncated tail is ignored
        assert_eq!(
            parse_replies(&buf),
            [
                (1, KernelAnswer::Ack),
                (2, KernelAnswer::Error(Errno::ENODEV)),
                (3, KernelAnswer::Data(vec![4, 1, 0, 0, 1, 2])),
                (3, KernelAnswer::Done),
            ]
        );
    }

    #[test]
    fn finds_the_family_id_among_the_attributes() {
        // genlmsghdr, CTRL_ATTR_FAMILY_NAME "IPVS", CTRL_ATTR_FAMILY_ID 0x25, CTRL_ATTR_VERSION.
        let mut payload = vec![1, 2, 0, 0];
        put_str_attr(&mut payload, CTRL_ATTR_FAMILY_NAME, "IPVS");
        payload.extend_from_slice(&6u16.to_ne_bytes());
        payload.extend_from_slice(&CTRL_ATTR_FAMILY_ID.to_ne_bytes());
        payload.extend_from_slice(&0x25u16.to_ne_bytes());
        payload.extend_from_slice(&[0, 0]);
        payload.extend_from_slice(&8u16.to_ne_bytes());
        payload.extend_from_slice(&3u16.to_ne_bytes());
        payload.extend_from_slice(&1u32.to_ne_bytes());
        assert_eq!(family_id(&payload), Some(0x25));
        assert_eq!(family_id(&payload[..12]), None, "no id attribute");
        assert_eq!(family_id(&[1, 2, 0, 0, 200, 0, 1, 0]), None, "attribute overruns the message");
    }
}
