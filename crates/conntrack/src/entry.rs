//! One conntrack entry, as far as the cleanup needs it.

use std::fmt;
use std::net::IpAddr;

/// The address family of a conntrack entry: [`verdict_model::IpFamily`].
pub type Family = verdict_model::IpFamily;

/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;

/// A conntrack entry: its original and reply tuples and its zone.
///
/// For a DNATed flow from a client to a Service, the original tuple is
/// `client:port -> service:port` and the reply tuple is `endpoint:port -> client:port`, so
/// `reply_src` is the endpoint the flow was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Address family (the layer-3 protocol of the entry).
    pub family: Family,
    /// IP protocol number ([`IPPROTO_UDP`], [`IPPROTO_TCP`], ...).
    pub protocol: u8,
    /// Source address of the original direction (the client).
    pub orig_src: IpAddr,
    /// Destination address of the original direction (the address the client sent to).
    pub orig_dst: IpAddr,
    /// Source port of the original direction (0 for protocols without ports).
    pub orig_sport: u16,
    /// Destination port of the original direction (0 for protocols without ports).
    pub orig_dport: u16,
    /// Source address of the reply direction (the endpoint, after DNAT).
    pub reply_src: IpAddr,
    /// Destination address of the reply direction.
    pub reply_dst: IpAddr,
    /// Source port of the reply direction.
    pub reply_sport: u16,
    /// Destination port of the reply direction.
    pub reply_dport: u16,
    /// Conntrack zone (0 is the default zone).
    pub zone: u16,
}

impl fmt::Display for Entry {
    /// `conntrack -L`-like: `udp src=.. dst=.. sport=.. dport=.. src=.. dst=.. sport=.. dport=..`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.protocol {
            IPPROTO_UDP => "udp".to_string(),
            IPPROTO_TCP => "tcp".to_string(),
            n => format!("proto-{n}"),
        };
        write!(
            f,
            "{proto} src={} dst={} sport={} dport={} src={} dst={} sport={} dport={}",
            self.orig_src,
            self.orig_dst,
            self.orig_sport,
            self.orig_dport,
            self.reply_src,
            self.reply_dst,
            self.reply_sport,
            self.reply_dport
        )?;
        if self.zone != 0 {
            write!(f, " zone={}", self.zone)?;
        }
        Ok(())
    }
}
