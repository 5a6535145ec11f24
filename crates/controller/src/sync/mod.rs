//! The one global sync loop: events in, one atomic transaction out per sync.
//!
//! Changes are coalesced: a sync starts at least `min_sync_period` after the previous one
//! ended. Nothing is programmed until every kind has been listed once. A partial sync re-renders
//! only the Service ports that changed (see `verdict_layout::DesiredTable`); a full sync re-renders
//! everything and reconciles against a netlink dump of the kernel's table, which is what
//! happens at start (adopting the table a previous run left, so a restart writes only the
//! difference), after any failed transaction (retried with backoff up to `sync_period`), when
//! the node's facts change, and every `full_sync_period`. As kube-proxy, the loop also syncs
//! `sync_period` after the last sync ended even when nothing changed: a partial sync with
//! nothing to render, which commits nothing (an empty transaction is never sent) but counts in
//! the sync metrics.
//!
//! On kernels before 6.4, and on any kernel once it refuses a chain deletion as busy, chains
//! that go out of use are flushed and deleted a second later in a transaction of their own (see
//! [`crate::stale_chains`]).
//!
//! The loop runs on its own thread: netlink calls block, and a cold sync at 100k Services keeps
//! the kernel busy for a second.

mod fast_path;
mod intake;
mod reconcile;
mod report;
#[cfg(test)]
mod tests;

use crate::event::{Event, Kind, Object};
use crate::health::{ProxyHealth, TO_BE_DELETED_TAINT};
use crate::metrics as m;
use crate::stale_chains::StaleChains;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};
use verdict_layout::{DesiredTable, RenderOptions};
use verdict_model::{ModelCache, ObjectKind, ObjectRef, Problem};
use verdict_nft::Transaction;
use verdict_nft::netlink::monitor::{MonitorGate, generation_after};
use verdict_nft::netlink::{CommitStats, Netlink, NetlinkError};
use verdict_nft::observe::Observed;
use verdict_nft::snapshot::Snapshot;
use verdict_nft::{Kernel, Staged};

/// Timing and naming of the sync loop.
#[derive(Clone, Debug)]
pub struct SyncConfig {
    /// The table (family inet).
    pub table: String,
    /// Minimum time between the end of a sync and the start of the next.
    pub min_sync_period: Duration,
    /// Upper bound of the retry backoff after a failure; the health timeout is twice this.
    pub sync_period: Duration,
    /// How often a full reconcile runs anyway.
    pub full_sync_period: Duration,
    /// Stop after the first sync (success or failure).
    pub once: bool,
    /// Delete chains that go out of use in a later transaction (needed on kernels without the
    /// 6.4 fix; switched on by itself when the kernel refuses a chain deletion as busy).
    pub defer_chain_deletion: bool,
    /// Where the table's state is saved at [`Event::Shutdown`] and adopted from at the next
    /// start (`None`: every start reads the whole table from the kernel).
    pub state_dir: Option<std::path::PathBuf>,
    /// A transaction of this many objects or more is encoded after freed memory is returned
    /// to the kernel (see [`SyncLoop::with_memory_release`]).
    pub release_before_objects: usize,
    /// The opt-in fast path: the table gets a flowtable that established Service connections
    /// are offloaded to, holding the devices [`Event::FastPathDevices`] names.
    pub fast_path: bool,
    /// A plan for a table no packet reaches yet (a cold start, or one interrupted) is sent in
    /// transactions of at most this many objects, the base chains' rules last (see
    /// [`verdict_nft::coldstart`]).
    pub max_transaction_objects: usize,
    /// Set while kube-proxy's rules are still in place because verdict removes them only after
    /// its own first sync: until then they are the proxy being replaced, not another proxy on
    /// the node (see [`crate::foreign_proxy`]), and are not reported as one.
    pub replacing_kube_proxy: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            table: verdict_nft::ruleset::DEFAULT_TABLE.to_string(),
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            full_sync_period: Duration::from_secs(3600),
            once: false,
            defer_chain_deletion: false,
            state_dir: None,
            release_before_objects: RELEASE_BEFORE_OBJECTS,
            fast_path: false,
            max_transaction_objects: verdict_nft::coldstart::MAX_OBJECTS,
            replacing_kube_proxy: None,
        }
    }
}

/// What one sync did (for logs, tests and the benchmark).
#[derive(Clone, Debug)]
pub struct SyncReport {
    /// A full reconcile (everything rendered, the kernel's table read back).
    pub full: bool,
    /// Service ports rendered.
    pub rendered_ports: usize,
    /// Kernel objects written.
    pub objects: usize,
    /// Bytes sent.
    pub bytes: usize,
    /// How long the sync took.
    pub took: Duration,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// For each EndpointSlice change it programmed: the time since its trigger.
    pub programming_latency: Vec<Duration>,
    /// Where the time went.
    pub phases: Phases,
    /// Transactions committed (more than one: a cold start sent in parts, or chains deleted
    /// later).
    pub transactions: usize,
    /// The longest of them in the kernel: from its send to its last reply, while the kernel
    /// holds the nftables commit mutex that every nftables user on the node waits for.
    pub longest_transaction: Duration,
}

impl SyncReport {
    /// Counts a committed transaction.
    pub(super) fn committed(&mut self, stats: &CommitStats) {
        if stats.messages > 0 {
            self.transactions += 1;
            self.longest_transaction = self.longest_transaction.max(Duration::from_micros(stats.kernel_us));
            metrics::histogram!(m::TX_COMMIT).record(stats.kernel_us as f64 / 1e6);
        }
        self.bytes += stats.bytes;
    }
}

/// Where a sync's time went, in the order the phases run (logged with every `synced` line, so
/// an operator can tell a slow kernel from a slow model without a profiler).
#[derive(Clone, Copy, Debug, Default)]
pub struct Phases {
    /// The model rebuilt from the cache (the Services whose objects changed).
    pub model: Duration,
    /// The desired table rendered (all of it for a full sync, the changed ports otherwise).
    pub render: Duration,
    /// What the kernel holds, read back (full syncs).
    pub read: Duration,
    /// The transaction planned: the diff.
    pub plan: Duration,
    /// Encoding the batch and the kernel's commit.
    pub commit: Duration,
}

impl Phases {
    fn ms(d: Duration) -> f64 {
        (d.as_secs_f64() * 10_000.0).round() / 10.0
    }
}

/// Problems of one object, whenever they change (an empty list: resolved). For Events.
#[derive(Clone, Debug, PartialEq)]
pub struct ProblemNotice {
    /// The object.
    pub object: ObjectRef,
    /// Its current problems.
    pub problems: Vec<Problem>,
}

/// Why a sync failed: the kernel's error, typed.
#[derive(Debug, thiserror::Error)]
pub enum SyncFailure {
    /// Reading the table (a full sync) failed.
    #[error("reading the table")]
    Read(#[source] NetlinkError),
    /// The kernel refused the transaction, or its replies were lost.
    #[error(transparent)]
    Commit(NetlinkError),
}

impl SyncFailure {
    /// The failure and its causes, as one line (for logs and [`SyncReport::error`]).
    pub fn line(&self) -> String {
        let mut line = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            line.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        line
    }
}

/// Why `run` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The first (and, with `once`, only) sync failed.
    #[error(transparent)]
    Failed(SyncFailure),
    /// The sources went away before every kind was listed.
    #[error("the sources closed before every kind was listed once")]
    NeverSynced,
}

type Key = (String, String);

/// How many times a full sync reads the table and plans again when another program commits
/// between its read and its commit (as many as a commit is sent again, see
/// [`Netlink::commit`]).
const REPLANS: u32 = 8;

/// Events taken between two model builds ahead of the first sync.
const AHEAD_BATCH: usize = 4096;

/// The default [`SyncConfig::release_before_objects`]: a batch of 100k objects is about 6 MB;
/// at 100k Services the first one is 85 MB.
pub const RELEASE_BEFORE_OBJECTS: usize = 100_000;

/// Work that follows every successful sync and must see the model as programmed
/// (health-check listeners, stale conntrack entries).
pub trait AfterSync: Send {
    /// Called after a successful sync; `changes` are the Service ports it re-rendered (all of
    /// them after a full sync, when `full` is set).
    fn after_sync(&mut self, model: &verdict_model::ProxyModel, full: bool, changes: &[verdict_model::PortChange]);
}

/// The sync loop's state, programming through the kernel `K` (netlink; in tests, memory).
pub struct SyncLoop<K: Kernel = Netlink> {
    cfg: SyncConfig,
    cache: ModelCache,
    nl: K,
    health: Arc<ProxyHealth>,
    table: Option<DesiredTable>,
    stale_chains: StaleChains,
    monitor: Option<MonitorGate>,
    foreign_commit: bool,
    needs_full: bool,
    /// The next full sync must read the kernel's table: at start, after a failure or a change
    /// by another program, and always without a table monitor. Otherwise a full sync
    /// re-renders everything and diffs it against what verdict committed.
    verify_kernel: bool,
    /// Elements saved by the previous run, for the first full sync (see [`crate::restart`]).
    known: Option<(verdict_nft::snapshot::Stamp, verdict_nft::snapshot::Snapshot)>,
    /// The kernel's table as read before the first sync, and the generation it was read at.
    #[allow(clippy::type_complexity)]
    read_ahead: Option<(u32, Result<Option<Observed>, NetlinkError>)>,
    /// The generation at which the last successful full sync read the kernel's table: other
    /// programs' changes up to it are reconciled, and their notices, arriving late (a large
    /// `nft delete table` notifies in many datagrams), need no second reconcile.
    reconciled_through: Option<u32>,
    looked_for_state: bool,
    /// Why the last sync failed, for `run` to return with `once`.
    last_failure: Option<SyncFailure>,
    /// Chains of `verdict trace` runs and their deadlines (seconds since the epoch): removed
    /// when it has passed, if their trace has not removed them (it was killed).
    traces: BTreeMap<String, u64>,
    fast_path: fast_path::FastPathDevices,
    stopping: bool,
    listed: HashSet<Kind>,
    /// What each relist in progress has delivered so far: when it ends, the objects the cache
    /// holds but the relist did not deliver are gone. (The cache is the inventory: a copy of
    /// every object's name here cost 160 bytes per Service.)
    relisting: BTreeMap<Kind, HashSet<Key>>,
    dirty_since: Option<Instant>,
    last_sync_end: Option<Instant>,
    last_full: Instant,
    retry_at: Option<Instant>,
    backoff: Duration,
    triggers: Vec<SystemTime>,
    started: SystemTime,
    pending: crate::family_metrics::PendingChanges,
    source_problems: Vec<Problem>,
    /// Default-drop chains of other tables and other proxies, as problems of the Node (see
    /// [`crate::firewalls`], [`crate::foreign_proxy`]).
    firewall_problems: Vec<Problem>,
    /// Other tables must be looked at again (at start, and after other programs' changes).
    firewalls_due: bool,
    /// The families last reported to have no NodePort address (logged when it changes).
    families_without_nodeports: Vec<verdict_model::IpFamily>,
    published: BTreeMap<ObjectRef, Vec<Problem>>,
    reasons: HashSet<&'static str>,
    reports: Option<Sender<SyncReport>>,
    notices: Option<Box<dyn Fn(ProblemNotice) + Send>>,
    after: Vec<Box<dyn AfterSync>>,
    release: Option<Box<dyn Fn() + Send>>,
}

impl<K: Kernel> SyncLoop<K> {
    /// A loop over `cache`, programming through `nl` (a netlink socket opened in the node's
    /// network namespace).
    pub fn new(cache: ModelCache, nl: K, cfg: SyncConfig, health: Arc<ProxyHealth>) -> SyncLoop<K> {
        let backoff = cfg.min_sync_period.max(Duration::from_millis(100));
        SyncLoop {
            stale_chains: StaleChains::new(cfg.defer_chain_deletion),
            monitor: None,
            foreign_commit: false,
            verify_kernel: true,
            known: None,
            read_ahead: None,
            reconciled_through: None,
            looked_for_state: false,
            last_failure: None,
            traces: BTreeMap::new(),
            fast_path: Default::default(),
            stopping: false,
            cfg,
            cache,
            nl,
            health,
            table: None,
            needs_full: true,
            listed: HashSet::new(),
            relisting: BTreeMap::new(),
            dirty_since: None,
            last_sync_end: None,
            last_full: Instant::now(),
            retry_at: None,
            backoff,
            triggers: Vec::new(),
            started: SystemTime::now(),
            pending: Default::default(),
            source_problems: Vec::new(),
            families_without_nodeports: Vec::new(),
            firewall_problems: Vec::new(),
            firewalls_due: true,
            published: BTreeMap::new(),
            reasons: HashSet::new(),
            reports: None,
            notices: None,
            after: Vec::new(),
            release: None,
        }
    }

    /// Calls `release` before a transaction of [`SyncConfig::release_before_objects`] or more is
    /// encoded, where the loop has just freed much memory and is about to need much again:
    /// the allocator's way of returning freed pages to the kernel at once, so that they do not
    /// add to the batch's peak.
    pub fn with_memory_release(mut self, release: impl Fn() + Send + 'static) -> SyncLoop<K> {
        self.release = Some(Box::new(release));
        self
    }

    fn release_memory(&self) {
        if let Some(release) = &self.release {
            release();
        }
    }

    /// Runs `work` after every successful sync.
    pub fn with_after_sync(mut self, work: impl AfterSync + 'static) -> SyncLoop<K> {
        self.after.push(Box::new(work));
        self
    }

    /// Commits outside the group of the table monitor behind `gate` (see
    /// [`crate::drift`]), and treats another program's commit in that window as a change.
    pub fn with_monitor(mut self, gate: MonitorGate) -> SyncLoop<K> {
        self.monitor = Some(gate);
        self
    }

    /// Sends a report after every sync.
    pub fn with_reports(mut self, tx: Sender<SyncReport>) -> SyncLoop<K> {
        self.reports = Some(tx);
        self
    }

    /// Calls `notify` whenever an object's problems change.
    pub fn with_notices(mut self, notify: impl Fn(ProblemNotice) + Send + 'static) -> SyncLoop<K> {
        self.notices = Some(Box::new(notify));
        self
    }

    /// Runs until the event channel closes (or, with `once`, until the first sync).
    pub fn run(mut self, rx: Receiver<Event>) -> Result<(), SyncError> {
        self.read_ahead();
        loop {
            let wait = self.next_deadline().map(|d| d.saturating_duration_since(Instant::now()));
            let first = match wait {
                Some(w) => rx.recv_timeout(w),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match first {
                Ok(ev) => {
                    self.handle(ev);
                    // Take everything already queued before deciding to sync.
                    let mut taken = 0usize;
                    while let Ok(ev) = rx.try_recv() {
                        self.handle(ev);
                        taken += 1;
                        if taken.is_multiple_of(AHEAD_BATCH) {
                            self.build_ahead();
                        }
                    }
                    self.build_ahead();
                    let cache = &self.cache;
                    self.pending.publish(|| cache.model().families());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return if self.cfg.once { Err(SyncError::NeverSynced) } else { Ok(()) };
                }
            }
            if self.stopping {
                self.save_state();
                return Ok(());
            }
            if self.due(Instant::now()) {
                let resync = !self.has_work();
                let report = self.sync();
                let failed = self.last_failure.take();
                if report.full && failed.is_none() && self.cfg.fast_path {
                    // The flowtable may be new: it is created bare.
                    self.fast_path.due_at = Some(Instant::now());
                }
                // A periodic sync that found nothing to do is no news for the reports.
                let quiet = resync && report.objects == 0 && report.error.is_none();
                if let Some(tx) = self.reports.as_ref().filter(|_| !quiet) {
                    let _ = tx.send(report);
                }
                if self.cfg.once {
                    return failed.map_or(Ok(()), |e| Err(SyncError::Failed(e)));
                }
            }
            if self.firewalls_due && self.last_sync_end.is_some() {
                self.check_firewalls();
            }
            if self.last_sync_end.is_some() && self.trace_deadline().is_some_and(|at| at <= unix_now()) {
                self.remove_expired_traces();
            }
            if self.last_sync_end.is_some() && self.fast_path.due_at.is_some_and(|at| at <= Instant::now()) {
                self.sync_fast_path_devices();
            }
        }
    }
}

/// Seconds since the epoch.
fn unix_now() -> u64 {
    SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The addresses of the node's interfaces (for `--nodeport-addresses` CIDRs).
pub fn local_addresses() -> Vec<std::net::IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else { return Vec::new() };
    let mut out: Vec<std::net::IpAddr> = addrs
        .filter_map(|a| a.address)
        .filter_map(|sa| match (sa.as_sockaddr_in(), sa.as_sockaddr_in6()) {
            (Some(v4), _) => Some(std::net::IpAddr::V4(v4.ip())),
            (_, Some(v6)) => Some(std::net::IpAddr::V6(v6.ip())),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
