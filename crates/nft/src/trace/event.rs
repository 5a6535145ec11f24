//! NFT_MSG_TRACE messages (the `nft monitor trace` stream) decoded from bytes, and the packet
//! headers they carry read into a connection's addresses and ports.
//!
//! Pure: the socket that receives them is [`crate::netlink::trace`]. Every length is checked,
//! so a message cut short or malformed is reported, never read past its end.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use verdict_netlink::NLMSG_HDRLEN;
use verdict_netlink::consts::{
    NFNL_SUBSYS_NFTABLES, NFT_MSG_TRACE as MSG_TRACE, NFTA_TRACE_CHAIN as ATTR_CHAIN, NFTA_TRACE_ID as ATTR_ID,
    NFTA_TRACE_IIF as ATTR_IIF, NFTA_TRACE_MARK as ATTR_MARK, NFTA_TRACE_NETWORK_HEADER as ATTR_NETWORK_HEADER,
    NFTA_TRACE_NFPROTO as ATTR_NFPROTO, NFTA_TRACE_OIF as ATTR_OIF, NFTA_TRACE_POLICY as ATTR_POLICY,
    NFTA_TRACE_RULE_HANDLE as ATTR_RULE_HANDLE, NFTA_TRACE_TABLE as ATTR_TABLE,
    NFTA_TRACE_TRANSPORT_HEADER as ATTR_TRANSPORT_HEADER, NFTA_TRACE_TYPE as ATTR_TYPE,
    NFTA_TRACE_VERDICT as ATTR_VERDICT, NFTA_VERDICT_CHAIN as VERDICT_CHAIN, NFTA_VERDICT_CODE as VERDICT_CODE,
};

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A length field points past the end of the data.
    #[error("trace message truncated: {0}")]
    Truncated(&'static str),
    /// A required attribute is missing.
    #[error("trace message without {0}")]
    Missing(&'static str),
    /// An attribute has the wrong size.
    #[error("trace attribute {0} has a bad length")]
    BadLength(&'static str),
}

/// What a trace event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A rule matched (its verdict, `continue` when it only had statements).
    Rule,
    /// The end of a regular chain was reached: back to the caller.
    Return,
    /// The end of a base chain was reached: its policy decided.
    Policy,
    /// A type this decoder does not know.
    Other(u32),
}

/// A verdict as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceVerdict {
    /// NF_ACCEPT, NF_DROP, NFT_CONTINUE, NFT_JUMP, ...
    pub code: i32,
    /// The chain of a jump or goto.
    pub chain: Option<String>,
}

impl std::fmt::Display for TraceVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chain = self.chain.as_deref().unwrap_or("?");
        match self.code {
            0 => f.write_str("drop"),
            1 => f.write_str("accept"),
            -1 => f.write_str("continue"),
            -2 => f.write_str("break"),
            -3 => write!(f, "jump {chain}"),
            -4 => write!(f, "goto {chain}"),
            -5 => f.write_str("return"),
            3 => f.write_str("queue"),
            other => write!(f, "verdict {other}"),
        }
    }
}

/// One trace event: one rule, chain end or policy a traced packet passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The same for every event of one packet (while it stays in one hook path).
    pub id: u32,
    /// What happened.
    pub kind: EventKind,
    /// The table's family (NFPROTO_INET, NFPROTO_IPV4, ...).
    pub family: u8,
    /// The table.
    pub table: String,
    /// The chain.
    pub chain: String,
    /// The rule's handle (rule events).
    pub handle: Option<u64>,
    /// The verdict (rule events and policies).
    pub verdict: Option<TraceVerdict>,
    /// The base chain's policy (policy events).
    pub policy: Option<u32>,
    /// The protocol family of the packet (NFPROTO_IPV4 or NFPROTO_IPV6).
    pub nfproto: Option<u32>,
    /// The network header as the kernel copied it (at most 40 bytes).
    pub network: Option<Vec<u8>>,
    /// The transport header (at most 20 bytes).
    pub transport: Option<Vec<u8>>,
    /// Input and output interface indexes.
    pub iif: Option<u32>,
    /// The output interface index.
    pub oif: Option<u32>,
    /// The packet mark.
    pub mark: Option<u32>,
}

impl TraceEvent {
    /// The connection the packet belongs to, from its headers (as they are at this point:
    /// after a DNAT earlier in the path, the translated destination).
    pub fn tuple(&self) -> Option<Tuple> {
        Tuple::from_headers(self.network.as_deref()?, self.transport.as_deref())
    }
}

/// Addresses and ports of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// Source port (0 without a transport header).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl Tuple {
    /// Reads an IPv4 or IPv6 header and the transport header's ports.
    pub fn from_headers(network: &[u8], transport: Option<&[u8]>) -> Option<Tuple> {
        let (src, dst, proto) = match network.first()? >> 4 {
            4 if network.len() >= 20 => (
                IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&network[12..16]).ok()?)),
                IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&network[16..20]).ok()?)),
                network[9],
            ),
            6 if network.len() >= 40 => (
                IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&network[8..24]).ok()?)),
                IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&network[24..40]).ok()?)),
                network[6],
            ),
            _ => return None,
        };
        let (sport, dport) = match transport {
            Some(t) if t.len() >= 4 => (u16::from_be_bytes([t[0], t[1]]), u16::from_be_bytes([t[2], t[3]])),
            _ => (0, 0),
        };
        Some(Tuple { src, dst, proto, sport, dport })
    }

    /// `10.0.0.5:41234 -> 172.30.0.10:80/tcp`.
    pub fn arrow(&self) -> String {
        format!("{} -> {}/{}", sockaddr(self.src, self.sport), sockaddr(self.dst, self.dport), proto_name(self.proto))
    }
}

/// `IP:PORT` or `[IPv6]:PORT`.
pub fn sockaddr(ip: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

/// `tcp`, `udp`, `sctp` or the number.
pub fn proto_name(proto: u8) -> String {
    match proto {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        1 => "icmp".into(),
        58 => "icmpv6".into(),
        n => n.to_string(),
    }
}

/// The trace events in a datagram; other messages (a multicast socket may carry any
/// nf_tables notification) are skipped.
pub fn decode(datagram: &[u8]) -> Result<Vec<TraceEvent>, DecodeError> {
    let mut out = Vec::new();
    for msg in verdict_netlink::Messages::new(datagram) {
        let msg = msg.map_err(|_| DecodeError::Truncated("netlink message"))?;
        if msg.header.kind == (NFNL_SUBSYS_NFTABLES << 8) | MSG_TRACE {
            out.push(decode_message(msg.bytes)?);
        }
    }
    Ok(out)
}

/// One NFT_MSG_TRACE message, header included.
pub fn decode_message(msg: &[u8]) -> Result<TraceEvent, DecodeError> {
    let body = msg.get(NLMSG_HDRLEN..).ok_or(DecodeError::Truncated("netlink header"))?;
    if body.len() < 4 {
        return Err(DecodeError::Truncated("nfgenmsg"));
    }
    let family = body[0];
    let mut ev = TraceEvent {
        id: 0,
        kind: EventKind::Other(0),
        family,
        table: String::new(),
        chain: String::new(),
        handle: None,
        verdict: None,
        policy: None,
        nfproto: None,
        network: None,
        transport: None,
        iif: None,
        oif: None,
        mark: None,
    };
    let (mut id, mut kind, mut table, mut chain) = (None, None, None, None);
    for attr in attrs(&body[4..]) {
        let (ty, v) = attr?;
        match ty {
            ATTR_TABLE => table = Some(string(v)),
            ATTR_CHAIN => chain = Some(string(v)),
            ATTR_RULE_HANDLE => ev.handle = Some(u64::from_be_bytes(fixed(v, "rule handle")?)),
            ATTR_TYPE => kind = Some(be32(v, "type")?),
            ATTR_VERDICT => ev.verdict = Some(verdict(v)?),
            // An opaque number (the kernel hashes the packet's identity): byte order is moot.
            ATTR_ID => id = Some(be32(v, "id")?),
            ATTR_NETWORK_HEADER => ev.network = Some(v.to_vec()),
            ATTR_TRANSPORT_HEADER => ev.transport = Some(v.to_vec()),
            ATTR_IIF => ev.iif = Some(be32(v, "iif")?),
            ATTR_OIF => ev.oif = Some(be32(v, "oif")?),
            ATTR_MARK => ev.mark = Some(be32(v, "mark")?),
            ATTR_NFPROTO => ev.nfproto = Some(be32(v, "nfproto")?),
            ATTR_POLICY => ev.policy = Some(be32(v, "policy")?),
            _ => {}
        }
    }
    ev.id = id.ok_or(DecodeError::Missing("an id"))?;
    ev.kind = match kind.ok_or(DecodeError::Missing("a type"))? {
        1 => EventKind::Policy,
        2 => EventKind::Return,
        3 => EventKind::Rule,
        n => EventKind::Other(n),
    };
    ev.table = table.ok_or(DecodeError::Missing("a table"))?;
    ev.chain = chain.ok_or(DecodeError::Missing("a chain"))?;
    Ok(ev)
}

fn verdict(nested: &[u8]) -> Result<TraceVerdict, DecodeError> {
    let mut v = TraceVerdict { code: i32::MIN, chain: None };
    for attr in attrs(nested) {
        let (ty, value) = attr?;
        match ty {
            VERDICT_CODE => v.code = i32::from_be_bytes(fixed(value, "verdict code")?),
            VERDICT_CHAIN => v.chain = Some(string(value)),
            _ => {}
        }
    }
    if v.code == i32::MIN {
        return Err(DecodeError::Missing("a verdict code"));
    }
    Ok(v)
}

/// Netlink attributes: (type without the nested/byte-order flags, value).
fn attrs(b: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> {
    verdict_netlink::Attrs::new(b)
        .map(|a| a.map(|a| (a.ty, a.payload)).map_err(|_| DecodeError::Truncated("attribute")))
}

fn fixed<const N: usize>(v: &[u8], what: &'static str) -> Result<[u8; N], DecodeError> {
    v.try_into().map_err(|_| DecodeError::BadLength(what))
}

fn be32(v: &[u8], what: &'static str) -> Result<u32, DecodeError> {
    Ok(u32::from_be_bytes(fixed(v, what)?))
}

fn string(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn attr(out: &mut Vec<u8>, ty: u16, value: &[u8]) {
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&ty.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(verdict_netlink::align(out.len()), 0);
    }

    /// A trace message laid out as the kernel sends it (nf_tables_trace.c): strings with their
    /// NUL, numbers big-endian, the verdict nested.
    pub(crate) fn message(
        id: u32,
        kind: u32,
        chain: &str,
        handle: Option<u64>,
        verdict: Option<(i32, &str)>,
    ) -> Vec<u8> {
        let mut a = Vec::new();
        attr(&mut a, ATTR_TABLE, b"kube-proxy\0");
        attr(&mut a, ATTR_CHAIN, &[chain.as_bytes(), &[0]].concat());
        if let Some(h) = handle {
            attr(&mut a, ATTR_RULE_HANDLE, &h.to_be_bytes());
        }
        attr(&mut a, ATTR_TYPE, &kind.to_be_bytes());
        if let Some((code, target)) = verdict {
            let mut v = Vec::new();
            attr(&mut v, VERDICT_CODE, &code.to_be_bytes());
            if !target.is_empty() {
                attr(&mut v, VERDICT_CHAIN, &[target.as_bytes(), &[0]].concat());
            }
            attr(&mut a, ATTR_VERDICT | 0x8000, &v);
        }
        attr(&mut a, ATTR_ID, &id.to_be_bytes());
        let ip = [0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 1, 1, 172, 30, 0, 41];
        attr(&mut a, ATTR_NETWORK_HEADER, &ip);
        attr(&mut a, ATTR_TRANSPORT_HEADER, &[0xa0, 0x00, 0, 80, 0, 0, 0, 0]);
        attr(&mut a, ATTR_NFPROTO, &2u32.to_be_bytes());
        let len = NLMSG_HDRLEN + 4 + a.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | MSG_TRACE).to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[1, 0, 0, 0]);
        m.extend_from_slice(&a);
        m
    }

    #[test]
    fn a_rule_event_is_decoded() {
        let ev = decode_message(&message(7, 3, "services", Some(12), Some((-4, "endpoints-2")))).unwrap();
        assert_eq!(ev.id, 7);
        assert_eq!(ev.kind, EventKind::Rule);
        assert_eq!((ev.table.as_str(), ev.chain.as_str(), ev.handle), ("kube-proxy", "services", Some(12)));
        assert_eq!(ev.verdict.as_ref().unwrap().to_string(), "goto endpoints-2");
        assert_eq!(ev.nfproto, Some(2));
        assert_eq!(ev.tuple().unwrap().arrow(), "10.0.1.1:40960 -> 172.30.0.41:80/tcp");
    }

    #[test]
    fn several_messages_in_one_datagram_and_other_messages_skipped() {
        let mut other = message(1, 3, "x", None, None);
        other[4] = 6; // NFT_MSG_NEWRULE, not a trace
        let datagram =
            [message(1, 1, "nat-output", None, Some((1, ""))), other, message(2, 2, "firewall-check", None, None)]
                .concat();
        let events = decode(&datagram).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!((events[0].kind, events[1].kind), (EventKind::Policy, EventKind::Return));
        assert_eq!(events[0].verdict.as_ref().unwrap().to_string(), "accept");
    }

    #[test]
    fn truncated_messages_are_errors_not_reads_past_the_end() {
        let m = message(7, 3, "services", Some(12), Some((-3, "services")));
        for cut in [3, NLMSG_HDRLEN - 1, NLMSG_HDRLEN + 2, m.len() - 1] {
            assert!(decode(&m[..cut]).is_err(), "cut at {cut}");
        }
        // The netlink length says the message is whole, but an attribute runs past it.
        let mut lying = m.clone();
        let last = lying.len() - 8;
        lying[last..last + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(decode_message(&lying), Err(DecodeError::Truncated("attribute")));
        // A handle of the wrong size.
        let mut a = Vec::new();
        attr(&mut a, ATTR_RULE_HANDLE, &[1, 2, 3]);
        let mut short = m[..NLMSG_HDRLEN + 4].to_vec();
        short.extend_from_slice(&a);
        assert_eq!(decode_message(&short), Err(DecodeError::BadLength("rule handle")));
    }

    #[test]
    fn messages_without_identity_are_refused() {
        let m = message(7, 3, "services", None, None);
        let without_id: Vec<u8> = {
            // Rebuild without the id attribute.
            let body = &m[NLMSG_HDRLEN + 4..];
            let mut kept = Vec::new();
            for a in attrs(body) {
                let (ty, v) = a.unwrap();
                if ty != ATTR_ID {
                    attr(&mut kept, ty, v);
                }
            }
            [&m[..NLMSG_HDRLEN + 4], &kept[..]].concat()
        };
        assert_eq!(decode_message(&without_id), Err(DecodeError::Missing("an id")));
    }

    #[test]
    fn ipv6_headers_give_a_tuple() {
        let mut h = vec![0x60, 0, 0, 0, 0, 20, 17, 64];
        h.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(&"fd00:10:96::53".parse::<Ipv6Addr>().unwrap().octets());
        let t = Tuple::from_headers(&h, Some(&[0x30, 0x39, 0, 53])).unwrap();
        assert_eq!(t.arrow(), "[fd00::1]:12345 -> [fd00:10:96::53]:53/udp");
        assert_eq!(Tuple::from_headers(&h[..39], None), None, "short IPv6 header");
    }
}
