//! The fast path's interfaces: which of the node's links the flowtable holds
//! (`--flowtable-interfaces`), and a watcher that tells the sync loop when that set changes, as
//! pods come and go and their veths with them.
//!
//! The sync loop joins and removes the devices in transactions of their own (see
//! [`verdict_nft::Transaction::flowtable_devices`]): a veth that vanishes between the listing
//! and the commit fails that small transaction, never a Service change.

use crate::event::Event;
use crate::leftovers::netlink::{RequestError, Socket};
use std::collections::BTreeSet;
use std::sync::mpsc::SyncSender;
use verdict_netlink::consts::{IFLA_IFNAME, NLM_F_DUMP, RTM_GETLINK};
use verdict_netlink::{Attrs, Writer};

/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// `RTMGRP_LINK`: link notices.
const RTMGRP_LINK: u32 = nix::libc::RTMGRP_LINK as u32;

/// Interface names and name prefixes (`veth*`), as `--flowtable-interfaces` gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterfacePatterns {
    exact: BTreeSet<String>,
    prefixes: BTreeSet<String>,
}

/// Why a pattern is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatternError {
    /// Longer than an interface name can be (15 bytes).
    #[error("{0:?} is longer than an interface name (15 bytes)")]
    TooLong(String),
    /// A `*` anywhere but at the end, or a character no interface name has.
    #[error("{0:?} is not an interface name or a prefix ending in `*` (such as `veth*`)")]
    Invalid(String),
}

impl InterfacePatterns {
    /// Parses names and prefixes; empty entries are skipped.
    pub fn parse<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<InterfacePatterns, PatternError> {
        let mut out = InterfacePatterns::default();
        for p in patterns.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let (name, prefix) = match p.strip_suffix('*') {
                Some(stem) => (stem, true),
                None => (p, false),
            };
            if name.len() > 15 {
                return Err(PatternError::TooLong(p.to_string()));
            }
            let bad = |c: char| c == '*' || c == '/' || c.is_whitespace() || c.is_control();
            if name.contains(bad) || (name.is_empty() && !prefix) {
                return Err(PatternError::Invalid(p.to_string()));
            }
            if prefix {
                out.prefixes.insert(name.to_string());
            } else {
                out.exact.insert(name.to_string());
            }
        }
        Ok(out)
    }

    /// Whether no interface can match.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    /// Whether `name` matches (the loopback never does: the flowtable forwards, and nothing is
    /// forwarded from `lo`).
    pub fn matches(&self, name: &str) -> bool {
        name != "lo" && (self.exact.contains(name) || self.prefixes.iter().any(|p| name.starts_with(p.as_str())))
    }

    /// The names of `links` that match.
    pub fn select(&self, links: &[String]) -> BTreeSet<String> {
        links.iter().filter(|l| self.matches(l)).cloned().collect()
    }
}

impl std::fmt::Display for InterfacePatterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> =
            self.exact.iter().cloned().chain(self.prefixes.iter().map(|p| format!("{p}*"))).collect();
        f.write_str(&all.join(","))
    }
}

/// The names of every link of the calling thread's network namespace.
pub fn links() -> std::io::Result<Vec<String>> {
    let mut sock = Socket::open(mnl::Bus::Route)?;
    let seq = sock.next_seq();
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf, RTM_GETLINK, NLM_F_DUMP, seq);
    w.extend(&[0; IFINFOMSG_LEN]);
    w.finish();
    let replies = sock.request(&buf, seq).map_err(|e| match e {
        RequestError::Io(e) => e,
        RequestError::Kernel(errno) => std::io::Error::from(errno),
    })?;
    Ok(replies.iter().filter_map(|payload| link_name(payload)).collect())
}

/// IFLA_IFNAME of an RTM_NEWLINK payload.
fn link_name(payload: &[u8]) -> Option<String> {
    Attrs::new(payload.get(IFINFOMSG_LEN..)?).find_type(IFLA_IFNAME)?.str().map(str::to_string)
}

/// Watches the namespace's links from a thread of its own: sends the matching names at once,
/// and again whenever they change, until the sync loop is gone. Call it from a thread in the
/// node's network namespace: the thread it starts inherits it.
pub fn watch(patterns: InterfacePatterns, events: SyncSender<Event>) -> std::io::Result<()> {
    std::thread::Builder::new().name("fast-path-links".into()).spawn(move || {
        if let Err(e) = watch_links(&patterns, &events) {
            tracing::warn!("the fast path's link watcher stopped; new interfaces will not join the flowtable: {e}");
        }
    })?;
    Ok(())
}

fn watch_links(patterns: &InterfacePatterns, events: &SyncSender<Event>) -> std::io::Result<()> {
    // Subscribed before the first listing, so that no link appears unseen between the two.
    let notices = mnl::Socket::open(mnl::Bus::Route)?;
    // Port id 0: the kernel picks one (MNL_SOCKET_AUTOPID).
    notices.bind(RTMGRP_LINK, 0)?;
    let mut current = None;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let now = patterns.select(&links()?);
        if current.as_ref() != Some(&now) {
            current = Some(now.clone());
            if events.send(Event::FastPathDevices(now)).is_err() {
                return Ok(());
            }
        }
        // Any notice (or an overflow, which loses some) means: list again. Pods come and go
        // a few at a time, and a listing of a few hundred links is cheap.
        if let Err(e) = notices.recv_raw(&mut buf)
            && e.raw_os_error() != Some(nix::libc::ENOBUFS)
        {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixes_match_as_written_and_the_loopback_never() {
        let p = InterfacePatterns::parse("eth0, veth*,cni0,,lxc*".split(',')).unwrap();
        assert!(p.matches("eth0") && p.matches("veth1a2b") && p.matches("cni0") && p.matches("lxc_health"));
        assert!(!p.matches("eth1") && !p.matches("ve") && !p.matches("cni0x") && !p.matches("lo"));
        assert_eq!(p.to_string(), "cni0,eth0,lxc*,veth*");
        let all = InterfacePatterns::parse(["*"]).unwrap();
        assert!(all.matches("anything") && !all.matches("lo"));
        let links: Vec<String> = ["lo", "eth0", "veth9", "docker0"].map(String::from).to_vec();
        assert_eq!(p.select(&links), ["eth0", "veth9"].map(String::from).into_iter().collect());
    }

    #[test]
    fn patterns_no_interface_can_have_are_refused() {
        for bad in ["ve*th", "a/b", "sixteen-letters!", "**"] {
            assert!(InterfacePatterns::parse([bad]).is_err(), "{bad}");
        }
        assert!(InterfacePatterns::parse(["", " "]).unwrap().is_empty());
    }
}
