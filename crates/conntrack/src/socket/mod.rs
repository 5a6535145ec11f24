//! [`Conntrack`]: a ctnetlink socket that lists and deletes conntrack entries.

mod delete;
mod dump;
mod io;

use crate::entry::{Entry, Family, IPPROTO_UDP};
use crate::error::ConntrackError;
use io::Channel;

// The controller moves the socket between threads and tasks: keep it `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Conntrack>();
};

/// An open ctnetlink socket.
///
/// The socket belongs to the network namespace of the thread that called
/// [`Conntrack::open`], and keeps working there when it is moved to another thread.
#[derive(Debug)]
pub struct Conntrack {
    channel: Channel,
    seq: u32,
    /// Whether dump requests carry a kernel-side protocol filter (dropped if the kernel
    /// refuses it).
    kernel_filter: bool,
    /// Entries the kernel sent in the last dump, before filtering in user space.
    last_dump_size: usize,
}

impl Conntrack {
    /// Opens a ctnetlink socket in the calling thread's network namespace.
    ///
    /// Listing needs no privilege beyond the namespace's; deleting needs `CAP_NET_ADMIN`.
    pub fn open() -> Result<Conntrack, ConntrackError> {
        Ok(Conntrack { channel: Channel::open()?, seq: 0, kernel_filter: true, last_dump_size: 0 })
    }

    /// Lists the UDP conntrack entries of one family (in every zone).
    ///
    /// The kernel filters by family, and by protocol where it supports `CTA_FILTER`
    /// (Linux 5.8+); the result is filtered again here, so it only ever holds UDP entries.
    pub fn udp_entries(&mut self, family: Family) -> Result<Vec<Entry>, ConntrackError> {
        let mut entries = self.dump(family, Some(IPPROTO_UDP))?;
        entries.retain(|e| e.protocol == IPPROTO_UDP && e.family == family);
        Ok(entries)
    }

    /// Lists every conntrack entry of one family, whatever its protocol.
    pub fn entries(&mut self, family: Family) -> Result<Vec<Entry>, ConntrackError> {
        let mut entries = self.dump(family, None)?;
        entries.retain(|e| e.family == family);
        Ok(entries)
    }

    /// Deletes these entries, each by its original tuple and zone, in batches.
    ///
    /// Returns how many the kernel deleted. An entry that is already gone (it expired, or
    /// someone else deleted it) is not an error and is not counted.
    pub fn delete(&mut self, entries: &[Entry]) -> Result<usize, ConntrackError> {
        self.delete_all(entries.iter())
    }

    /// How many entries the kernel sent in the last dump, before filtering in user space.
    ///
    /// After [`Conntrack::udp_entries`] this equals the number of UDP entries returned when
    /// the kernel filtered by protocol, and is larger when it did not.
    pub fn last_dump_size(&self) -> usize {
        self.last_dump_size
    }

    /// The next sequence number (never 0, which the kernel uses for notifications).
    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }
}
