//! Address families, protocols and CIDRs, parsed the tolerant way Kubernetes needs: the network
//! primitives both verdict's model and its nftables library speak, in a leaf crate of their own.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first.
    pub const ALL: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    /// The family of an address.
    pub fn of(addr: &IpAddr) -> IpFamily {
        match addr {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

/// A transport protocol a Service port can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// SCTP (IP protocol 132).
    Sctp,
}

impl Protocol {
    /// All protocols, in IP protocol number order.
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// The protocol with this IP protocol number, if it is one a Service can use.
    pub fn from_number(n: u8) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.number() == n)
    }

    /// The lower-case name nft and kube-proxy chain names use.
    pub fn lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// Parses the Kubernetes spelling (`TCP`, `UDP`, `SCTP`); an empty string means TCP.
    pub fn parse_k8s(s: &str) -> Option<Protocol> {
        match s {
            "" | "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.lower())
    }
}

/// Why text is not an address (or network) verdict will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Not an address at all.
    #[error("is not an IP address")]
    NotAnAddress,
    /// `::ffff:a.b.c.d`: refused rather than read as IPv4, because the same text would then be
    /// IPv6 to one part of the proxy (an IPv6 set) and IPv4 to another (conntrack, which maps
    /// it back); upstream's strict validation (StrictIPCIDRValidation) refuses it too.
    #[error("is an IPv4-mapped IPv6 address (write the IPv4 address instead)")]
    Ipv4Mapped,
}

/// Parses an IP address the way kube-proxy does: surrounding spaces are ignored and IPv4 octets
/// may carry leading zeros (`172.30.0.041` is `172.30.0.41`, never octal). IPv4-mapped IPv6
/// addresses are refused (see [`AddressError::Ipv4Mapped`]).
pub fn parse_ip_tolerant(s: &str) -> Option<IpAddr> {
    parse_ip_checked(s).ok()
}

/// [`parse_ip_tolerant`], saying why an address is refused.
pub fn parse_ip_checked(s: &str) -> Result<IpAddr, AddressError> {
    check_ip(parse_ip_syntax(s).ok_or(AddressError::NotAnAddress)?)
}

/// `ip` unless it is a form verdict refuses wherever it comes from (text or binary).
pub fn check_ip(ip: IpAddr) -> Result<IpAddr, AddressError> {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Err(AddressError::Ipv4Mapped),
        ip => Ok(ip),
    }
}

/// What an address no Service may claim as an externalIP or load balancer IP is, if it is one:
/// the addresses upstream's API validation refuses for externalIPs (ValidateNonSpecialIP:
/// unspecified, loopback, link-local unicast and multicast), and also every multicast address
/// and the IPv4 broadcast address, which a Service can never own either. `None`: claimable.
pub fn special_address(ip: &IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) if a.is_unspecified() => Some("unspecified"),
        IpAddr::V4(a) if a.is_broadcast() => Some("the broadcast address"),
        IpAddr::V4(a) if a.is_multicast() => Some("multicast"),
        IpAddr::V4(a) if a.is_loopback() => Some("loopback"),
        IpAddr::V4(a) if a.is_link_local() => Some("link-local"),
        IpAddr::V6(a) if a.is_unspecified() => Some("unspecified"),
        IpAddr::V6(a) if a.is_multicast() => Some("multicast"),
        IpAddr::V6(a) if a.is_loopback() => Some("loopback"),
        IpAddr::V6(a) if a.is_unicast_link_local() => Some("link-local"),
        _ => None,
    }
}

/// What an endpoint address the API server refuses in an EndpointSlice is, if it is one: its
/// `ValidateEndpointIP` refuses unspecified, loopback, link-local unicast (169.254.0.0/16,
/// fe80::/10) and link-local multicast (224.0.0.0/24, and IPv6 multicast of link-local
/// scope, ffX2::/16) addresses. Other multicast and the broadcast address pass there, so they
/// pass here. `None`: an endpoint may have it.
pub fn refused_endpoint_address(ip: &IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) if a.is_unspecified() => Some("unspecified"),
        IpAddr::V4(a) if a.is_loopback() => Some("loopback"),
        IpAddr::V4(a) if a.is_link_local() => Some("link-local"),
        IpAddr::V4(a) if a.octets()[..3] == [224, 0, 0] => Some("link-local multicast"),
        IpAddr::V6(a) if a.is_unspecified() => Some("unspecified"),
        IpAddr::V6(a) if a.is_loopback() => Some("loopback"),
        IpAddr::V6(a) if a.is_unicast_link_local() => Some("link-local"),
        IpAddr::V6(a) if a.segments()[0] & 0xff0f == 0xff02 => Some("link-local multicast"),
        _ => None,
    }
}

fn parse_ip_syntax(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = IpAddr::from_str(s) {
        return Some(ip);
    }
    let octets: Vec<&str> = s.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    let mut bytes = [0u8; 4];
    for (slot, octet) in bytes.iter_mut().zip(octets) {
        if octet.is_empty() || octet.len() > 3 || !octet.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = octet.parse().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(bytes)))
}

/// An IP network in canonical form (host bits cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// A network from an address and prefix length; host bits are cleared.
    /// Returns `None` when the prefix is longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix > max {
            return None;
        }
        let addr = match addr {
            IpAddr::V4(a) => {
                let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Some(Cidr { addr, prefix })
    }

    /// A single-address network (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        let prefix = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        Cidr { addr, prefix }
    }

    /// Parses `a.b.c.d/n` or `x::/n`, tolerating spaces and leading zeros as kube-proxy does
    /// (`203.0.113.000/025` is `203.0.113.0/25`). A bare address is a host network.
    /// IPv4-mapped networks (`::ffff:10.0.0.0/104`) are refused, as addresses are.
    pub fn parse_tolerant(s: &str) -> Option<Cidr> {
        Cidr::parse_checked(s).ok()
    }

    /// [`Cidr::parse_tolerant`], saying why a network is refused.
    pub fn parse_checked(s: &str) -> Result<Cidr, AddressError> {
        let s = s.trim();
        match s.split_once('/') {
            None => parse_ip_checked(s).map(Cidr::host),
            Some((addr, len)) => {
                let addr = parse_ip_checked(addr)?;
                let len = len.trim();
                if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(AddressError::NotAnAddress);
                }
                Cidr::new(addr, len.parse().map_err(|_| AddressError::NotAnAddress)?).ok_or(AddressError::NotAnAddress)
            }
        }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The address family.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.addr)
    }

    /// Whether `ip` lies inside this network.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                Cidr::new(*ip, self.prefix).map(|c| c.addr) == Some(self.addr)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        Cidr::parse_tolerant(s).ok_or_else(|| format!("invalid CIDR {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerant_ip_parsing_matches_kube_proxy() {
        assert_eq!(parse_ip_tolerant(" 172.30.0.041 "), Some("172.30.0.41".parse().unwrap()));
        assert_eq!(parse_ip_tolerant("fd00::1"), Some("fd00::1".parse().unwrap()));
        assert_eq!(parse_ip_tolerant("1.2.3"), None);
        assert_eq!(parse_ip_tolerant("1.2.3.256"), None);
        assert_eq!(parse_ip_tolerant("1.2.3.-1"), None);
    }

    #[test]
    fn cidrs_are_canonical_and_tolerant() {
        let c = Cidr::parse_tolerant("203.0.113.000/025").unwrap();
        assert_eq!(c.to_string(), "203.0.113.0/25");
        assert_eq!(Cidr::parse_tolerant("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(Cidr::parse_tolerant("fd00:10::5/64").unwrap().to_string(), "fd00:10::/64");
        assert!(Cidr::parse_tolerant("10.0.0.0/33").is_none());
        assert!(c.contains(&"203.0.113.2".parse().unwrap()));
        assert!(!c.contains(&"203.0.113.130".parse().unwrap()));
        assert!(!c.contains(&"fd00::1".parse().unwrap()));
        assert_eq!(Cidr::parse_tolerant("10.0.0.1").unwrap().prefix(), 32);
    }

    /// One meaning for `::ffff:a.b.c.d`: refused as an address and as a network, from text
    /// and from a parsed value alike; other IPv6 addresses (the IPv4-compatible `::a.b.c.d`
    /// included) are not.
    #[test]
    fn ipv4_mapped_forms_are_refused_everywhere() {
        assert_eq!(parse_ip_checked("::ffff:10.96.0.10"), Err(AddressError::Ipv4Mapped));
        assert_eq!(parse_ip_checked(" ::FFFF:a60:a "), Err(AddressError::Ipv4Mapped));
        assert_eq!(parse_ip_tolerant("::ffff:10.96.0.10"), None);
        assert_eq!(Cidr::parse_checked("::ffff:10.0.0.0/104"), Err(AddressError::Ipv4Mapped));
        assert_eq!(Cidr::parse_tolerant("::ffff:10.0.0.0/104"), None);
        assert_eq!(Cidr::parse_checked("10.0.0.0/x"), Err(AddressError::NotAnAddress));
        let mapped: IpAddr = "::ffff:10.96.0.10".parse().unwrap();
        assert_eq!(check_ip(mapped), Err(AddressError::Ipv4Mapped));
        assert!(parse_ip_checked("::a60:a").is_ok());
        assert!(Cidr::parse_checked("::/0").is_ok());
    }

    #[test]
    fn special_addresses_are_named() {
        let special = |s: &str| special_address(&s.parse().unwrap());
        for (ip, what) in [
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("255.255.255.255", "the broadcast address"),
            ("224.0.0.1", "multicast"),
            ("239.1.2.3", "multicast"),
            ("ff05::1", "multicast"),
            ("127.0.0.53", "loopback"),
            ("::1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
        ] {
            assert_eq!(special(ip), Some(what), "{ip}");
        }
        for ip in ["10.96.0.10", "192.0.2.255", "203.0.113.7", "fd00::1", "2001:db8::1", "223.255.255.255"] {
            assert_eq!(special(ip), None, "{ip}");
        }
    }

    #[test]
    fn refused_endpoint_addresses_are_the_api_servers() {
        let refused = |s: &str| refused_endpoint_address(&s.parse().unwrap());
        for (ip, what) in [
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("169.254.0.1", "link-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("224.0.0.251", "link-local multicast"),
            ("ff02::1", "link-local multicast"),
            ("ff32::1", "link-local multicast"),
        ] {
            assert_eq!(refused(ip), Some(what), "{ip}");
        }
        for ip in ["10.244.0.1", "224.0.1.1", "239.255.255.250", "255.255.255.255", "ff05::2", "fec0::1", "fd00::1"] {
            assert_eq!(refused(ip), None, "{ip}");
        }
    }

    #[test]
    fn protocols_round_trip() {
        for p in Protocol::ALL {
            assert_eq!(Protocol::from_number(p.number()), Some(p));
        }
        assert_eq!(Protocol::parse_k8s(""), Some(Protocol::Tcp));
        assert_eq!(Protocol::parse_k8s("tcp"), None);
    }
}
