//! Event intake: objects into the cache, relists, and when the next sync is due.

use super::*;

impl<K: Kernel> SyncLoop<K> {
    /// Before the first sync, while the lists arrive, the kernel's table is read (it is
    /// checked at the sync that nothing was committed since): a start waits for the API server
    /// anyway, and at 100k Services the read takes a third of a second.
    pub(super) fn read_ahead(&mut self) {
        if self.table.is_some() {
            return;
        }
        match self.nl.generation() {
            Ok(genid) => {
                let current = self.current_table();
                self.read_ahead = Some((genid, current));
            }
            Err(e) => tracing::debug!("not reading the table ahead: {e}"),
        }
    }

    /// What [`SyncLoop::read_ahead`] read, and the generation it read at, if nothing was
    /// committed since.
    pub(super) fn table_read_ahead(&mut self) -> Option<(u32, Result<Option<Observed>, NetlinkError>)> {
        let (genid, current) = self.read_ahead.take()?;
        (self.nl.generation().ok() == Some(genid)).then_some((genid, current))
    }

    /// Before the first sync, the model is built as the lists arrive (in batches, and whenever
    /// the queue runs dry) instead of all at once when the last list is complete: the sync
    /// thread would otherwise wait for the API server, then build 100k Services while the
    /// watchers' thread waits for it. What these rebuilds report is not needed: the first
    /// sync is a full one, and renders the whole model. A Service whose slices have not come
    /// yet is left for later (built now, it would be built again when they come).
    pub(super) fn build_ahead(&mut self) {
        if self.table.is_some() || self.all_listed() || !self.listed.contains(&Kind::Node) || !self.cache.is_dirty() {
            return;
        }
        let rebuilt = self.cache.rebuild_ahead();
        if rebuilt.facts_changed {
            self.report_families_without_nodeports();
        }
    }

    pub(super) fn all_listed(&self) -> bool {
        Kind::ALL.iter().all(|k| self.listed.contains(k))
    }

    /// A sync is wanted for every queued change, even one that turns out to change nothing
    /// (an object listed again as it was): that sync is free, and it marks the change done.
    pub(super) fn has_work(&self) -> bool {
        self.needs_full || self.table.is_none() || self.cache.is_dirty() || self.dirty_since.is_some()
    }

    /// When the next sync may start, if one is wanted.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
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
        let resync = self.resync_at();
        let wanted = [wanted, stale, traces, self.fast_path.due_at, resync].into_iter().flatten().min();
        Some(wanted.map_or(periodic, |w| w.min(periodic)))
    }

    pub(super) fn due(&mut self, now: Instant) -> bool {
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
        (self.has_work()
            || self.stale_chains.due_at().is_some_and(|at| now >= at)
            || self.resync_at().is_some_and(|at| now >= at))
            && self.last_sync_end.is_none_or(|t| now >= t + self.cfg.min_sync_period)
            && self.retry_at.is_none_or(|r| now >= r)
    }

    /// When the periodic sync is due: `sync_period` after the last sync ended, as kube-proxy's
    /// `syncPeriod`. With nothing changed it renders nothing and commits nothing; it refreshes
    /// the sync metrics (a quiet node's rate and last-sync timestamp stay alive, as upstream's).
    pub(super) fn resync_at(&self) -> Option<Instant> {
        self.last_sync_end.map(|t| t + self.cfg.sync_period)
    }

    pub(super) fn queued(&mut self) {
        self.dirty_since.get_or_insert_with(Instant::now);
        self.health.queued();
        let cache = &self.cache;
        self.pending.queued(|| cache.model().families());
    }

    pub(super) fn seen(&mut self, kind: Kind, key: impl FnOnce() -> Key) {
        if let Some(set) = self.relisting.get_mut(&kind) {
            set.insert(key());
        }
    }

    pub(super) fn holds_any(&self, kind: Kind) -> bool {
        match kind {
            Kind::Service => self.cache.service_names().next().is_some(),
            Kind::EndpointSlice => self.cache.slice_names().next().is_some(),
            Kind::Node => self.cache.node_name().is_some(),
            Kind::ServiceCidr => self.cache.service_cidr_names().next().is_some(),
        }
    }

    /// The objects of `kind` the cache holds.
    pub(super) fn held(&self, kind: Kind) -> Vec<Key> {
        let owned = |(ns, name): (&str, &str)| (ns.to_string(), name.to_string());
        match kind {
            Kind::Service => self.cache.service_names().map(owned).collect(),
            Kind::EndpointSlice => self.cache.slice_names().map(owned).collect(),
            Kind::Node => self.cache.node_name().map(|n| (String::new(), n.to_string())).into_iter().collect(),
            Kind::ServiceCidr => self.cache.service_cidr_names().map(|n| (String::new(), n.to_string())).collect(),
        }
    }

    pub(super) fn handle(&mut self, ev: Event) {
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
            Event::TableChanged { what, generation } => self.drifted(&what, generation),
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
            Event::FastPathDevices(devices) => self.fast_path_devices_seen(devices),
            Event::MonitorStopped => {
                self.monitor = None;
                self.verify_kernel = true;
            }
            Event::Shutdown => self.stopping = true,
        }
    }

    pub(super) fn delete(&mut self, kind: Kind, namespace: &str, name: &str) {
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
                self.health.node_deleted();
                self.cache.set_node(None);
            }
            Kind::ServiceCidr => self.cache.remove_service_cidr(name),
        }
    }
}
