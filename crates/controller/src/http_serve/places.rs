//! Who holds a connection to verdict's HTTP listeners: one table for every listener of the
//! process, so that connections, whichever port they reach, stay within the files the process
//! may open, and a new connection is never the one that loses.
//!
//! When the table is full, a new connection takes the place of a held one: the least recently
//! active connection of the source that holds the most (a source is an IPv4 address or an IPv6
//! /64). One source holds at most [`Caps::per_source`] places; beyond that its own least
//! recently active connection makes room. The node's own clients (a connection from loopback,
//! or from the address it reaches: kubelet's probes, a node-local agent) have a share of
//! [`Caps::own`] places that no other connection ever takes.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// Files kept for the agent's own work (netlink and API sockets, manifests, the state file)
/// when places are sized from the open-file limit.
pub const RESERVED_FILES: u64 = 128;

/// The most places, however many files the process may open: each holds a few KiB of buffers.
const MAX_TOTAL: usize = 1024;

/// The fewest places, however few files the process may open.
const MIN_TOTAL: usize = 8;

/// The most places one source, and the node's own clients, hold.
const MAX_SHARE: usize = 64;

/// How often a full table is logged as a warning (in between, at debug level).
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How many connections are held at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Connections held at once, over every listener.
    pub total: usize,
    /// Connections one source (an IPv4 address, an IPv6 /64) holds at once.
    pub per_source: usize,
    /// Places kept for the node's own clients: others never take them.
    pub own: usize,
    /// Files the listeners' sockets and their connections may use together (`None`: no
    /// bound but `total`); each open listener leaves one place fewer.
    pub files: Option<usize>,
}

impl Caps {
    /// Caps for a process that may open `open_files` files: what is left after
    /// [`RESERVED_FILES`], at most 1,024 connections (and at least 8).
    pub fn for_open_files(open_files: u64) -> Caps {
        let files = usize::try_from(open_files.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX);
        let total = files.clamp(MIN_TOTAL, MAX_TOTAL);
        Caps {
            total,
            per_source: (total / 8).clamp(1, MAX_SHARE),
            own: (total / 4).clamp(1, MAX_SHARE),
            files: Some(files),
        }
    }
}

impl Default for Caps {
    /// The caps under the usual soft limit of 1,024 open files.
    fn default() -> Self {
        Caps::for_open_files(1024)
    }
}

/// Where a connection comes from, as far as shares go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    V4(std::net::Ipv4Addr),
    /// The first 64 bits: one host may use a whole /64.
    V6(u64),
}

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V4(a) => Source::V4(a),
            IpAddr::V6(a) => Source::V6((u128::from(a) >> 64) as u64),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::V4(a) => write!(f, "{a}"),
            Source::V6(p) => write!(f, "{}/64", Ipv6Addr::from(u128::from(*p) << 64)),
        }
    }
}

/// Whether a connection from `peer` reaching `local` is the node's own: from loopback, or
/// from the very address it reaches (the kernel picks that source for a local destination;
/// it refuses packets from outside that claim a local source).
pub fn is_own(peer: SocketAddr, local: Option<SocketAddr>) -> bool {
    let peer = peer.ip().to_canonical();
    peer.is_loopback() || local.is_some_and(|l| l.ip().to_canonical() == peer)
}

struct Entry {
    source: Source,
    own: bool,
    /// When it was accepted, or last answered a request (ms since the table's epoch).
    active: Arc<AtomicU64>,
    /// `None` until its task is spawned (a moment after admission).
    abort: Option<AbortHandle>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    entries: HashMap<u64, Entry>,
    /// Connections closed to make room whose sockets are not closed yet (their tasks end at
    /// their next poll): they still hold a file each.
    closing: HashSet<u64>,
    per_source: HashMap<Source, usize>,
    own: usize,
    listeners: usize,
    last_warned: Option<Instant>,
}

impl Table {
    /// Sockets open: served, and closing.
    fn open(&self) -> usize {
        self.entries.len() + self.closing.len()
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        if entry.own {
            self.own -= 1;
        } else if let Some(n) = self.per_source.get_mut(&entry.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&entry.source);
            }
        }
        Some(entry)
    }

    /// The least recently active connection for which `pick` holds and whose task runs, with
    /// a rank before age (higher first).
    fn victim(&self, pick: impl Fn(&Entry) -> bool, rank: impl Fn(&Entry) -> usize) -> Option<u64> {
        self.entries
            .iter()
            .filter(|(_, e)| e.abort.is_some() && pick(e))
            .max_by_key(|(id, e)| {
                (rank(e), std::cmp::Reverse(e.active.load(Ordering::Relaxed)), std::cmp::Reverse(**id))
            })
            .map(|(id, _)| *id)
    }
}

/// The connections of every listener of the process, shared by [`super::serve`].
pub struct Connections {
    caps: Caps,
    epoch: Instant,
    table: Mutex<Table>,
    /// Told when a socket is closed.
    freed: Notify,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections").field("caps", &self.caps).field("held", &self.held()).finish()
    }
}

/// What admission decided.
pub(super) enum Admission {
    /// Served, in this place; the connection that made room for it, if any, is closed.
    Admitted(Place),
    /// Every place is the node's own and this connection is not: closed.
    Refused,
}

/// A connection's place, given back when dropped (with the connection).
pub struct Place {
    connections: Arc<Connections>,
    id: u64,
    active: Arc<AtomicU64>,
}

impl Place {
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// Marks the connection active now (it was answered).
    pub(super) fn touch(&self) {
        self.active.store(self.connections.now(), Ordering::Relaxed);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut table = self.connections.lock();
        if table.remove(self.id).is_none() {
            table.closing.remove(&self.id);
        }
        drop(table);
        self.connections.freed.notify_waiters();
    }
}

/// A listener's socket, counted against [`Caps::files`] while it is open.
pub(super) struct Listening(Arc<Connections>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.lock().listeners -= 1;
    }
}

impl Connections {
    /// A table with these caps.
    pub fn new(caps: Caps) -> Arc<Connections> {
        Arc::new(Connections { caps, epoch: Instant::now(), table: Mutex::new(Table::default()), freed: Notify::new() })
    }

    /// The caps it was made with.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        self.lock().entries.len()
    }

    /// How many connections may be held now: [`Caps::total`], less one for each open
    /// listener when files are bounded.
    pub fn capacity(&self) -> usize {
        Self::capacity_of(self.caps, &self.lock())
    }

    fn capacity_of(caps: Caps, table: &Table) -> usize {
        let files = caps.files.map_or(usize::MAX, |f| f.saturating_sub(table.listeners));
        caps.total.min(files).max(MIN_TOTAL.min(caps.total))
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Waits until a new connection can be accepted without going over the capacity: while
    /// it is reached and connections closed to make room still hold their sockets (a moment).
    /// Meanwhile new connections wait in the listener's backlog, holding no file.
    pub(super) async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let table = self.lock();
                if table.closing.is_empty() || table.open() < Self::capacity_of(self.caps, &table) {
                    return;
                }
            }
            freed.await;
        }
    }

    pub(super) fn listening(self: &Arc<Self>) -> Listening {
        self.lock().listeners += 1;
        Listening(self.clone())
    }

    /// Gives a new connection from `peer` (the node's own when `own`) a place, closing the
    /// connection it takes the place of.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr, own: bool) -> Admission {
        let source = Source::of(peer);
        let mut table = self.lock();
        let capacity = Self::capacity_of(self.caps, &table);
        let full = table.open() >= capacity;
        let others_victim = |t: &Table| t.victim(|e| !e.own, |e| t.per_source.get(&e.source).copied().unwrap_or(0));
        let victim = if own {
            if table.own >= self.caps.own || (full && table.own == table.entries.len()) {
                table.victim(|e| e.own, |_| 0)
            } else if full {
                others_victim(&table)
            } else {
                None
            }
        } else if table.per_source.get(&source).copied().unwrap_or(0) >= self.caps.per_source {
            table.victim(|e| !e.own && e.source == source, |_| 0)
        } else if full {
            match others_victim(&table) {
                Some(v) => Some(v),
                None if table.entries.values().all(|e| e.own) => return Admission::Refused,
                // Only connections whose tasks are starting now: over by one, a moment.
                None => None,
            }
        } else {
            None
        };
        let mut close = None;
        if let Some(id) = victim
            && let Some(evicted) = table.remove(id)
        {
            table.closing.insert(id);
            self.note_eviction(&mut table, evicted.source, peer, capacity);
            close = evicted.abort;
        }
        let id = table.next_id;
        table.next_id += 1;
        let active = Arc::new(AtomicU64::new(self.now()));
        table.entries.insert(id, Entry { source, own, active: active.clone(), abort: None });
        if own {
            table.own += 1;
        } else {
            *table.per_source.entry(source).or_default() += 1;
        }
        // Outside the lock: the closed connection gives its place back when its task ends.
        drop(table);
        if let Some(abort) = close {
            abort.abort();
        }
        Admission::Admitted(Place { connections: self.clone(), id, active })
    }

    /// Records the task serving `place`'s connection, so that it can be closed to make room.
    pub(super) fn started(&self, place_id: u64, abort: AbortHandle) {
        let mut table = self.lock();
        match table.entries.get_mut(&place_id) {
            Some(entry) => entry.abort = Some(abort),
            // Already made room for another.
            None => {
                drop(table);
                abort.abort();
            }
        }
    }

    fn note_eviction(&self, table: &mut Table, evicted: Source, peer: IpAddr, capacity: usize) {
        metrics::counter!(crate::metrics::HTTP_EVICTIONS).increment(1);
        let holding = table.per_source.get(&evicted).copied().unwrap_or(0) + 1;
        let now = Instant::now();
        if table.last_warned.is_none_or(|t| now.duration_since(t) >= WARN_EVERY) {
            table.last_warned = Some(now);
            tracing::warn!(
                capacity,
                "HTTP connections at their cap: closing the least recently active one of {evicted} \
                 (which held {holding}) for a new one from {peer}; logged once a minute"
            );
        } else {
            tracing::debug!(%evicted, %peer, "HTTP connections at their cap: closed one to make room");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Admits `peer` and gives its place a (never started) task, so that it can be evicted;
    /// returns the place and whether the task was aborted later, via the handle.
    fn admit(
        rt: &tokio::runtime::Runtime,
        c: &Arc<Connections>,
        peer: &str,
        own: bool,
    ) -> Option<(Place, AbortHandle)> {
        match c.admit(ip(peer), own) {
            Admission::Refused => None,
            Admission::Admitted(place) => {
                let task = rt.spawn(std::future::pending::<()>());
                let handle = task.abort_handle();
                c.started(place.id(), handle.clone());
                Some((place, handle))
            }
        }
    }

    fn caps(total: usize, per_source: usize, own: usize) -> Caps {
        Caps { total, per_source, own, files: None }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().unwrap()
    }

    fn aborted(rt: &tokio::runtime::Runtime, h: &AbortHandle) -> bool {
        rt.block_on(tokio::task::yield_now());
        h.is_finished()
    }

    #[test]
    fn a_new_connection_takes_the_place_of_the_heaviest_sources_least_recently_active() {
        let rt = runtime();
        let c = Connections::new(caps(4, 3, 1));
        let a1 = admit(&rt, &c, "10.0.0.1", false).unwrap();
        let a2 = admit(&rt, &c, "10.0.0.1", false).unwrap();
        let b1 = admit(&rt, &c, "10.0.0.2", false).unwrap();
        let a3 = admit(&rt, &c, "10.0.0.1", false).unwrap();
        // a1 answered a request: a2 is now 10.0.0.1's least recently active.
        std::thread::sleep(Duration::from_millis(5));
        a1.0.touch();
        let _c1 = admit(&rt, &c, "10.0.0.3", false).unwrap();
        assert!(aborted(&rt, &a2.1), "10.0.0.1 held the most: its least recently active goes");
        assert!(!aborted(&rt, &a1.1) && !aborted(&rt, &b1.1) && !aborted(&rt, &a3.1));
        assert_eq!(c.held(), 4);
    }

    #[test]
    fn one_source_only_ever_displaces_itself_beyond_its_share() {
        let rt = runtime();
        let c = Connections::new(caps(10, 2, 1));
        let other = admit(&rt, &c, "10.0.0.9", false).unwrap();
        let first = admit(&rt, &c, "2001:db8::1", false).unwrap();
        let second = admit(&rt, &c, "2001:db8::2", false).unwrap();
        // Another address of the same /64 is the same source.
        let _third = admit(&rt, &c, "2001:db8::3", false).unwrap();
        assert!(aborted(&rt, &first.1));
        assert!(!aborted(&rt, &second.1) && !aborted(&rt, &other.1));
        assert_eq!(c.held(), 3);
    }

    #[test]
    fn the_nodes_own_places_are_never_taken_by_others() {
        let rt = runtime();
        let c = Connections::new(caps(3, 3, 2));
        let own1 = admit(&rt, &c, "127.0.0.1", true).unwrap();
        let own2 = admit(&rt, &c, "192.0.2.1", true).unwrap();
        let other = admit(&rt, &c, "10.0.0.1", false).unwrap();
        let other2 = admit(&rt, &c, "10.0.0.2", false).unwrap();
        assert!(aborted(&rt, &other.1), "others make room among themselves");
        assert!(!aborted(&rt, &own1.1) && !aborted(&rt, &own2.1));
        // Beyond their share, own connections displace their own least recently active.
        let own3 = admit(&rt, &c, "127.0.0.1", true).unwrap();
        assert!(aborted(&rt, &own1.1));
        assert!(!aborted(&rt, &other2.1) && !aborted(&rt, &own3.1));
    }

    #[test]
    fn when_every_place_is_the_nodes_own_another_connection_is_refused() {
        let rt = runtime();
        let c = Connections::new(caps(2, 2, 2));
        let _own1 = admit(&rt, &c, "127.0.0.1", true).unwrap();
        let _own2 = admit(&rt, &c, "127.0.0.1", true).unwrap();
        assert!(admit(&rt, &c, "10.0.0.1", false).is_none());
        assert_eq!(c.held(), 2);
    }

    #[test]
    fn places_are_given_back_and_listeners_count_against_files() {
        let rt = runtime();
        let c = Connections::new(Caps { files: Some(10), ..caps(10, 10, 2) });
        let held = admit(&rt, &c, "10.0.0.1", false).unwrap();
        assert_eq!(c.held(), 1);
        drop(held);
        assert_eq!(c.held(), 0);
        let listeners: Vec<Listening> = (0..3).map(|_| c.listening()).collect();
        assert_eq!(c.capacity(), 8);
        drop(listeners);
        assert_eq!(c.capacity(), 10);
    }

    #[test]
    fn no_connection_is_accepted_while_those_closed_for_room_still_hold_their_sockets() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let c = Connections::new(caps(2, 2, 1));
        let (first, _) = admit(&rt, &c, "10.0.0.1", false).unwrap();
        let _second = admit(&rt, &c, "10.0.0.2", false).unwrap();
        let room = |c: &Arc<Connections>| {
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(20), c.room()).await.is_ok() })
        };
        // At the cap with nothing closing: room (the next one makes its own, by closing one).
        assert!(room(&c));
        let _third = admit(&rt, &c, "10.0.0.3", false).unwrap();
        assert_eq!(c.held(), 2);
        // `first` was closed for it, but its socket is open until its task is dropped.
        assert!(!room(&c));
        drop(first);
        assert!(room(&c));
    }

    #[test]
    fn caps_follow_the_open_file_limit() {
        assert_eq!(Caps::for_open_files(256), Caps { total: 128, per_source: 16, own: 32, files: Some(128) });
        let large = Caps::for_open_files(1 << 20);
        assert_eq!((large.total, large.per_source, large.own), (1024, 64, 64));
        assert_eq!(Caps::for_open_files(100).total, 8);
        assert_eq!(Caps::default().total, 896);
    }

    #[test]
    fn own_connections_are_from_loopback_or_from_the_address_reached() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(is_own(sa("127.0.0.5:4000"), Some(sa("192.0.2.1:10256"))));
        assert!(is_own(sa("[::1]:4000"), Some(sa("[::1]:10256"))));
        assert!(is_own(sa("192.0.2.1:4000"), Some(sa("192.0.2.1:10256"))));
        assert!(!is_own(sa("192.0.2.9:4000"), Some(sa("192.0.2.1:10256"))));
        assert!(!is_own(sa("192.0.2.9:4000"), None));
    }
}
