//! The kernel's copy of our table, read back into a [`Ruleset`].
//!
//! Used to adopt an existing table at start (so a restart writes only the difference), after a
//! failed transaction, and by the tests that check what the kernel holds against what was
//! rendered. Rules we cannot read (someone else wrote them) come back as a placeholder that
//! never equals a rendered rule, so the next diff rewrites that chain.

use crate::kernel_consts;
use crate::kernel_expr::{AnonSet, LowExpr, LowRule, SetRef};
use crate::netlink::udata::{parse_comment, parse_set_udata};
use crate::netlink::{Netlink, NetlinkError, TableDump};
use crate::raise::raise;
use crate::rule::{Rule, Selector};
use crate::ruleset::{
    BaseChain, Blob, Chain, ChainKind, DataSpec, Datatype, Elem, ElemData, ElementMap, Hook, KeySpec, Ruleset, Set,
    SetDecl, Table, Verdict,
};
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

const SET_ANONYMOUS: u32 = 0x1;
const SET_MAP: u32 = 0x8;
const SET_INTERVAL: u32 = 0x4;
const DATA_VERDICT: u32 = 0xffff_ff00;
/// NF_ACCEPT, as a chain policy.
const ACCEPT: u32 = kernel_consts::NF_ACCEPT as u32;

/// What the kernel holds.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The table as a ruleset.
    pub ruleset: Ruleset,
    /// Objects that are not verdict's (foreign rules, unreadable sets), described for the log.
    pub foreign: Vec<String>,
    /// Each rule's kernel handle: the chain and the rule's index in it (empty when the
    /// table was not read from the kernel).
    pub handles: HashMap<u64, (String, usize)>,
    /// The nftables generation read just before the table was (`None` when it was not read
    /// from the kernel): a transaction planned against it is committed at it (see
    /// [`Netlink::commit_planned`]).
    pub generation: Option<u32>,
}

/// Reads table `table` from the kernel; `None` when it does not exist.
pub fn observe(nl: &mut Netlink, table: &str) -> Result<Option<Observed>, NetlinkError> {
    observe_with_known_elements(nl, table, &Snapshot::default())
}

/// Reads table `table` from the kernel like [`observe`], except that the elements of the sets
/// `known` holds are taken from it instead of dumped (see [`crate::snapshot`]: only valid when
/// nothing was committed since `known` was saved).
pub fn observe_with_known_elements(
    nl: &mut Netlink,
    table: &str,
    known: &Snapshot,
) -> Result<Option<Observed>, NetlinkError> {
    let mut attempts = 0;
    loop {
        // Read first: a commit during the dump then makes the plan's commit fail, not succeed
        // against a table that moved.
        let generation = nl.genid()?;
        match nl.dump(table, |set| !known.sets.contains_key(set)) {
            Ok(None) => return Ok(None),
            Ok(Some(dump)) => {
                let lookups: Vec<String> = dump
                    .sets
                    .iter()
                    .filter(|(w, _)| w.flags & SET_INTERVAL == 0)
                    .map(|(w, _)| w.name.clone())
                    .collect();
                if let Some(why) = spot_check(nl, table, known, &lookups)? {
                    tracing::warn!("the saved elements do not describe the kernel's table ({why}): reading them all");
                    return observe(nl, table);
                }
                let mut observed = read_dump(table, dump);
                observed.generation = Some(generation);
                for (name, set) in observed.ruleset.sets.iter_mut() {
                    if let Some(elements) = known.sets.get(name) {
                        set.elements = Arc::clone(elements);
                    }
                }
                return Ok(Some(observed));
            }
            Err(NetlinkError::Protocol(m)) if m.contains("interrupted") && attempts < 5 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Elements looked up in the kernel per set before saved ones are adopted.
const SPOT_CHECKS: usize = 4;

/// Looks up a few of each set's saved elements in the kernel (the first, the last and some
/// between; sets in `lookups` only: an interval set's lookup matches ranges, not keys), and
/// says which one the kernel does not hold as saved. A table that is not the one saved (a
/// generation that came round again) is caught here; an element changed one by one behind
/// the saved state's back is left to the periodic full sync, which reads them all.
fn spot_check(
    nl: &mut Netlink,
    table: &str,
    known: &Snapshot,
    lookups: &[String],
) -> Result<Option<String>, NetlinkError> {
    for (name, elements) in known.sets.iter().filter(|(name, _)| lookups.contains(name)) {
        let n = elements.len();
        let picks: std::collections::BTreeSet<usize> =
            (0..SPOT_CHECKS).map(|i| i * n.saturating_sub(1) / (SPOT_CHECKS - 1).max(1)).filter(|&i| i < n).collect();
        let last = picks.last().copied().unwrap_or(0);
        for (key, elem) in elements.iter().take(last + 1).enumerate().filter(|(i, _)| picks.contains(i)).map(|(_, e)| e)
        {
            let Some(held) = nl.get_element(table, name, key.as_slice())? else {
                return Ok(Some(format!("set {name} has no element {key:?}")));
            };
            let data = match (&held.verdict, &held.data) {
                (Some((code, chain)), _) => verdict(*code, chain).map(ElemData::Verdict),
                (None, Some(d)) => Blob::try_new(d).map(ElemData::Value),
                (None, None) => None,
            };
            if data != elem.data {
                return Ok(Some(format!("element {key:?} of set {name} holds other data")));
            }
        }
    }
    Ok(None)
}

/// The placeholder for a rule verdict cannot read.
pub fn unreadable(what: &str) -> Rule {
    Rule { items: Vec::new(), comment: Some(format!("unreadable rule: {what}")) }
}

fn decompose(type_id: u32) -> Option<Vec<Datatype>> {
    let mut parts = Vec::new();
    let mut id = type_id;
    while id > 0 {
        parts.push(Datatype::from_id(id & 0x3f)?);
        id >>= 6;
    }
    parts.reverse();
    (!parts.is_empty()).then_some(parts)
}

fn verdict(code: i32, chain: &Option<String>) -> Option<Verdict> {
    Some(match (code, chain) {
        (kernel_consts::NF_ACCEPT, _) => Verdict::Accept,
        (kernel_consts::NF_DROP, _) => Verdict::Drop,
        (kernel_consts::NFT_RETURN, _) => Verdict::Return,
        (kernel_consts::NFT_JUMP, Some(c)) => Verdict::Jump(Arc::from(c.as_str())),
        (kernel_consts::NFT_GOTO, Some(c)) => Verdict::Goto(Arc::from(c.as_str())),
        _ => return None,
    })
}

/// How a chain read from the kernel hooks in, as verdict writes base chains: `None` for a
/// regular chain, and also for a base chain whose type verdict does not write or whose policy
/// is not accept. verdict's base chains all accept, so a diff against such a chain deletes it
/// and adds it again (another program's `policy drop` is repaired), and a `trace-` chain with
/// it is not `verdict trace`'s.
pub(crate) fn base_chain(hook: Option<&(u32, i32, String)>, policy: Option<u32>) -> Option<BaseChain> {
    let (hook, priority, kind) = hook?;
    if policy.is_some_and(|p| p != ACCEPT) {
        return None;
    }
    let kind = match kind.as_str() {
        "nat" => ChainKind::Nat,
        "filter" => ChainKind::Filter,
        _ => return None,
    };
    Some(BaseChain { kind, hook: Hook::from_number(*hook)?, priority: *priority })
}

pub(crate) fn read_dump(table: &str, dump: TableDump) -> Observed {
    let mut rs = Ruleset::new(Table { name: table.to_string(), comment: dump.comment.clone() });
    let mut foreign = Vec::new();
    let mut handles = HashMap::new();
    let mut comments: HashMap<String, Arc<str>> = HashMap::new();
    let mut anon: HashMap<String, AnonSet> = HashMap::new();

    for (w, elems) in dump.sets {
        let udata = parse_set_udata(&w.udata);
        if w.flags & SET_ANONYMOUS != 0 {
            let Some(key_type) = Datatype::from_id(w.key_type) else {
                foreign.push(format!("anonymous set {} of type {}", w.name, w.key_type));
                continue;
            };
            let key_selector = udata.key_typeof.as_ref().and_then(|s| s.first().copied()).unwrap_or(Selector::L4Proto);
            anon.insert(
                w.name.clone(),
                AnonSet {
                    key_type,
                    key_selector,
                    verdict_map: w.flags & SET_MAP != 0,
                    elements: elems
                        .iter()
                        .map(|e| (e.key.clone(), e.verdict.as_ref().and_then(|(c, ch)| verdict(*c, ch))))
                        .collect(),
                },
            );
            continue;
        }
        let key = match udata.key_typeof {
            Some(sels) => KeySpec::Typeof(sels),
            None => match decompose(w.key_type) {
                Some(types) => KeySpec::Type(types),
                None => {
                    foreign.push(format!("set {} has key type {:#x}", w.name, w.key_type));
                    KeySpec::Type(Vec::new())
                }
            },
        };
        let data = if w.flags & SET_MAP == 0 {
            None
        } else if w.data_type == Some(DATA_VERDICT) {
            Some(DataSpec::Verdict)
        } else {
            match udata.data_typeof {
                Some(sels) => Some(DataSpec::Typeof(sels)),
                None => {
                    foreign.push(format!("map {} has data type {:?}", w.name, w.data_type));
                    Some(DataSpec::Typeof(Vec::new()))
                }
            }
        };
        let decl = SetDecl {
            name: w.name.clone(),
            key,
            data,
            size: w.size,
            timeout: w.timeout_ms.map(|ms| (ms / 1000) as u32),
            comment: udata.comment,
            counter: w.counter,
        };
        let mut set = Set::new(decl);
        let mut elements = ElementMap::new();
        for e in elems {
            let Some(key) = Blob::try_new(&e.key) else {
                foreign.push(format!("element of {} with a {}-byte key", w.name, e.key.len()));
                continue;
            };
            let comment = e
                .udata
                .as_deref()
                .and_then(parse_comment)
                .map(|c| comments.entry(c.clone()).or_insert_with(|| Arc::from(c.as_str())).clone());
            let data = match (&e.verdict, &e.data) {
                (Some((code, chain)), _) => verdict(*code, chain).map(ElemData::Verdict),
                (None, Some(d)) => Blob::try_new(d).map(ElemData::Value),
                (None, None) => None,
            };
            elements.insert(key, Elem { data, comment });
        }
        set.elements = Arc::new(elements);
        rs.sets.insert(w.name, set);
    }

    for c in dump.chains {
        if c.hook.is_some() && c.policy.is_some_and(|p| p != ACCEPT) {
            foreign.push(format!("base chain {} has policy drop", c.name));
        }
        let base = base_chain(c.hook.as_ref(), c.policy);
        rs.chains.insert(c.name.clone(), Chain { name: c.name, base, rules: Vec::new() });
    }

    for wire in dump.rules {
        let wire = match wire {
            Ok(w) => w,
            Err(what) => {
                foreign.push(format!("a rule libnftnl cannot parse ({what})"));
                continue;
            }
        };
        let mut low = LowRule { comment: wire.udata.as_deref().and_then(parse_comment), ..LowRule::default() };
        for expr in wire.exprs {
            low.exprs.push(match expr {
                LowExpr::Lookup { sreg, dreg, set: SetRef::Named(name), invert } if anon.contains_key(&name) => {
                    low.anon_sets.push(anon[&name].clone());
                    LowExpr::Lookup { sreg, dreg, set: SetRef::Anon(low.anon_sets.len() - 1), invert }
                }
                other => other,
            });
        }
        let rule = match raise(&low) {
            Ok(rule) => rule,
            Err(e) => {
                foreign.push(format!("chain {}: {e}", wire.chain));
                unreadable(&e.to_string())
            }
        };
        let rules = &mut rs
            .chains
            .entry(wire.chain.clone())
            .or_insert_with(|| Chain::regular(wire.chain.clone(), Vec::new()))
            .rules;
        handles.insert(wire.handle, (wire.chain.clone(), rules.len()));
        rules.push(rule);
    }
    rs.flowtables = dump.flowtables.into_iter().map(|ft| (ft.name.clone(), ft)).collect();
    Observed { ruleset: rs, foreign, handles, generation: None }
}
