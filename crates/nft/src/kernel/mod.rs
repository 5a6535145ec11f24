//! The kernel as the sync loop sees it: a generation, a table to read, transactions to commit,
//! and other tables to look at. [`Netlink`] is the real one; [`MemoryKernel`] applies
//! transactions to rulesets in memory, so that the loop's scenarios (restart adoption, repair
//! of another program's change, deferred chain deletion, refused commits) run as unit tests
//! without CAP_NET_ADMIN. The namespace tests stay for the kernel's truth.

mod memory;

pub use memory::{MemoryKernel, Refuse};

use crate::netlink::firewalls::DroppingChain;
use crate::netlink::tables::NamedObject;
use crate::netlink::{CommitStats, Netlink, NetlinkError};
use crate::observe::Observed;
use crate::ruleset::Flowtable;
use crate::snapshot::Snapshot;
use crate::transaction::Transaction;

/// What the sync loop needs from the kernel.
pub trait Kernel: Send {
    /// The current ruleset generation (it moves with every commit, by anybody).
    fn generation(&mut self) -> Result<u32, NetlinkError>;

    /// Reads `table` (`None` when it does not exist), taking the elements of the sets `known`
    /// holds from it where they check out (see [`crate::observe::observe_with_known_elements`]).
    fn read(&mut self, table: &str, known: &Snapshot) -> Result<Option<Observed>, NetlinkError>;

    /// Commits `tx` atomically; planned against the table as read at `read_at`, if given (see
    /// [`Netlink::commit_planned`]).
    fn commit(&mut self, tx: &Transaction, read_at: Option<u32>) -> Result<CommitStats, NetlinkError>;

    /// Base chains of other tables that drop what they do not accept.
    fn dropping_chains(&mut self, own_table: &str) -> Result<Vec<DroppingChain>, NetlinkError>;

    /// Every table and chain of the namespace.
    fn tables_and_chains(&mut self) -> Result<Vec<NamedObject>, NetlinkError>;

    /// The flowtables of `table`, with the devices they hold now (a cheap read: the fast
    /// path's devices are reconciled against it, not against the whole table).
    fn flowtables(&mut self, table: &str) -> Result<Vec<Flowtable>, NetlinkError>;
}

impl Kernel for Netlink {
    fn generation(&mut self) -> Result<u32, NetlinkError> {
        self.genid()
    }

    fn read(&mut self, table: &str, known: &Snapshot) -> Result<Option<Observed>, NetlinkError> {
        crate::observe::observe_with_known_elements(self, table, known)
    }

    fn commit(&mut self, tx: &Transaction, read_at: Option<u32>) -> Result<CommitStats, NetlinkError> {
        self.commit_planned(tx, read_at)
    }

    fn dropping_chains(&mut self, own_table: &str) -> Result<Vec<DroppingChain>, NetlinkError> {
        Netlink::dropping_chains(self, own_table)
    }

    fn tables_and_chains(&mut self) -> Result<Vec<NamedObject>, NetlinkError> {
        Netlink::tables_and_chains(self)
    }

    fn flowtables(&mut self, table: &str) -> Result<Vec<Flowtable>, NetlinkError> {
        Netlink::flowtables(self, table)
    }
}
