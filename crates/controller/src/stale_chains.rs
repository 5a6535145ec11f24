//! Deferred deletion of chains that went out of use, for kernels without mainline 628bd3e49cba
//! (6.4; backported to 6.1.36 and 5.10.188).
//!
//! Those kernels drop the references an anonymous vmap's elements hold on the chains they jump
//! to only when the set is destroyed, after the commit, so a transaction that flushes the rule
//! holding the vmap and deletes those chains fails with `EBUSY`, and so would every retry.
//! Like upstream kube-proxy, verdict then flushes such chains in the sync that stops using them
//! and deletes them in a separate transaction at least [`STALE_CHAIN_DELAY`] later, unless a
//! sync in between wants them again.
//!
//! Deferring is switched on from the start on a kernel before 6.4 (the agent reads `uname`), and
//! by itself the first time the kernel refuses a chain deletion with `EBUSY`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use verdict_nft::netlink::NetlinkError;
use verdict_nft::{Staging, Transaction};

/// How long a flushed chain waits before it is deleted (upstream waits one second).
pub const STALE_CHAIN_DELAY: Duration = Duration::from_secs(1);

/// Chains flushed and waiting for deletion, and whether chain deletions are deferred at all.
#[derive(Debug, Default)]
pub struct StaleChains {
    deferring: bool,
    flushed: BTreeMap<String, Instant>,
}

impl StaleChains {
    /// Deferring from the start, or only once the kernel asks for it.
    pub fn new(deferring: bool) -> StaleChains {
        StaleChains { deferring, flushed: BTreeMap::new() }
    }

    /// How plans are staged for this kernel: with chain deletions deferred or not. Hand the
    /// chains a staged transaction deferred to [`Self::flushed`] once it has committed.
    pub fn staging(&self) -> Staging {
        Staging { defer_chain_deletion: self.deferring }
    }

    /// Records chains a committed transaction flushed instead of deleting.
    pub fn flushed(&mut self, chains: Vec<String>, now: Instant) {
        for chain in chains {
            self.flushed.entry(chain).or_insert(now);
        }
    }

    /// Looks at a failed commit: a chain deletion refused with `EBUSY` means this kernel needs
    /// deferring. Returns true when that switched deferring on.
    pub fn learn(&mut self, error: &NetlinkError) -> bool {
        let busy_chain = matches!(error, NetlinkError::Rejected { op, errno, .. }
            if *errno == nix::errno::Errno::EBUSY && op.starts_with("delete chain"));
        let switched = busy_chain && !self.deferring;
        self.deferring |= busy_chain;
        switched
    }

    /// When the next deletion is due, if any chain waits.
    pub fn due_at(&self) -> Option<Instant> {
        self.flushed.values().min().map(|t| *t + STALE_CHAIN_DELAY)
    }

    /// Forgets the waiting chains the table uses again (a sync re-added them).
    pub fn forget_wanted(&mut self, wanted: impl Fn(&str) -> bool) {
        self.flushed.retain(|chain, _| !wanted(chain));
    }

    /// The chains whose wait is over, taken out of the waiting list. `None` when none is due.
    pub fn take_due(&mut self, table: &str, now: Instant) -> Option<Transaction> {
        let due: Vec<String> =
            self.flushed.iter().filter(|(_, t)| now >= **t + STALE_CHAIN_DELAY).map(|(c, _)| c.clone()).collect();
        if due.is_empty() {
            return None;
        }
        for chain in &due {
            self.flushed.remove(chain);
        }
        Some(Transaction::delete_chains(table, due))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_nft::transaction::Op;

    #[test]
    fn deferred_chains_are_deleted_after_the_delay_unless_wanted_again() {
        let mut stale = StaleChains::new(true);
        let t0 = Instant::now();
        stale.flushed(vec!["a".into(), "b".into()], t0);
        assert_eq!(stale.due_at(), Some(t0 + STALE_CHAIN_DELAY));

        assert!(stale.take_due("kube-proxy", t0 + Duration::from_millis(500)).is_none(), "too early");
        stale.forget_wanted(|c| c == "b");
        let later = stale.take_due("kube-proxy", t0 + STALE_CHAIN_DELAY).expect("a is due");
        assert_eq!(later.ops, vec![Op::DeleteChain("a".into())], "b is in use again");
        assert_eq!(stale.due_at(), None, "nothing waits any more");
    }

    #[test]
    fn a_busy_chain_deletion_switches_deferring_on_once() {
        let busy =
            |op: &str, errno| NetlinkError::Rejected { index: 7, op: op.to_string(), errno, detail: None, others: 0 };
        let mut stale = StaleChains::new(false);
        assert!(!stale.staging().defer_chain_deletion);
        assert!(!stale.learn(&busy("delete chain x", nix::errno::Errno::ENOENT)));
        assert!(!stale.learn(&busy("delete set x", nix::errno::Errno::EBUSY)));
        assert!(stale.learn(&busy("delete chain x", nix::errno::Errno::EBUSY)), "was still off");
        assert!(!stale.learn(&busy("delete chain y", nix::errno::Errno::EBUSY)), "already on");
        assert!(stale.staging().defer_chain_deletion, "on: deletions are deferred");
    }
}
