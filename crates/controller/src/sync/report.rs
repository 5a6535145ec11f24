//! After a sync: health, metrics, the `synced` line, and problems as logs and notices.

use super::*;

impl<K: Kernel> SyncLoop<K> {
    /// Looks for default-drop chains in other tables; what is found is published with the
    /// other problems (once per change).
    pub(super) fn check_firewalls(&mut self) {
        self.firewalls_due = false;
        let node = self.cache.model().node.name.clone();
        match crate::firewalls::problems(&mut self.nl, &self.cfg.table, &node) {
            Ok(mut found) => {
                metrics::gauge!(m::FOREIGN_DROP_CHAINS).set(found.len() as f64);
                let replacing = self.cfg.replacing_kube_proxy.as_ref();
                if replacing.is_some_and(|r| r.load(std::sync::atomic::Ordering::Acquire)) {
                    tracing::debug!("kube-proxy's rules are being replaced: not reported as another proxy");
                } else {
                    found.extend(crate::foreign_proxy::problems(&mut self.nl, &node, &self.firewall_problems));
                }
                if found != self.firewall_problems {
                    self.firewall_problems = found;
                    self.publish_problems();
                }
            }
            Err(e) => tracing::warn!("could not look for firewalls in other tables: {e}"),
        }
    }

    /// Upstream's `nodePortAddresses: primary` has no NodePorts in a family the Node lists no
    /// address of; said once per change, since it looks like a bug from outside.
    pub(super) fn report_families_without_nodeports(&mut self) {
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

    pub(super) fn succeeded(&mut self, report: &mut SyncReport, now: Instant) {
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
                transactions = report.transactions,
                longest_transaction_ms = Phases::ms(report.longest_transaction),
                "synced"
            );
        }
        self.publish_problems();
    }

    /// Logs and announces problems that appeared, changed or went away.
    pub(super) fn publish_problems(&mut self) {
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

    pub(super) fn notify(&self, object: ObjectRef, problems: Vec<Problem>) {
        if let Some(notify) = &self.notices
            && matches!(object.kind, ObjectKind::Service | ObjectKind::EndpointSlice | ObjectKind::Node)
        {
            notify(ProblemNotice { object, problems });
        }
    }
}
