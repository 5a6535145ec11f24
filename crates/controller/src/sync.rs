//! The one global sync loop: events in, one atomic transaction out per sync.
//!
//! Changes are coalesced: a sync starts at least `min_sync_period` after the previous one
//! ended. Nothing is programmed until every kind has been listed once. A partial sync re-renders
//! only the Service ports that changed (see `verdict_nft::DesiredTable`); a full sync re-renders
//! everything and reconciles against a netlink dump of the kernel's table, which is what
//! happens at start (adopting the table a previous run left, so a restart writes only the
//! difference), after any failed transaction (retried with backoff up to `sync_period`), when
//! the node's facts change, and every `full_sync_period`.
//!
//! On kernels before 6.4, and on any kernel once it refuses a chain deletion as busy, chains
//! that go out of use are flushed and deleted a second later in a transaction of their own (see
//! [`crate::stale_chains`]).
//!
//! The loop runs on its own thread: netlink calls block, and a cold sync at 100k Services keeps
//! the kernel busy for a second.

use crate::event::{Event, Kind, Object};
use crate::health::{ProxyHealth, TO_BE_DELETED_TAINT};
use crate::metrics as m;
use crate::stale_chains::StaleChains;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};
use verdict_model::{ModelCache, ObjectKind, ObjectRef, Problem};
use verdict_nft::Transaction;
use verdict_nft::netlink::monitor::MonitorGate;
use verdict_nft::netlink::{CommitStats, Netlink, NetlinkError};
use verdict_nft::observe::observe;
use verdict_nft::{DesiredTable, RenderOptions, diff};

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

/// Why `run` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The first (and, with `once`, only) sync failed.
    #[error("{0}")]
    Failed(String),
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

/// The sync loop's state.
pub struct SyncLoop {
    cfg: SyncConfig,
    cache: ModelCache,
    nl: Netlink,
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
    read_ahead: Option<(u32, Result<Option<verdict_nft::observe::Observed>, NetlinkError>)>,
    looked_for_state: bool,
    /// Chains of `verdict trace` runs and their deadlines (seconds since the epoch): removed
    /// when it has passed, if their trace has not removed them (it was killed).
    traces: BTreeMap<String, u64>,
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

impl SyncLoop {
    /// A loop over `cache`, programming through `nl` (opened in the node's network namespace).
    pub fn new(cache: ModelCache, nl: Netlink, cfg: SyncConfig, health: Arc<ProxyHealth>) -> SyncLoop {
        let backoff = cfg.min_sync_period.max(Duration::from_millis(100));
        SyncLoop {
            stale_chains: StaleChains::new(cfg.defer_chain_deletion),
            monitor: None,
            foreign_commit: false,
            verify_kernel: true,
            known: None,
            read_ahead: None,
            looked_for_state: false,
            traces: BTreeMap::new(),
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
    pub fn with_memory_release(mut self, release: impl Fn() + Send + 'static) -> SyncLoop {
        self.release = Some(Box::new(release));
        self
    }

    fn release_memory(&self) {
        if let Some(release) = &self.release {
            release();
        }
    }

    /// Runs `work` after every successful sync.
    pub fn with_after_sync(mut self, work: impl AfterSync + 'static) -> SyncLoop {
        self.after.push(Box::new(work));
        self
    }

    /// Commits outside the group of the table monitor behind `gate` (see
    /// [`crate::drift`]), and treats another program's commit in that window as a change.
    pub fn with_monitor(mut self, gate: MonitorGate) -> SyncLoop {
        self.monitor = Some(gate);
        self
    }

    /// Sends a report after every sync.
    pub fn with_reports(mut self, tx: Sender<SyncReport>) -> SyncLoop {
        self.reports = Some(tx);
        self
    }

    /// Calls `notify` whenever an object's problems change.
    pub fn with_notices(mut self, notify: impl Fn(ProblemNotice) + Send + 'static) -> SyncLoop {
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
                let report = self.sync();
                let failed = report.error.clone();
                if let Some(tx) = &self.reports {
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
        }
    }

    /// Before the first sync, while the lists arrive, the kernel's table is read (it is
    /// checked at the sync that nothing was committed since): a start waits for the API server
    /// anyway, and at 100k Services the read takes a third of a second.
    fn read_ahead(&mut self) {
        if self.table.is_some() {
            return;
        }
        match self.nl.genid() {
            Ok(genid) => {
                let current = self.current_table();
                self.read_ahead = Some((genid, current));
            }
            Err(e) => tracing::debug!("not reading the table ahead: {e}"),
        }
    }

    /// What [`SyncLoop::read_ahead`] read, if nothing was committed since.
    fn table_read_ahead(&mut self) -> Option<Result<Option<verdict_nft::observe::Observed>, NetlinkError>> {
        let (genid, current) = self.read_ahead.take()?;
        (self.nl.genid().ok() == Some(genid)).then_some(current)
    }

    /// Before the first sync, the model is built as the lists arrive (in batches, and whenever
    /// the queue runs dry) instead of all at once when the last list is complete: the sync
    /// thread would otherwise wait for the API server, then build 100k Services while the
    /// watchers' thread waits for it. What these rebuilds report is not needed: the first
    /// sync is a full one, and renders the whole model.
    fn build_ahead(&mut self) {
        if self.table.is_some() || self.all_listed() || !self.listed.contains(&Kind::Node) || !self.cache.is_dirty() {
            return;
        }
        let rebuilt = self.cache.rebuild();
        if rebuilt.facts_changed {
            self.report_families_without_nodeports();
        }
    }

    fn all_listed(&self) -> bool {
        Kind::ALL.iter().all(|k| self.listed.contains(k))
    }

    /// A sync is wanted for every queued change, even one that turns out to change nothing
    /// (an object listed again as it was): that sync is free, and it marks the change done.
    fn has_work(&self) -> bool {
        self.needs_full || self.table.is_none() || self.cache.is_dirty() || self.dirty_since.is_some()
    }

    /// When the next sync may start, if one is wanted.
    fn next_deadline(&self) -> Option<Instant> {
        if !self.all_listed() {
            return None;
        }
        let earliest = self.last_sync_end.map(|t| t + self.cfg.min_sync_period);
        let periodic = self.last_full + self.cfg.full_sync_period;
        let wanted = if self.has_work() {
            let at = earliest.unwrap_or_else(Instant::now);
            Some(self.retry_at.map_or(at, |r| r.max(at)))
        } else {
            None
        };
        let stale = self.stale_chains.due_at().map(|at| earliest.map_or(at, |e| e.max(at)));
        let traces = self.trace_deadline().map(|until| {
            Instant::now() + Duration::from_secs(until.saturating_sub(unix_now())) + Duration::from_millis(100)
        });
        let wanted = [wanted, stale, traces].into_iter().flatten().min();
        Some(wanted.map_or(periodic, |w| w.min(periodic)))
    }

    fn due(&mut self, now: Instant) -> bool {
        if !self.all_listed() {
            return false;
        }
        if now >= self.last_full + self.cfg.full_sync_period {
            // The periodic reconcile reads the kernel's table even with a monitor: the one
            // check of what no notice reports (elements adopted from a saved state, notices
            // lost without an overflow).
            self.needs_full = true;
            self.verify_kernel = true;
        }
        (self.has_work() || self.stale_chains.due_at().is_some_and(|at| now >= at))
            && self.last_sync_end.is_none_or(|t| now >= t + self.cfg.min_sync_period)
            && self.retry_at.is_none_or(|r| now >= r)
    }

    fn queued(&mut self) {
        self.dirty_since.get_or_insert_with(Instant::now);
        self.health.queued();
        let cache = &self.cache;
        self.pending.queued(|| cache.model().families());
    }

    fn seen(&mut self, kind: Kind, key: impl FnOnce() -> Key) {
        if let Some(set) = self.relisting.get_mut(&kind) {
            set.insert(key());
        }
    }

    fn holds_any(&self, kind: Kind) -> bool {
        match kind {
            Kind::Service => self.cache.service_names().next().is_some(),
            Kind::EndpointSlice => self.cache.slice_names().next().is_some(),
            Kind::Node => self.cache.node_name().is_some(),
            Kind::ServiceCidr => self.cache.service_cidr_names().next().is_some(),
        }
    }

    /// The objects of `kind` the cache holds.
    fn held(&self, kind: Kind) -> Vec<Key> {
        let owned = |(ns, name): (&str, &str)| (ns.to_string(), name.to_string());
        match kind {
            Kind::Service => self.cache.service_names().map(owned).collect(),
            Kind::EndpointSlice => self.cache.slice_names().map(owned).collect(),
            Kind::Node => self.cache.node_name().map(|n| (String::new(), n.to_string())).into_iter().collect(),
            Kind::ServiceCidr => self.cache.service_cidr_names().map(|n| (String::new(), n.to_string())).collect(),
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Apply(Object::Service(s)) => {
                self.seen(Kind::Service, || (s.namespace.clone(), s.name.clone()));
                self.pending.service(&s.namespace, &s.name);
                self.cache.upsert_service(s);
                self.queued();
            }
            Event::Apply(Object::EndpointSlice(e)) => {
                self.seen(Kind::EndpointSlice, || (e.namespace.clone(), e.name.clone()));
                if let Some(t) = e.trigger_time.filter(|t| *t >= self.started) {
                    self.triggers.push(t);
                }
                self.pending.slice(&e.namespace, &e.name);
                self.cache.upsert_slice(e);
                self.queued();
            }
            Event::Apply(Object::Node(n)) => {
                self.seen(Kind::Node, || (String::new(), n.name.clone()));
                self.health.set_node_eligible(!n.deleting && !n.taints.iter().any(|t| t == TO_BE_DELETED_TAINT));
                self.cache.set_node(Some(n));
                self.queued();
            }
            Event::Apply(Object::ServiceCidr(c)) => {
                self.seen(Kind::ServiceCidr, || (String::new(), c.name.clone()));
                self.cache.upsert_service_cidr(c);
                self.queued();
            }
            Event::Delete { kind, namespace, name } => {
                self.delete(kind, &namespace, &name);
                self.queued();
            }
            Event::InitStart(kind) => {
                // The first list of a kind cannot miss anything: nothing is held yet, and no
                // copy of its names is kept.
                if self.holds_any(kind) {
                    self.relisting.insert(kind, HashSet::new());
                }
            }
            Event::InitDone(kind) => {
                if let Some(seen) = self.relisting.remove(&kind) {
                    let gone: Vec<Key> = self.held(kind).into_iter().filter(|k| !seen.contains(k)).collect();
                    for (ns, name) in gone {
                        self.delete(kind, &ns, &name);
                        self.queued();
                    }
                }
                if self.listed.insert(kind) {
                    let since_start = self.started.elapsed().unwrap_or_default();
                    tracing::info!(?kind, ms = Phases::ms(since_start), "listed");
                }
            }
            Event::SourceProblems(p) => {
                self.source_problems = p;
                self.queued();
            }
            Event::TableChanged(what) => self.drifted(&what),
            Event::TraceChains(changes) => {
                for c in changes {
                    if !c.added {
                        self.traces.remove(&c.chain);
                    } else if self.traces.insert(c.chain.clone(), c.until).is_none() {
                        tracing::info!(
                            chain = c.chain,
                            until = c.until,
                            "a `verdict trace` added a chain: left in place, and removed at its deadline if still there"
                        );
                    }
                }
            }
            Event::OtherTablesChanged => self.firewalls_due = true,
            Event::MonitorStopped => {
                self.monitor = None;
                self.verify_kernel = true;
            }
            Event::Shutdown => self.stopping = true,
        }
    }

    fn delete(&mut self, kind: Kind, namespace: &str, name: &str) {
        match kind {
            Kind::Service => {
                self.cache.remove_service(namespace, name);
                self.pending.service(namespace, name);
            }
            Kind::EndpointSlice => {
                self.cache.remove_slice(namespace, name);
                self.pending.slice(namespace, name);
            }
            Kind::Node => {
                self.health.set_node_eligible(true);
                self.cache.set_node(None);
            }
            Kind::ServiceCidr => self.cache.remove_service_cidr(name),
        }
    }

    fn sync(&mut self) -> SyncReport {
        let started = Instant::now();
        if self.cache.model().config.nodeport_addresses.reads_interfaces() {
            self.cache.set_local_addresses(local_addresses());
        }
        let rebuilt = self.cache.rebuild();
        let mut phases = Phases { model: started.elapsed(), ..Phases::default() };
        if rebuilt.facts_changed {
            self.report_families_without_nodeports();
        }
        let stale_deleted = self.delete_stale_chains(started);
        let full =
            self.needs_full || rebuilt.facts_changed || self.table.as_ref().is_none_or(|t| !t.fits(self.cache.model()));
        let opts = RenderOptions { table: self.cfg.table.clone() };
        let mut report = SyncReport {
            full,
            rendered_ports: if full { self.cache.model().services.len() } else { rebuilt.changes.len() },
            objects: stale_deleted.0,
            bytes: stale_deleted.1,
            took: Duration::ZERO,
            error: None,
            programming_latency: Vec::new(),
            phases: Phases::default(),
        };
        let outcome = if full {
            let mark = Instant::now();
            let mut table = DesiredTable::new(self.cache.model(), &opts);
            phases.render = mark.elapsed();
            let result = self.reconcile(&mut table, &mut report, &mut phases);
            self.table = Some(table);
            result
        } else {
            let table = self.table.as_mut().expect("partial syncs have a table");
            let mark = Instant::now();
            for c in &rebuilt.changes {
                table.update(c.old.as_deref(), c.new.as_deref());
            }
            phases.render = mark.elapsed();
            let mark = Instant::now();
            let mut tx = table.plan();
            let deferred = self.stale_chains.split(&mut tx);
            report.objects += tx.object_count();
            phases.plan = mark.elapsed();
            let mark = Instant::now();
            let committed = commit_watched(&mut self.nl, self.monitor.as_ref(), &tx, None);
            phases.commit = mark.elapsed();
            match committed {
                Ok((stats, foreign)) => {
                    self.foreign_commit |= foreign;
                    report.bytes += stats.bytes;
                    table.committed();
                    self.stale_chains.flushed(deferred, Instant::now());
                    Ok(())
                }
                Err(e) => Err(self.learn(e)),
            }
        };
        report.took = started.elapsed();
        report.phases = phases;
        let now = Instant::now();
        self.last_sync_end = Some(now);
        match outcome {
            Ok(()) => {
                if std::mem::take(&mut self.foreign_commit) {
                    self.drifted("a commit by another program while verdict committed");
                }
                if let Some(table) = &self.table {
                    self.stale_chains.forget_wanted(|chain| table.ruleset().chains.contains_key(chain));
                }
                self.succeeded(&mut report, now);
                let model = self.cache.model();
                for work in &mut self.after {
                    work.after_sync(model, full, &rebuilt.changes);
                }
            }
            Err(e) => {
                crate::family_metrics::sync_failed(&self.cache.model().families());
                tracing::error!(full, "sync failed; a full reconcile follows in {:?}: {e}", self.backoff);
                self.needs_full = true;
                self.verify_kernel = true;
                // The kernel is not what verdict wants, even when nothing was queued (a repair
                // or a periodic reconcile failed): health times out from here unless a sync
                // succeeds first (an older queued change keeps its own start).
                self.health.queued();
                self.retry_at = Some(now + self.backoff);
                self.backoff = (self.backoff * 2).min(self.cfg.sync_period.max(self.backoff));
                report.error = Some(e);
            }
        }
        crate::family_metrics::sync_took(&self.cache.model().families(), full, report.took);
        report
    }

    /// A full sync's planning and commit: `table` (all of it rendered) against what the kernel
    /// holds. A plan made against a read of the kernel is committed at the generation of that
    /// read; if another program committed since, the kernel refuses it and the table is read
    /// and the plan made again, up to [`REPLANS`] times.
    fn reconcile(
        &mut self,
        table: &mut DesiredTable,
        report: &mut SyncReport,
        phases: &mut Phases,
    ) -> Result<(), String> {
        let mut attempt = 1;
        loop {
            let mark = Instant::now();
            let current = match (attempt, self.table_read_ahead()) {
                (1, Some(current)) => current,
                (1, None) => self.current_table(),
                _ => observe(&mut self.nl, &self.cfg.table),
            };
            phases.read += mark.elapsed();
            let mut current = current.map_err(|e| format!("reading the table: {e}"))?;
            let read_at = current.as_ref().and_then(|c| c.generation);
            if let Some(c) = &mut current {
                for f in &c.foreign {
                    tracing::warn!("replacing an object verdict did not write: {f}");
                }
                // A `verdict trace` in progress is left alone; one that died without
                // removing its chains is deleted once their deadline has passed.
                for (chain, until) in verdict_nft::trace::chains::set_aside_live(&mut c.ruleset, unix_now()) {
                    tracing::info!("leaving chain {chain} of a running `verdict trace` in place");
                    self.traces.insert(chain, until);
                }
            }
            let mark = Instant::now();
            let mut plan = diff(current.as_ref().map(|c| &c.ruleset), table.ruleset());
            // The table as read (at a restart, all of it) is not needed once compared: it
            // goes before the batch is encoded, not after.
            drop(current);
            let deferred = self.stale_chains.split(&mut plan.transaction);
            let objects = plan.transaction.object_count();
            phases.plan += mark.elapsed();
            if objects >= self.cfg.release_before_objects {
                self.release_memory();
            }
            let mark = Instant::now();
            let committed = self.commit_planned(&plan.transaction, read_at);
            phases.commit += mark.elapsed();
            match committed {
                Ok(stats) => {
                    report.objects += objects;
                    report.bytes += stats.bytes;
                    self.stale_chains.flushed(deferred, Instant::now());
                    table.adopt(plan.result);
                    return Ok(());
                }
                Err(NetlinkError::Changed(generation)) if attempt < REPLANS => {
                    tracing::info!(
                        generation,
                        attempt,
                        "nftables changed between reading the table and committing: planning again"
                    );
                    attempt += 1;
                }
                Err(e) => return Err(self.learn(e)),
            }
        }
    }

    /// What the kernel holds, for a full sync: read from the kernel (with the elements the
    /// previous run saved, when they still hold), or, when nothing can have changed it behind
    /// verdict's back, the table as committed.
    fn current_table(&mut self) -> Result<Option<verdict_nft::observe::Observed>, NetlinkError> {
        if !self.looked_for_state {
            self.looked_for_state = true;
            if let Some(dir) = self.cfg.state_dir.clone() {
                self.known = crate::restart::load(&dir, &self.cfg.table, &mut self.nl);
            }
        }
        if let Some((stamp, known)) = self.known.take() {
            let observed = verdict_nft::observe::observe_with_known_elements(&mut self.nl, &self.cfg.table, &known)?;
            if observed.as_ref().is_some_and(|o| crate::restart::adoptable(&stamp, &o.ruleset)) {
                return Ok(observed);
            }
            return observe(&mut self.nl, &self.cfg.table);
        }
        if !self.verify_kernel
            && let Some(table) = &self.table
        {
            let ruleset = table.ruleset().clone();
            return Ok(Some(verdict_nft::observe::Observed {
                ruleset,
                foreign: Vec::new(),
                handles: Default::default(),
                generation: None,
            }));
        }
        observe(&mut self.nl, &self.cfg.table)
    }

    /// At shutdown: saves what the kernel holds for the next start, unless a reconcile is
    /// pending (then the kernel may differ from what verdict committed).
    fn save_state(&mut self) {
        let Some(dir) = self.cfg.state_dir.clone() else { return };
        match &self.table {
            Some(table) if !self.needs_full && !self.verify_kernel && self.monitor.is_some() => {
                crate::restart::save(&dir, &self.cfg.table, &mut self.nl, table.ruleset());
            }
            _ => tracing::info!("not saving the table state: a reconcile is pending or the table is not watched"),
        }
    }

    /// Commits `tx` (see [`commit_watched`]).
    fn commit(&mut self, tx: &Transaction) -> Result<CommitStats, NetlinkError> {
        self.commit_planned(tx, None)
    }

    /// Commits `tx`, planned against the table as read at generation `read_at` (see
    /// [`Netlink::commit_planned`]).
    fn commit_planned(&mut self, tx: &Transaction, read_at: Option<u32>) -> Result<CommitStats, NetlinkError> {
        let (stats, foreign) = commit_watched(&mut self.nl, self.monitor.as_ref(), tx, read_at)?;
        self.foreign_commit |= foreign;
        Ok(stats)
    }

    /// Another program changed the table: the next sync reconciles it against the kernel.
    fn drifted(&mut self, what: &str) {
        tracing::info!(table = self.cfg.table, "another program changed the table ({what}); reconciling");
        metrics::counter!(m::TABLE_DRIFT).increment(1);
        self.needs_full = true;
        self.verify_kernel = true;
        self.firewalls_due = true;
    }

    /// Looks for default-drop chains in other tables; what is found is published with the
    /// other problems (once per change).
    fn check_firewalls(&mut self) {
        self.firewalls_due = false;
        let node = self.cache.model().node.name.clone();
        match crate::firewalls::problems(&mut self.nl, &self.cfg.table, &node) {
            Ok(mut found) => {
                metrics::gauge!(m::FOREIGN_DROP_CHAINS).set(found.len() as f64);
                found.extend(crate::foreign_proxy::problems(&mut self.nl, &node, &self.firewall_problems));
                if found != self.firewall_problems {
                    self.firewall_problems = found;
                    self.publish_problems();
                }
            }
            Err(e) => tracing::warn!("could not look for firewalls in other tables: {e}"),
        }
    }

    /// Notes what a refused commit teaches (see [`StaleChains::learn`]); the error, as text.
    fn learn(&mut self, e: verdict_nft::netlink::NetlinkError) -> String {
        if self.stale_chains.learn(&e) {
            tracing::warn!(
                "the kernel refused to delete a chain whose last reference this transaction deleted \
                 (kernels without the 6.4 fix): unused chains are deleted a second after they are \
                 flushed from now on"
            );
        }
        e.to_string()
    }

    /// Deletes, in a transaction of their own, the flushed chains whose wait is over and that
    /// the table does not want again. Returns the objects and bytes written. A failure is
    /// counted and turns this sync into a full reconcile, which plans whatever is left over
    /// again.
    fn delete_stale_chains(&mut self, now: Instant) -> (usize, usize) {
        let Some(tx) = self.stale_chains.take_due(&self.cfg.table, now) else { return (0, 0) };
        match self.commit(&tx) {
            Ok(stats) => {
                tracing::debug!(chains = tx.ops.len(), "deleted chains flushed earlier");
                (tx.object_count(), stats.bytes)
            }
            Err(e) => {
                crate::family_metrics::cleanup_failed(&self.cache.model().families());
                tracing::warn!("deleting chains flushed earlier failed; reconciling the whole table: {e}");
                self.needs_full = true;
                self.verify_kernel = true;
                (0, 0)
            }
        }
    }

    /// The earliest deadline of the trace chains known, if any.
    fn trace_deadline(&self) -> Option<u64> {
        self.traces.values().min().copied()
    }

    /// Removes the trace chains whose deadline has passed, in one transaction of their own,
    /// without reading the table: their `verdict trace` was killed before it could.
    fn remove_expired_traces(&mut self) {
        let now = unix_now();
        let expired: Vec<String> =
            self.traces.iter().filter(|(_, until)| **until <= now).map(|(c, _)| c.clone()).collect();
        for chain in &expired {
            self.traces.remove(chain);
        }
        let tx = verdict_nft::trace::chains::removal(&self.cfg.table, &expired);
        match commit_watched(&mut self.nl, self.monitor.as_ref(), &tx, None) {
            Ok((_, foreign)) => {
                self.foreign_commit |= foreign;
                tracing::info!(chains = ?expired, "removed the chains of a `verdict trace` past their deadline");
            }
            // Gone already (its trace removed them while the notice was on its way).
            Err(NetlinkError::Rejected { errno: nix::errno::Errno::ENOENT, .. }) => {}
            Err(e) => {
                tracing::warn!(chains = ?expired, "could not remove expired trace chains (a full sync will): {e}")
            }
        }
    }

    /// Upstream's `nodePortAddresses: primary` has no NodePorts in a family the Node lists no
    /// address of; said once per change, since it looks like a bug from outside.
    fn report_families_without_nodeports(&mut self) {
        let families = self.cache.model().families_without_nodeports();
        if families != self.families_without_nodeports {
            for family in &families {
                tracing::info!(
                    %family,
                    "no node address of this family accepts NodePorts: its Services get ClusterIPs, external and load balancer IPs, but no NodePorts"
                );
            }
            self.families_without_nodeports = families;
        }
    }

    fn succeeded(&mut self, report: &mut SyncReport, now: Instant) {
        if report.full {
            self.last_full = now;
            // Without a monitor, only a dump can show what other programs did.
            self.verify_kernel = self.monitor.is_none();
        }
        self.needs_full = false;
        self.retry_at = None;
        self.backoff = self.cfg.min_sync_period.max(Duration::from_millis(100));
        self.dirty_since = None;
        self.health.set_families(self.cache.model().families().iter().map(|f| f.to_string()).collect());
        self.health.updated();
        let wall = SystemTime::now();
        report.programming_latency.extend(self.triggers.drain(..).map(|t| wall.duration_since(t).unwrap_or_default()));
        crate::family_metrics::synced(self.cache.model(), &report.programming_latency);
        self.pending.synced();
        metrics::histogram!(m::TX_OPERATIONS).record(report.objects as f64);
        metrics::histogram!(m::TX_BYTES).record(report.bytes as f64);
        metrics::histogram!(m::RENDERED_PORTS).record(report.rendered_ports as f64);
        if report.full || report.objects > 0 {
            tracing::info!(
                full = report.full,
                services = self.cache.model().services.len(),
                rendered = report.rendered_ports,
                objects = report.objects,
                bytes = report.bytes,
                ms = report.took.as_secs_f64() * 1000.0,
                model_ms = Phases::ms(report.phases.model),
                render_ms = Phases::ms(report.phases.render),
                read_ms = Phases::ms(report.phases.read),
                plan_ms = Phases::ms(report.phases.plan),
                commit_ms = Phases::ms(report.phases.commit),
                "synced"
            );
        }
        self.publish_problems();
    }

    /// Logs and announces problems that appeared, changed or went away.
    fn publish_problems(&mut self) {
        let mut now: BTreeMap<ObjectRef, Vec<Problem>> = BTreeMap::new();
        let all = self.cache.problems().into_iter().chain(self.source_problems.iter().cloned());
        for p in all.chain(self.firewall_problems.iter().cloned()) {
            now.entry(p.object.clone()).or_default().push(p);
        }
        let mut counts: BTreeMap<&'static str, f64> = BTreeMap::new();
        for problems in now.values() {
            // A firewall or proxy elsewhere is not input verdict failed to program: each has its own gauge.
            for p in problems.iter().filter(|p| !crate::firewalls::about_the_node(p.reason)) {
                *counts.entry(p.reason).or_default() += 1.0;
            }
        }
        for reason in self.reasons.iter().copied().collect::<Vec<_>>() {
            if !counts.contains_key(reason) {
                metrics::gauge!(m::PROBLEMS, "reason" => reason).set(0.0);
            }
        }
        for (reason, n) in &counts {
            metrics::gauge!(m::PROBLEMS, "reason" => *reason).set(*n);
            self.reasons.insert(reason);
        }
        for (object, problems) in &now {
            if self.published.get(object) != Some(problems) {
                for p in problems {
                    if crate::firewalls::about_the_node(p.reason) {
                        tracing::warn!("{p}");
                    } else {
                        tracing::warn!("{p}; left out");
                    }
                }
                self.notify(object.clone(), problems.clone());
            }
        }
        for object in self.published.keys().filter(|o| !now.contains_key(*o)).cloned().collect::<Vec<_>>() {
            tracing::info!("{object}: its problems are resolved");
            self.notify(object, Vec::new());
        }
        self.published = now;
    }

    fn notify(&self, object: ObjectRef, problems: Vec<Problem>) {
        if let Some(notify) = &self.notices
            && matches!(object.kind, ObjectKind::Service | ObjectKind::EndpointSlice | ObjectKind::Node)
        {
            notify(ProblemNotice { object, problems });
        }
    }
}

/// Commits `tx`. With a table monitor, it leaves the monitor's group for the commit (notices
/// of our own changes would slow a large commit several times), and says whether another
/// program committed meanwhile: the generation must have moved by exactly our one commit.
fn commit_watched(
    nl: &mut Netlink,
    monitor: Option<&MonitorGate>,
    tx: &Transaction,
    read_at: Option<u32>,
) -> Result<(CommitStats, bool), NetlinkError> {
    let Some(gate) = monitor.filter(|_| !tx.is_empty()) else { return Ok((nl.commit_planned(tx, read_at)?, false)) };
    let before = nl.genid()?;
    // Failing to leave or rejoin the group only costs speed or a notice: never fail the sync.
    if let Err(e) = gate.pause() {
        tracing::debug!("committing without pausing the table monitor: {e}");
    }
    let committed = nl.commit_planned(tx, read_at);
    if let Err(e) = gate.resume() {
        tracing::warn!("the table monitor could not rejoin its group; changes by other programs may go unnoticed: {e}");
    }
    let stats = committed?;
    let after = nl.genid()?;
    Ok((stats, after != before.wrapping_add(1)))
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
