//! A plan made ready for the kernel it goes to: what a transaction must leave for later on
//! this kernel (chain deletions, before 6.4), and what a full reconcile must leave alone in the
//! table it read (the chains of a running `verdict trace`). The sync loop only sends what
//! comes out of here: it never edits a [`Transaction`].

use crate::diff::diff;
use crate::observe::Observed;
use crate::ruleset::Ruleset;
use crate::trace::chains::set_aside_live;
use crate::transaction::Transaction;

/// How plans are staged for the kernel at hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Staging {
    /// Chains that go out of use are flushed, and deleted by a later transaction
    /// ([`Transaction::delete_chains`]): kernels without mainline 628bd3e49cba (6.4) refuse to
    /// delete a chain whose last reference the same batch removes.
    pub defer_chain_deletion: bool,
}

/// A transaction ready to send, and the chains it flushes for a later deletion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Staged {
    /// What to send.
    pub transaction: Transaction,
    /// Chains flushed instead of deleted (see [`Staging::defer_chain_deletion`]).
    pub deferred_chains: Vec<String>,
}

/// A full reconcile's plan.
#[derive(Debug)]
pub struct Reconcile {
    /// What to send.
    pub staged: Staged,
    /// The table once it is committed.
    pub result: Ruleset,
    /// Chains of a `verdict trace` still running, left alone, with their deadlines.
    pub live_traces: Vec<(String, u64)>,
    /// Objects in the table verdict did not write (replaced), described for the log.
    pub foreign: Vec<String>,
    /// The generation the table was read at: commit at it (see
    /// [`crate::netlink::Netlink::commit_planned`]).
    pub read_at: Option<u32>,
}

impl Staging {
    /// `tx` made ready for this kernel.
    pub fn stage(&self, mut tx: Transaction) -> Staged {
        let deferred_chains = if self.defer_chain_deletion { tx.take_chain_deletions() } else { Vec::new() };
        Staged { transaction: tx, deferred_chains }
    }

    /// The plan that makes `current` (the table as read, `None` when absent) `desired`, at
    /// `now` (seconds since the epoch, for trace deadlines). A `verdict trace` in progress is
    /// left alone; one that died without removing its chains (its deadline passed), and a
    /// `trace-` chain that is not what `verdict trace` writes (listed in `foreign`), are
    /// deleted like any chain verdict did not render.
    pub fn reconcile(&self, current: Option<Observed>, desired: &Ruleset, now: u64) -> Reconcile {
        let (mut live_traces, mut foreign, mut read_at) = (Vec::new(), Vec::new(), None);
        let current = current.map(|mut c| {
            let forged;
            (live_traces, forged) = set_aside_live(&mut c.ruleset, now);
            foreign = std::mem::take(&mut c.foreign);
            foreign.extend(forged);
            read_at = c.generation;
            c.ruleset
        });
        let plan = diff(current.as_ref(), desired);
        Reconcile { staged: self.stage(plan.transaction), result: plan.result, live_traces, foreign, read_at }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::{Chain, Table};
    use crate::transaction::Op;

    fn deleting(chains: &[&str]) -> Transaction {
        let mut tx = Transaction::new("kube-proxy");
        for c in chains {
            tx.ops.push(Op::FlushChain(c.to_string()));
            tx.ops.push(Op::DeleteChain(c.to_string()));
        }
        tx
    }

    #[test]
    fn without_deferring_a_transaction_is_left_whole() {
        let staged = Staging::default().stage(deleting(&["a"]));
        assert!(staged.deferred_chains.is_empty());
        assert_eq!(staged.transaction.ops.len(), 2);
    }

    #[test]
    fn deferring_keeps_the_flushes_and_takes_the_deletions() {
        let staged = Staging { defer_chain_deletion: true }.stage(deleting(&["a", "b"]));
        assert_eq!(staged.transaction.ops, vec![Op::FlushChain("a".into()), Op::FlushChain("b".into())]);
        assert_eq!(staged.deferred_chains, ["a", "b"]);
    }

    #[test]
    fn a_reconcile_leaves_a_live_trace_alone_and_deletes_an_expired_one() {
        let table = Table { name: "kube-proxy".into(), comment: None };
        let mut read = Ruleset::new(table.clone());
        let spec = |until| crate::trace::chains::TraceSpec {
            dst: "172.30.0.1".parse().unwrap(),
            port: 80,
            protocol: verdict_net::Protocol::Tcp,
            src: None,
            until,
        };
        for chain in crate::trace::chains::trace_chains(&spec(500), "1")
            .into_iter()
            .chain(crate::trace::chains::trace_chains(&spec(2000), "2"))
        {
            read.chains.insert(chain.name.clone(), chain);
        }
        read.chains.insert("services".into(), Chain::regular("services", Vec::new()));
        let observed =
            Observed { ruleset: read, foreign: Vec::new(), handles: Default::default(), generation: Some(9) };
        let desired = Ruleset::new(table);
        let plan = Staging::default().reconcile(Some(observed), &desired, 1000);
        let live: Vec<&str> = plan.live_traces.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(live, ["trace-2-output-until-2000", "trace-2-prerouting-until-2000"]);
        let deleted: Vec<&Op> =
            plan.staged.transaction.ops.iter().filter(|op| matches!(op, Op::DeleteChain(_))).collect();
        assert_eq!(deleted.len(), 3, "the expired trace's two chains and `services`: {deleted:?}");
        assert!(deleted.iter().all(|op| !matches!(op, Op::DeleteChain(c) if c.starts_with("trace-2"))));
        assert_eq!(plan.read_at, Some(9));
    }
}
