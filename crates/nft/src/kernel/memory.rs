//! A kernel in memory: `inet` tables as rulesets, a generation, and the refusals the real one
//! makes that the sync loop must survive (a busy chain, a refused batch, a generation that
//! moved since the table was read).

use super::Kernel;
use crate::netlink::firewalls::DroppingChain;
use crate::netlink::tables::NamedObject;
use crate::netlink::{CommitStats, NetlinkError};
use crate::observe::Observed;
use crate::rule::{Item, Stmt};
use crate::ruleset::{ElemData, Flowtable, Ruleset};
use crate::snapshot::Snapshot;
use crate::transaction::{Op, Transaction};
use nix::errno::Errno;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// A refusal planned for a later commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refuse {
    /// The batch is refused with this errno on its first operation; nothing is applied.
    Errno(Errno),
    /// Another program commits between the sync's read and its commit: the generation moves.
    CommitAfterRead,
}

/// A kernel in memory; clones share it (a restarted loop sees what the previous one left).
#[derive(Clone, Debug, Default)]
pub struct MemoryKernel {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    generation: u32,
    tables: BTreeMap<String, Ruleset>,
    planned: VecDeque<Refuse>,
    /// Kernels before 6.4: a chain whose last reference goes in the same batch is still busy.
    busy_until_committed: bool,
    commits: usize,
    /// Objects of each transaction committed.
    sizes: Vec<usize>,
    /// The commit (counted from 0 over all commits) refused with this errno.
    refuse_at: Option<(usize, Errno)>,
    dropping: Vec<DroppingChain>,
}

impl MemoryKernel {
    /// An empty kernel (6.4 or later).
    pub fn new() -> MemoryKernel {
        MemoryKernel::default()
    }

    /// An empty kernel before 6.4: deleting a chain whose last reference the same batch
    /// deletes is refused with EBUSY.
    pub fn before_6_4() -> MemoryKernel {
        let kernel = MemoryKernel::default();
        kernel.lock().busy_until_committed = true;
        kernel
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table as the kernel holds it.
    pub fn table(&self, name: &str) -> Option<Ruleset> {
        self.lock().tables.get(name).cloned()
    }

    /// Another program changes table `name` (it must exist): the generation moves, as it does
    /// for any commit.
    pub fn edit(&self, name: &str, change: impl FnOnce(&mut Ruleset)) {
        let mut state = self.lock();
        change(state.tables.get_mut(name).expect("the table exists"));
        state.generation = state.generation.wrapping_add(1);
    }

    /// Plans `refusal` for the next commit (or read, for [`Refuse::CommitAfterRead`]).
    pub fn refuse(&self, refusal: Refuse) {
        self.lock().planned.push_back(refusal);
    }

    /// Reports `chain` as a default-drop chain of another table.
    pub fn add_dropping_chain(&self, chain: DroppingChain) {
        self.lock().dropping.push(chain);
    }

    /// Refuses the commit that comes after `skip` more successful ones, with `errno`.
    pub fn refuse_after(&self, skip: usize, errno: Errno) {
        let mut state = self.lock();
        state.refuse_at = Some((state.commits + skip, errno));
    }

    /// The objects of each transaction committed so far, in order.
    pub fn commit_sizes(&self) -> Vec<usize> {
        self.lock().sizes.clone()
    }

    /// Transactions committed so far.
    pub fn commits(&self) -> usize {
        self.lock().commits
    }
}

impl Kernel for MemoryKernel {
    fn generation(&mut self) -> Result<u32, NetlinkError> {
        Ok(self.lock().generation)
    }

    /// The whole table, always: reading memory costs nothing, so saved elements are not used.
    fn read(&mut self, table: &str, _known: &Snapshot) -> Result<Option<Observed>, NetlinkError> {
        let mut state = self.lock();
        let observed = state.tables.get(table).map(|ruleset| Observed {
            ruleset: ruleset.clone(),
            foreign: Vec::new(),
            handles: Default::default(),
            generation: Some(state.generation),
        });
        if state.planned.front() == Some(&Refuse::CommitAfterRead) {
            state.planned.pop_front();
            state.generation = state.generation.wrapping_add(1);
        }
        Ok(observed)
    }

    fn commit(&mut self, tx: &Transaction, read_at: Option<u32>) -> Result<CommitStats, NetlinkError> {
        if tx.is_empty() {
            return Ok(CommitStats::default());
        }
        let mut state = self.lock();
        if let Some(generation) = read_at.filter(|g| *g != state.generation) {
            return Err(NetlinkError::Changed(generation));
        }
        if let Some(Refuse::Errno(errno)) = state.planned.front().copied() {
            state.planned.pop_front();
            return Err(rejected(tx, 0, errno));
        }
        if let Some((at, errno)) = state.refuse_at
            && at == state.commits
        {
            state.refuse_at = None;
            return Err(rejected(tx, 0, errno));
        }
        let before = state.tables.get(&tx.table).map(chain_references).unwrap_or_default();
        let mut table = state.tables.get(&tx.table).cloned();
        for (index, op) in tx.ops.iter().enumerate() {
            apply(&mut table, op, &before, state.busy_until_committed).map_err(|errno| rejected(tx, index, errno))?;
        }
        match table {
            Some(t) => state.tables.insert(tx.table.clone(), t),
            None => state.tables.remove(&tx.table),
        };
        state.generation = state.generation.wrapping_add(1);
        state.commits += 1;
        state.sizes.push(tx.object_count());
        Ok(CommitStats { messages: tx.ops.len() + 2, ..CommitStats::default() })
    }

    fn dropping_chains(&mut self, _own_table: &str) -> Result<Vec<DroppingChain>, NetlinkError> {
        Ok(self.lock().dropping.clone())
    }

    fn tables_and_chains(&mut self) -> Result<Vec<NamedObject>, NetlinkError> {
        Ok(Vec::new())
    }

    fn flowtables(&mut self, table: &str) -> Result<Vec<Flowtable>, NetlinkError> {
        Ok(self.lock().tables.get(table).map(|t| t.flowtables.values().cloned().collect()).unwrap_or_default())
    }
}

fn rejected(tx: &Transaction, index: usize, errno: Errno) -> NetlinkError {
    let op = tx.ops.get(index).map(Op::describe).unwrap_or_default();
    NetlinkError::Rejected { index, op, errno, detail: None, others: 0 }
}

/// Applies one operation as the kernel does, or says which errno it refuses it with.
/// `referenced_before`: chains referenced before the batch (see [`State::busy_until_committed`]).
fn apply(
    table: &mut Option<Ruleset>,
    op: &Op,
    referenced_before: &BTreeSet<String>,
    old_kernel: bool,
) -> Result<(), Errno> {
    if let Op::AddTable(t) = op {
        table.get_or_insert_with(|| Ruleset::new(t.clone()));
        return Ok(());
    }
    let rs = table.as_mut().ok_or(Errno::ENOENT)?;
    match op {
        Op::AddTable(_) => {}
        Op::DeleteTable => *table = None,
        Op::AddChain { name, base } => {
            rs.chains.entry(name.clone()).or_insert_with(|| crate::ruleset::Chain {
                name: name.clone(),
                base: *base,
                rules: Vec::new(),
            });
        }
        Op::FlushChain(name) => rs.chains.get_mut(name).ok_or(Errno::ENOENT)?.rules.clear(),
        Op::DeleteChain(name) => {
            let chain = rs.chains.get(name).ok_or(Errno::ENOENT)?;
            let busy = !chain.rules.is_empty()
                || chain_references(rs).contains(name)
                || (old_kernel && referenced_before.contains(name));
            if busy {
                return Err(Errno::EBUSY);
            }
            rs.chains.remove(name);
        }
        Op::AddRule { chain, rule } => {
            if rule.flowtable_refs().any(|f| !rs.flowtables.contains_key(f)) {
                return Err(Errno::ENOENT);
            }
            rs.chains.get_mut(chain).ok_or(Errno::ENOENT)?.rules.push(rule.clone())
        }
        Op::AddSet(decl) => {
            rs.sets.entry(decl.name.clone()).or_insert_with(|| crate::ruleset::Set::new(decl.clone()));
        }
        Op::DeleteSet(name) => {
            let used = rs.chains.values().flat_map(|c| &c.rules).any(|r| r.set_refs().any(|s| s == name));
            if used {
                return Err(Errno::EBUSY);
            }
            rs.sets.remove(name).ok_or(Errno::ENOENT)?;
        }
        Op::AddElements { set, elements, .. } => {
            let set = rs.sets.get_mut(set).ok_or(Errno::ENOENT)?;
            let map = Arc::make_mut(&mut set.elements);
            for (key, elem) in elements.iter() {
                map.insert(key, elem);
            }
        }
        Op::DeleteElements { set, keys, .. } => {
            let set = rs.sets.get_mut(set).ok_or(Errno::ENOENT)?;
            let map = Arc::make_mut(&mut set.elements);
            for key in keys {
                map.remove(key).ok_or(Errno::ENOENT)?;
            }
        }
        // Every device name exists here: the memory kernel has no interfaces to check against.
        Op::AddFlowtable(ft) => {
            let have = rs.flowtables.entry(ft.name.clone()).or_insert_with(|| Flowtable::new(ft.name.clone()));
            have.priority = ft.priority;
            have.devices.extend(ft.devices.iter().cloned());
        }
        Op::DeleteFlowtableDevices { name, devices } => {
            let ft = rs.flowtables.get_mut(name).ok_or(Errno::ENOENT)?;
            for d in devices {
                if !ft.devices.remove(d) {
                    return Err(Errno::ENOENT);
                }
            }
        }
        Op::DeleteFlowtable(name) => {
            if rs.chains.values().flat_map(|c| &c.rules).any(|r| r.flowtable_refs().any(|f| f == name)) {
                return Err(Errno::EBUSY);
            }
            rs.flowtables.remove(name).ok_or(Errno::ENOENT)?;
        }
    }
    Ok(())
}

/// Chains a rule or a verdict map element of `rs` jumps or goes to.
fn chain_references(rs: &Ruleset) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for rule in rs.chains.values().flat_map(|c| &c.rules) {
        for item in &rule.items {
            match item {
                Item::Stmt(Stmt::Verdict(v)) => refs.extend(v.chain().map(str::to_string)),
                Item::Stmt(Stmt::AnonVmap { entries, .. }) => {
                    refs.extend(entries.iter().filter_map(|(_, v)| v.chain().map(str::to_string)))
                }
                _ => {}
            }
        }
    }
    for set in rs.sets.values() {
        for (_, elem) in set.elements.iter() {
            if let Some(ElemData::Verdict(v)) = &elem.data {
                refs.extend(v.chain().map(str::to_string));
            }
        }
    }
    refs
}
