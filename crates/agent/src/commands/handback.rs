//! Handing a node back to kube-proxy: verdict's table goes only once kube-proxy's rules are in
//! place, so that no new connection meets a node with neither (`verdict cleanup
//! --after-kube-proxy`).
//!
//! "In place" is read from the kernel, whatever kube-proxy's mode: its rules serve every
//! Service address and NodePort verdict's table serves. A Service deleted while verdict was
//! stopped stays in verdict's frozen table and never appears in kube-proxy's, so rules that
//! serve some of them and have not changed for `settle` count as in place too, and what they
//! lack is logged.

use super::cleanup::POLL;
use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use verdict_controller::leftovers::serving::{Served, served_by_kube_proxy, served_by_verdict};
use verdict_nft::netlink::Netlink;

/// How often the wait says how far it got.
const SAY_EVERY: Duration = Duration::from_secs(30);

/// What one look at the kernel decides.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// kube-proxy's rules serve everything verdict's table does.
    Covered,
    /// They serve some of it and have been unchanged for the settle time: what they lack.
    Settled(Vec<Served>),
    /// Not yet: what they lack.
    Waiting(Vec<Served>),
}

/// The state of the wait between looks: kube-proxy's rules as last seen, and since when.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    last: Option<BTreeSet<Served>>,
    unchanged_since: Option<Instant>,
}

impl Progress {
    /// Compares one reading of both tables.
    pub(crate) fn look(
        &mut self,
        ours: &BTreeSet<Served>,
        theirs: &BTreeSet<Served>,
        settle: Duration,
        now: Instant,
    ) -> Look {
        let missing: Vec<Served> = ours.difference(theirs).copied().collect();
        if missing.is_empty() {
            return Look::Covered;
        }
        if self.last.as_ref() != Some(theirs) {
            self.last = Some(theirs.clone());
            self.unchanged_since = Some(now);
        }
        let settled = self.unchanged_since.is_some_and(|t| now.duration_since(t) >= settle);
        if settled && !theirs.is_empty() { Look::Settled(missing) } else { Look::Waiting(missing) }
    }
}

/// A few of `missing`, for a log line.
fn some(missing: &[Served]) -> String {
    let mut shown: Vec<String> = missing.iter().take(5).map(Served::to_string).collect();
    if missing.len() > 5 {
        shown.push(format!("and {} more", missing.len() - 5));
    }
    shown.join(", ")
}

/// Waits until kube-proxy's rules are in place (see the module's text), or fails at `timeout`.
pub fn wait_for_kube_proxy(nl: &mut Netlink, table: &str, settle: Duration, timeout: Option<Duration>) -> Result<()> {
    let started = Instant::now();
    let mut progress = Progress::default();
    let mut said = None::<Instant>;
    tracing::info!(table, "waiting for kube-proxy's rules to serve what verdict's table serves before deleting it");
    loop {
        let ours = served_by_verdict(nl, table).context("reading verdict's table")?;
        let theirs = served_by_kube_proxy(nl);
        for line in &theirs.unreadable {
            tracing::debug!("could not read kube-proxy's rules: {line}");
        }
        let modes = theirs.found_in.iter().cloned().collect::<Vec<_>>().join(", ");
        match progress.look(&ours, &theirs.served, settle, Instant::now()) {
            Look::Covered => {
                tracing::info!(
                    served = ours.len(),
                    kube_proxy = %modes,
                    waited = ?started.elapsed(),
                    "kube-proxy's rules serve every Service address and NodePort verdict's table serves"
                );
                return Ok(());
            }
            Look::Settled(missing) => {
                tracing::warn!(
                    kube_proxy = %modes,
                    missing = missing.len(),
                    "kube-proxy's rules have not changed for {settle:?} and lack {}: counted as Services deleted (or left without endpoints) since verdict stopped",
                    some(&missing)
                );
                return Ok(());
            }
            Look::Waiting(missing) => {
                if said.is_none_or(|t| t.elapsed() >= SAY_EVERY) {
                    said = Some(Instant::now());
                    tracing::info!(
                        kube_proxy = if modes.is_empty() { "no rules yet" } else { modes.as_str() },
                        served = ours.len() - missing.len(),
                        of = ours.len(),
                        "waiting for kube-proxy's rules; they lack {}",
                        some(&missing)
                    );
                }
            }
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            bail!(
                "kube-proxy's rules did not serve what verdict's table serves within {timeout:?}: table inet {table} kept"
            );
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> Served {
        Served::Address { addr: std::net::Ipv4Addr::new(10, 96, 0, last).into(), proto: 6, port: 80 }
    }

    #[test]
    fn covered_at_once_when_kube_proxy_serves_everything() {
        let ours: BTreeSet<Served> = [addr(1), addr(2)].into();
        let theirs: BTreeSet<Served> = [addr(1), addr(2), addr(3)].into();
        let mut p = Progress::default();
        assert_eq!(p.look(&ours, &theirs, Duration::from_secs(60), Instant::now()), Look::Covered);
    }

    #[test]
    fn what_kube_proxy_lacks_counts_as_deleted_only_once_its_rules_settle() {
        let ours: BTreeSet<Served> = [addr(1), addr(2)].into();
        let settle = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut p = Progress::default();
        // No rules at all: never settled, however long.
        assert_eq!(p.look(&ours, &BTreeSet::new(), settle, t0), Look::Waiting(vec![addr(1), addr(2)]));
        assert!(matches!(p.look(&ours, &BTreeSet::new(), settle, t0 + settle * 3), Look::Waiting(_)));
        // Some rules: settled only after they stay unchanged for the settle time.
        let some: BTreeSet<Served> = [addr(1)].into();
        let t1 = t0 + settle * 4;
        assert_eq!(p.look(&ours, &some, settle, t1), Look::Waiting(vec![addr(2)]));
        assert_eq!(p.look(&ours, &some, settle, t1 + settle / 2), Look::Waiting(vec![addr(2)]));
        // A change restarts the clock.
        let more: BTreeSet<Served> = [addr(1), addr(3)].into();
        assert_eq!(p.look(&ours, &more, settle, t1 + settle), Look::Waiting(vec![addr(2)]));
        assert_eq!(p.look(&ours, &more, settle, t1 + settle + settle / 2), Look::Waiting(vec![addr(2)]));
        assert_eq!(p.look(&ours, &more, settle, t1 + settle * 2), Look::Settled(vec![addr(2)]));
    }
}
