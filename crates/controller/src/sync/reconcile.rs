//! The sync: render, read what the kernel holds when needed, plan, and commit in one
//! transaction; and the kernel-side chores around it (deferred chain deletion, expired trace
//! chains, the saved state).

use super::*;

impl<K: Kernel> SyncLoop<K> {
    pub(super) fn sync(&mut self) -> SyncReport {
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
        let opts = RenderOptions { table: self.cfg.table.clone(), fast_path: self.cfg.fast_path };
        let mut report = SyncReport {
            full,
            rendered_ports: if full { self.cache.model().services.len() } else { rebuilt.changes.len() },
            objects: stale_deleted.0,
            bytes: stale_deleted.1,
            took: Duration::ZERO,
            error: None,
            programming_latency: Vec::new(),
            phases: Phases::default(),
            transactions: 0,
            longest_transaction: Duration::ZERO,
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
            let Staged { transaction: tx, deferred_chains: deferred } = self.stale_chains.staging().stage(table.plan());
            report.objects += tx.object_count();
            phases.plan = mark.elapsed();
            let mark = Instant::now();
            let committed = commit_watched(&mut self.nl, self.monitor.as_ref(), &tx, None);
            phases.commit = mark.elapsed();
            match committed {
                Ok((stats, foreign)) => {
                    self.foreign_commit |= foreign;
                    report.committed(&stats);
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
                    self.drifted("a commit by another program while verdict committed", None);
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
                let line = e.line();
                tracing::error!(full, "sync failed; a full reconcile follows in {:?}: {line}", self.backoff);
                self.needs_full = true;
                self.verify_kernel = true;
                // The kernel is not what verdict wants, even when nothing was queued (a repair
                // or a periodic reconcile failed): health times out from here unless a sync
                // succeeds first (an older queued change keeps its own start).
                self.health.queued();
                self.retry_at = Some(now + self.backoff);
                self.backoff = (self.backoff * 2).min(self.cfg.sync_period.max(self.backoff));
                report.error = Some(line);
                self.last_failure = Some(e);
            }
        }
        crate::family_metrics::sync_took(&self.cache.model().families(), full, report.took);
        report
    }

    /// A full sync's planning and commit: `table` (all of it rendered) against what the kernel
    /// holds. A plan made against a read of the kernel is committed at the generation of that
    /// read; if another program committed since, the kernel refuses it and the table is read
    /// and the plan made again, up to [`REPLANS`] times.
    pub(super) fn reconcile(
        &mut self,
        table: &mut DesiredTable,
        report: &mut SyncReport,
        phases: &mut Phases,
    ) -> Result<(), SyncFailure> {
        let mut attempt = 1;
        loop {
            let mark = Instant::now();
            // The generation before reading: changes up to it are in what is read (for a table
            // that is absent, the read has no generation of its own).
            let (read_from, current) = match (attempt, self.table_read_ahead()) {
                (1, Some((genid, current))) => (Some(genid), current),
                (1, None) => (self.nl.generation().ok(), self.current_table()),
                _ => (self.nl.generation().ok(), self.nl.read(&self.cfg.table, &Snapshot::default())),
            };
            phases.read += mark.elapsed();
            let current = current.map_err(SyncFailure::Read)?;
            // Only a read of the kernel covers other programs' changes (not the table verdict
            // last committed, taken as it is when nothing suggested drift).
            let from_kernel = current.as_ref().is_none_or(|c| c.generation.is_some());
            let mark = Instant::now();
            let dormant = verdict_nft::coldstart::dormant(current.as_ref().map(|c| &c.ruleset), table.ruleset());
            // The table as read (at a restart, all of it) goes into the plan, and is dropped
            // once compared: before the batch is encoded, not after.
            let plan = self.stale_chains.staging().reconcile(current, table.ruleset(), unix_now());
            for f in &plan.foreign {
                tracing::warn!("replacing an object verdict did not write: {f}");
            }
            for (chain, until) in &plan.live_traces {
                tracing::info!("leaving chain {chain} of a running `verdict trace` in place");
                self.traces.insert(chain.clone(), *until);
            }
            let objects = plan.staged.transaction.object_count();
            let parts = if dormant {
                verdict_nft::coldstart::split(
                    plan.staged.transaction,
                    table.ruleset(),
                    self.cfg.max_transaction_objects,
                )
            } else {
                vec![plan.staged.transaction]
            };
            phases.plan += mark.elapsed();
            if objects >= self.cfg.release_before_objects {
                self.release_memory();
            }
            let mark = Instant::now();
            let committed = self.commit_parts(&parts, plan.read_at, report);
            phases.commit += mark.elapsed();
            match committed {
                Ok(()) => {
                    if from_kernel {
                        self.reconciled_through = plan.read_at.or(read_from);
                    }
                    report.objects += objects;
                    self.stale_chains.flushed(plan.staged.deferred_chains, Instant::now());
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

    /// Commits the transactions of one plan in order, the first at generation `read_at` (see
    /// [`Netlink::commit_planned`]) and each later one at the generation the one before left:
    /// another program's commit in between is met as [`NetlinkError::Changed`], and the plan
    /// is made again from what the kernel holds then. Only a plan for a table no packet
    /// reaches comes in several parts ([`verdict_nft::coldstart`]), so what a failure leaves
    /// behind is still unseen, and the next reconcile finishes it.
    fn commit_parts(
        &mut self,
        parts: &[Transaction],
        mut read_at: Option<u32>,
        report: &mut SyncReport,
    ) -> Result<(), NetlinkError> {
        for (i, tx) in parts.iter().enumerate() {
            let stats = self.commit_planned(tx, read_at)?;
            report.committed(&stats);
            if parts.len() > 1 {
                tracing::debug!(
                    part = i + 1,
                    of = parts.len(),
                    objects = tx.object_count(),
                    kernel_ms = stats.kernel_us as f64 / 1000.0,
                    "cold start part committed"
                );
            }
            if i + 1 < parts.len() {
                read_at = Some(self.nl.generation()?);
            }
        }
        if parts.len() > 1 {
            tracing::info!(
                transactions = parts.len(),
                longest_ms = Phases::ms(report.longest_transaction),
                "a table no packet reached yet, programmed in parts: the base chains' rules last"
            );
        }
        Ok(())
    }

    /// What the kernel holds, for a full sync: read from the kernel (with the elements the
    /// previous run saved, when they still hold), or, when nothing can have changed it behind
    /// verdict's back, the table as committed.
    pub(super) fn current_table(&mut self) -> Result<Option<verdict_nft::observe::Observed>, NetlinkError> {
        if !self.looked_for_state {
            self.looked_for_state = true;
            if let Some(dir) = self.cfg.state_dir.clone() {
                self.known = crate::restart::load(&dir, &self.cfg.table, &mut self.nl);
            }
        }
        if let Some((stamp, known)) = self.known.take() {
            let observed = self.nl.read(&self.cfg.table, &known)?;
            if observed.as_ref().is_some_and(|o| crate::restart::adoptable(&stamp, &o.ruleset)) {
                return Ok(observed);
            }
            return self.nl.read(&self.cfg.table, &Snapshot::default());
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
        self.nl.read(&self.cfg.table, &Snapshot::default())
    }

    /// At shutdown: saves what the kernel holds for the next start, unless a reconcile is
    /// pending (then the kernel may differ from what verdict committed).
    pub(super) fn save_state(&mut self) {
        let Some(dir) = self.cfg.state_dir.clone() else { return };
        match &self.table {
            Some(table) if !self.needs_full && !self.verify_kernel && self.monitor.is_some() => {
                crate::restart::save(&dir, &self.cfg.table, &mut self.nl, table.ruleset());
            }
            _ => tracing::info!("not saving the table state: a reconcile is pending or the table is not watched"),
        }
    }

    /// Commits `tx` (see [`commit_watched`]).
    pub(super) fn commit(&mut self, tx: &Transaction) -> Result<CommitStats, NetlinkError> {
        self.commit_planned(tx, None)
    }

    /// Commits `tx`, planned against the table as read at generation `read_at` (see
    /// [`Netlink::commit_planned`]).
    pub(super) fn commit_planned(
        &mut self,
        tx: &Transaction,
        read_at: Option<u32>,
    ) -> Result<CommitStats, NetlinkError> {
        let (stats, foreign) = commit_watched(&mut self.nl, self.monitor.as_ref(), tx, read_at)?;
        self.foreign_commit |= foreign;
        Ok(stats)
    }

    /// Another program changed the table: the next sync reconciles it against the kernel,
    /// unless a full sync has read the table since that change (`generation`: the low 16 bits
    /// of the generation its commit made, when known).
    pub(super) fn drifted(&mut self, what: &str, generation: Option<u16>) {
        if let (Some(generation), Some(read)) = (generation, self.reconciled_through)
            && !generation_after(generation, read)
        {
            tracing::debug!(generation, read, "a change by another program ({what}) was already reconciled");
            return;
        }
        tracing::info!(table = self.cfg.table, "another program changed the table ({what}); reconciling");
        metrics::counter!(m::TABLE_DRIFT).increment(1);
        self.needs_full = true;
        self.verify_kernel = true;
        self.firewalls_due = true;
    }

    /// Notes what a refused commit teaches (see [`StaleChains::learn`]).
    pub(super) fn learn(&mut self, e: verdict_nft::netlink::NetlinkError) -> SyncFailure {
        if self.stale_chains.learn(&e) {
            tracing::warn!(
                "the kernel refused to delete a chain whose last reference this transaction deleted \
                 (kernels without the 6.4 fix): unused chains are deleted a second after they are \
                 flushed from now on"
            );
        }
        SyncFailure::Commit(e)
    }

    /// Deletes, in a transaction of their own, the flushed chains whose wait is over and that
    /// the table does not want again. Returns the objects and bytes written. A failure is
    /// counted and turns this sync into a full reconcile, which plans whatever is left over
    /// again.
    pub(super) fn delete_stale_chains(&mut self, now: Instant) -> (usize, usize) {
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
    pub(super) fn trace_deadline(&self) -> Option<u64> {
        self.traces.values().min().copied()
    }

    /// Removes the trace chains whose deadline has passed, in one transaction of their own,
    /// without reading the table: their `verdict trace` was killed before it could.
    pub(super) fn remove_expired_traces(&mut self) {
        let now = unix_now();
        let expired: Vec<String> =
            self.traces.iter().filter(|(_, until)| **until <= now).map(|(c, _)| c.clone()).collect();
        for chain in &expired {
            self.traces.remove(chain);
        }
        let tx = verdict_nft::trace::chains::removal(&self.cfg.table, &expired);
        match self.commit(&tx) {
            Ok(_) => {
                tracing::info!(chains = ?expired, "removed the chains of a `verdict trace` past their deadline");
            }
            // Gone already (its trace removed them while the notice was on its way).
            Err(NetlinkError::Rejected { errno: nix::errno::Errno::ENOENT, .. }) => {}
            Err(e) => {
                tracing::warn!(chains = ?expired, "could not remove expired trace chains (a full sync will): {e}")
            }
        }
    }
}

/// Commits `tx`. With a table monitor, it leaves the monitor's group for the commit (notices
/// of our own changes would slow a large commit several times), and says whether another
/// program committed meanwhile: the generation must have moved by exactly our one commit.
fn commit_watched(
    nl: &mut impl Kernel,
    monitor: Option<&MonitorGate>,
    tx: &Transaction,
    read_at: Option<u32>,
) -> Result<(CommitStats, bool), NetlinkError> {
    let Some(gate) = monitor.filter(|_| !tx.is_empty()) else { return Ok((nl.commit(tx, read_at)?, false)) };
    let before = nl.generation()?;
    // Failing to leave or rejoin the group only costs speed or a notice: never fail the sync.
    if let Err(e) = gate.pause() {
        tracing::debug!("committing without pausing the table monitor: {e}");
    }
    let committed = nl.commit(tx, read_at);
    if let Err(e) = gate.resume() {
        tracing::warn!("the table monitor could not rejoin its group; changes by other programs may go unnoticed: {e}");
    }
    let stats = committed?;
    let after = nl.generation()?;
    Ok((stats, after != before.wrapping_add(1)))
}
